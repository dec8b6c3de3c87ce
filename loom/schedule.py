"""EventBridge schedule expressions, checked the way EventBridge checks them.

``sam deploy`` fails (the rule is rejected) on ``rate(5 minute)``,
``rate(0 minutes)``, ``rate(1 minutes)`` or a malformed cron. The local stack
reads the same template, so it rejects the same expressions when it reads it,
instead of running a schedule that AWS would never accept.

Rules (EventBridge user guide, "rate expressions" and "cron expressions"):
- ``rate(value unit)``: value a positive integer; unit minute|hour|day when the
  value is 1, minutes|hours|days otherwise.
- ``cron(min hour day-of-month month day-of-week year)``: six fields with their
  ranges and wildcards; one of day-of-month and day-of-week must be ``?``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RATE = re.compile(r"^rate\((?P<value>[^\s()]+)\s+(?P<unit>[^\s()]+)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


class ScheduleError(ValueError):
    """A schedule expression EventBridge would reject."""


@dataclass(frozen=True)
class CronField:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # JAN..DEC or SUN..SAT, numbered from ``low``
    question: bool = False  # ``?`` allowed
    last: bool = False  # ``L`` allowed
    weekday: bool = False  # ``W`` allowed (nearest weekday)
    nth: bool = False  # ``#`` allowed (nth weekday of the month)


_CRON_FIELDS = (
    CronField("minutes", 0, 59),
    CronField("hours", 0, 23),
    CronField("day-of-month", 1, 31, question=True, last=True, weekday=True),
    CronField("month", 1, 12, names=_MONTHS),
    CronField("day-of-week", 1, 7, names=_DAYS, question=True, last=True, nth=True),
    CronField("year", 1970, 2199),
)


def rate_seconds(expression: str) -> int:
    """Seconds between runs of a valid ``rate(...)`` expression; ScheduleError otherwise."""
    match = _RATE.match(expression.strip())
    if not match:
        raise ScheduleError(f"{expression!r} is not rate(value unit), e.g. rate(5 minutes)")
    value, unit = match.group("value"), match.group("unit")
    if not value.isdigit() or int(value) < 1:
        raise ScheduleError(f"{expression!r}: the rate value must be a positive integer, not {value!r}")
    singular = unit.rstrip("s") if unit.endswith("s") else unit
    if singular not in _UNIT_SECONDS:
        raise ScheduleError(f"{expression!r}: the unit must be minute(s), hour(s) or day(s), not {unit!r}")
    count = int(value)
    wanted = singular if count == 1 else singular + "s"
    if unit != wanted:
        raise ScheduleError(f"{expression!r}: a value of {count} takes the unit {wanted!r}, not {unit!r}")
    return count * _UNIT_SECONDS[singular]


def _number(token: str, field: CronField) -> int:
    if field.names and token.upper() in field.names:
        return field.names.index(token.upper()) + field.low
    if not token.isdigit():
        raise ScheduleError(f"{field.name}: {token!r} is not a number")
    value = int(token)
    if not field.low <= value <= field.high:
        raise ScheduleError(f"{field.name}: {value} is outside {field.low}-{field.high}")
    return value


def _special(item: str, field: CronField) -> bool:
    """True when ``item`` is one of the field's special forms (L, W, #) and valid."""
    if field.last and item == "L":
        return True
    if field.last and field.name == "day-of-week" and item.endswith("L"):
        _number(item[:-1], field)  # 5L: the last Thursday
        return True
    if field.weekday and item.endswith("W") and item not in ("W",):
        base = item[:-1]
        if base != "L":
            _number(base, field)  # 15W: the weekday nearest the 15th; LW: the last weekday
        return True
    if field.nth and "#" in item:
        day, _, nth = item.partition("#")
        _number(day, field)
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise ScheduleError(f"{field.name}: {item!r} needs a week number 1-5 after #")
        return True
    return False


def _cron_item(item: str, field: CronField) -> None:
    if not item:
        raise ScheduleError(f"{field.name}: an empty list entry")
    if _special(item, field):
        return
    base, slash, step = item.partition("/")
    if slash and (not step.isdigit() or int(step) < 1):
        raise ScheduleError(f"{field.name}: {item!r} needs a positive increment after /")
    if base == "*":
        return
    low, dash, high = base.partition("-")
    _number(low, field)
    if dash:
        _number(high, field)


def check_cron(expression: str) -> None:
    """ScheduleError unless ``expression`` is a cron(...) EventBridge accepts."""
    text = expression.strip()
    if not (text.startswith("cron(") and text.endswith(")")):
        raise ScheduleError(f"{expression!r} is not cron(fields)")
    parts = text[5:-1].split()
    if len(parts) != len(_CRON_FIELDS):
        raise ScheduleError(f"{expression!r}: cron takes 6 fields (minutes hours day-of-month month day-of-week year)")
    for part, field in zip(parts, _CRON_FIELDS, strict=True):
        if part == "?":
            if not field.question:
                raise ScheduleError(f"{expression!r}: ? is allowed only in day-of-month or day-of-week")
            continue
        try:
            for item in part.split(","):
                _cron_item(item, field)
        except ScheduleError as exc:
            raise ScheduleError(f"{expression!r}: {exc}") from None
    if (parts[2] == "?") == (parts[4] == "?"):
        raise ScheduleError(f"{expression!r}: exactly one of day-of-month and day-of-week must be ?")


def check(expression: str) -> None:
    """ScheduleError unless EventBridge accepts ``expression`` as a rule's ScheduleExpression."""
    text = str(expression).strip()
    if text.startswith("rate("):
        rate_seconds(text)
    elif text.startswith("cron("):
        check_cron(text)
    else:
        raise ScheduleError(f"{expression!r} is neither rate(value unit) nor cron(fields)")
