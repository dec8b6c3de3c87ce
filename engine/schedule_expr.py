"""EventBridge schedule expressions: checked the way EventBridge checks them, and their fire times.

One parser for the kit and the engine. The kit (loom/schedule.py) rejects at ``loom up`` what
``sam deploy`` would reject in a template's Schedule event; the engine computes the fire
times of a workflow's ``schedule=`` (engine/schedules.py) from the same parse, without I/O.

Rules (EventBridge user guide, "rate expressions" and "cron expressions"):
- ``rate(value unit)``: value a positive integer; unit minute|hour|day when the value is 1,
  minutes|hours|days otherwise.
- ``cron(min hour day-of-month month day-of-week year)``: six fields with their ranges and
  wildcards; one of day-of-month and day-of-week must be ``?``. Times are UTC.

Fire times are whole minutes. A rate is aligned to the Unix epoch (``rate(1 hour)`` fires on
every full hour), not to when something was created, so every process computes the same
times from the expression alone.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum

from engine.errors import InvalidSchedule

_RATE = re.compile(r"^rate\((?P<value>[^\s()]+)\s+(?P<unit>[^\s()]+)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MINUTE = 60


class CatchUp(StrEnum):
    """What a schedule does with firings missed while nothing swept (an outage, a clock jump)."""

    RUN_ONCE = "run_once"  # one run, for the latest missed fire time, stands for all of them
    SKIP = "skip"  # none: the schedule goes on from the next fire time


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
_MINUTES, _HOURS, _DOM, _MONTH, _DOW, _YEAR = _CRON_FIELDS


@dataclass(frozen=True)
class DaySpec:
    """Which days of a month a cron's day-of-month or day-of-week field takes (None: ``?``)."""

    numbers: frozenset[int] = frozenset()  # days of the month, or weekdays 1 (SUN) to 7 (SAT)
    last_day: bool = False  # L in day-of-month
    last_weekday: bool = False  # LW
    nearest_weekday: frozenset[int] = frozenset()  # 15W
    last_of: frozenset[int] = frozenset()  # 5L in day-of-week: the month's last Thursday
    nth_of: frozenset[tuple[int, int]] = frozenset()  # 6#3: the third Friday


@dataclass(frozen=True)
class Cron:
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    years: tuple[int, ...]
    month_days: DaySpec | None
    week_days: DaySpec | None


@dataclass(frozen=True)
class Schedule:
    """A parsed expression: ``period`` seconds for a rate, ``cron`` for a cron."""

    expression: str
    period: int | None = None
    cron: Cron | None = None


def rate_seconds(expression: str) -> int:
    """Seconds between runs of a valid ``rate(...)`` expression; InvalidSchedule otherwise."""
    match = _RATE.match(expression.strip())
    if not match:
        raise InvalidSchedule(f"{expression!r} is not rate(value unit), e.g. rate(5 minutes)")
    value, unit = match.group("value"), match.group("unit")
    if not value.isdigit() or int(value) < 1:
        raise InvalidSchedule(f"{expression!r}: the rate value must be a positive integer, not {value!r}")
    singular = unit.rstrip("s") if unit.endswith("s") else unit
    if singular not in _UNIT_SECONDS:
        raise InvalidSchedule(f"{expression!r}: the unit must be minute(s), hour(s) or day(s), not {unit!r}")
    count = int(value)
    wanted = singular if count == 1 else singular + "s"
    if unit != wanted:
        raise InvalidSchedule(f"{expression!r}: a value of {count} takes the unit {wanted!r}, not {unit!r}")
    return count * _UNIT_SECONDS[singular]


def _number(token: str, field: CronField) -> int:
    if field.names and token.upper() in field.names:
        return field.names.index(token.upper()) + field.low
    if not token.isdigit():
        raise InvalidSchedule(f"{field.name}: {token!r} is not a number")
    value = int(token)
    if not field.low <= value <= field.high:
        raise InvalidSchedule(f"{field.name}: {value} is outside {field.low}-{field.high}")
    return value


@dataclass
class _Days:
    """What a day field's list entries add up to, while it is read."""

    numbers: set[int] = field(default_factory=set)
    last: bool = False
    last_weekday: bool = False
    nearest: set[int] = field(default_factory=set)
    last_of: set[int] = field(default_factory=set)
    nth: set[tuple[int, int]] = field(default_factory=set)


def _special(item: str, cron_field: CronField, days: _Days) -> bool:
    """True when ``item`` is one of the field's special forms (L, W, #), noted in ``days``."""
    if cron_field.last and item == "L":
        days.last = True
        return True
    if cron_field.last and cron_field is _DOW and item.endswith("L"):
        days.last_of.add(_number(item[:-1], cron_field))  # 5L: the last Thursday
        return True
    if cron_field.weekday and item.endswith("W") and item != "W":
        base = item[:-1]
        if base == "L":
            days.last_weekday = True  # LW: the month's last weekday
        else:
            days.nearest.add(_number(base, cron_field))  # 15W: the weekday nearest the 15th
        return True
    if cron_field.nth and "#" in item:
        day, _, nth = item.partition("#")
        weekday = _number(day, cron_field)
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise InvalidSchedule(f"{cron_field.name}: {item!r} needs a week number 1-5 after #")
        days.nth.add((weekday, int(nth)))
        return True
    return False


def _values(item: str, cron_field: CronField) -> set[int]:
    """The numbers of one list entry: ``*``, ``a``, ``a-b`` (wrapping past the top), each with ``/step``."""
    base, slash, step_text = item.partition("/")
    if slash and (not step_text.isdigit() or int(step_text) < 1):
        raise InvalidSchedule(f"{cron_field.name}: {item!r} needs a positive increment after /")
    step = int(step_text) if slash else 1
    if base == "*":
        low, high = cron_field.low, cron_field.high
    else:
        first, dash, last = base.partition("-")
        low = _number(first, cron_field)
        high = _number(last, cron_field) if dash else (cron_field.high if slash else low)
    top, bottom = cron_field.high, cron_field.low
    span = list(range(low, high + 1)) if low <= high else [*range(low, top + 1), *range(bottom, high + 1)]
    return set(span[::step])


def _field(part: str, cron_field: CronField) -> _Days:
    days = _Days()
    for item in part.split(","):
        if not item:
            raise InvalidSchedule(f"{cron_field.name}: an empty list entry")
        if not _special(item, cron_field, days):
            days.numbers |= _values(item, cron_field)
    return days


def _numbers(part: str, cron_field: CronField) -> tuple[int, ...]:
    return tuple(sorted(_field(part, cron_field).numbers))


def _day_spec(part: str, cron_field: CronField) -> DaySpec | None:
    if part == "?":
        return None
    days = _field(part, cron_field)
    week = cron_field is _DOW
    return DaySpec(
        numbers=frozenset(days.numbers | ({7} if week and days.last else set())),  # L alone: Saturday
        last_day=not week and days.last,
        last_weekday=days.last_weekday,
        nearest_weekday=frozenset(days.nearest),
        last_of=frozenset(days.last_of),
        nth_of=frozenset(days.nth),
    )


def parse_cron(expression: str) -> Cron:
    """The cron's fields; InvalidSchedule unless EventBridge accepts ``expression``."""
    text = expression.strip()
    if not (text.startswith("cron(") and text.endswith(")")):
        raise InvalidSchedule(f"{expression!r} is not cron(fields)")
    parts = text[5:-1].split()
    if len(parts) != len(_CRON_FIELDS):
        raise InvalidSchedule(
            f"{expression!r}: cron takes 6 fields (minutes hours day-of-month month day-of-week year)"
        )
    for part, cron_field in zip(parts, _CRON_FIELDS, strict=True):
        if part == "?" and not cron_field.question:
            raise InvalidSchedule(f"{expression!r}: ? is allowed only in day-of-month or day-of-week")
    if (parts[2] == "?") == (parts[4] == "?"):
        raise InvalidSchedule(f"{expression!r}: exactly one of day-of-month and day-of-week must be ?")
    try:
        return Cron(
            minutes=_numbers(parts[0], _MINUTES),
            hours=_numbers(parts[1], _HOURS),
            months=frozenset(_numbers(parts[3], _MONTH)),
            years=_numbers(parts[5], _YEAR),
            month_days=_day_spec(parts[2], _DOM),
            week_days=_day_spec(parts[4], _DOW),
        )
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"{expression!r}: {exc}") from None


def check_cron(expression: str) -> None:
    """InvalidSchedule unless ``expression`` is a cron(...) EventBridge accepts."""
    parse_cron(expression)


def parse(expression: object) -> Schedule:
    """InvalidSchedule unless EventBridge accepts ``expression`` as a rule's ScheduleExpression."""
    text = str(expression).strip()
    if text.startswith("rate("):
        return Schedule(text, period=rate_seconds(text))
    if text.startswith("cron("):
        return Schedule(text, cron=parse_cron(text))
    raise InvalidSchedule(f"{expression!r} is neither rate(value unit) nor cron(fields)")


def check(expression: object) -> None:
    parse(expression)


# ------------------------------------------------------------------ fire times


def _weekday(day: date) -> int:
    """EventBridge's day-of-week number: 1 (SUN) to 7 (SAT)."""
    return (day.weekday() + 1) % 7 + 1


def _nearest_weekday(year: int, month: int, wanted: int) -> int | None:
    """The weekday (Mon-Fri) nearest the ``wanted``th, within the month (EventBridge's ``W``)."""
    length = calendar.monthrange(year, month)[1]
    if wanted > length:
        return None
    kind = date(year, month, wanted).weekday()  # 5 Saturday, 6 Sunday
    if kind == 5:
        return wanted - 1 if wanted > 1 else wanted + 2
    if kind == 6:
        return wanted + 1 if wanted < length else wanted - 2
    return wanted


def _last_weekday(year: int, month: int, length: int) -> int:
    """The month's last Monday-to-Friday: always one of its last three days."""
    return max(d for d in range(length - 2, length + 1) if date(year, month, d).weekday() < 5)


def _month_day_matches(spec: DaySpec, day: date) -> bool:
    length = calendar.monthrange(day.year, day.month)[1]
    if day.day in spec.numbers or (spec.last_day and day.day == length):
        return True
    if spec.last_weekday and day.day == _last_weekday(day.year, day.month, length):
        return True
    return any(_nearest_weekday(day.year, day.month, n) == day.day for n in spec.nearest_weekday)


def _week_day_matches(spec: DaySpec, day: date) -> bool:
    weekday = _weekday(day)
    length = calendar.monthrange(day.year, day.month)[1]
    if weekday in spec.numbers:
        return True
    if weekday in spec.last_of and day.day + 7 > length:
        return True
    return (weekday, (day.day - 1) // 7 + 1) in spec.nth_of


def _day_matches(cron: Cron, day: date) -> bool:
    if day.month not in cron.months:
        return False
    if cron.month_days is not None:
        return _month_day_matches(cron.month_days, day)
    return cron.week_days is not None and _week_day_matches(cron.week_days, day)


def _epoch(day: date, hour: int, minute: int) -> float:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC).timestamp()


def _cron_next(cron: Cron, after: float) -> float | None:
    """The first fire time strictly after ``after``."""
    start = datetime.fromtimestamp((math.floor(after / MINUTE) + 1) * MINUTE, UTC)
    day, first = start.date(), (start.hour, start.minute)
    while day.year <= cron.years[-1]:
        if day.year not in cron.years:
            day, first = date(day.year + 1, 1, 1), (0, 0)
            continue
        if day.month not in cron.months:
            day, first = (day.replace(day=28) + timedelta(days=4)).replace(day=1), (0, 0)
            continue
        if _day_matches(cron, day):
            for hour in cron.hours:
                for minute in cron.minutes:
                    if (hour, minute) >= first:
                        return _epoch(day, hour, minute)
        day, first = day + timedelta(days=1), (0, 0)
    return None


def _cron_last(cron: Cron, at: float) -> float | None:
    """The last fire time at or before ``at``."""
    end = datetime.fromtimestamp(math.floor(at / MINUTE) * MINUTE, UTC)
    day, last = end.date(), (end.hour, end.minute)
    while day.year >= cron.years[0]:
        if day.year not in cron.years:
            day, last = date(day.year - 1, 12, 31), (23, 59)
            continue
        if day.month not in cron.months:
            day, last = day.replace(day=1) - timedelta(days=1), (23, 59)
            continue
        if _day_matches(cron, day):
            for hour in reversed(cron.hours):
                for minute in reversed(cron.minutes):
                    if (hour, minute) <= last:
                        return _epoch(day, hour, minute)
        day, last = day - timedelta(days=1), (23, 59)
    return None


def next_after(schedule: Schedule, after: float) -> float | None:
    """The first fire time strictly after ``after`` (epoch seconds); None if there is none left."""
    if schedule.period is not None:
        return float((math.floor(after / schedule.period) + 1) * schedule.period)
    assert schedule.cron is not None
    return _cron_next(schedule.cron, after)


def last_at_or_before(schedule: Schedule, at: float) -> float | None:
    """The latest fire time at or before ``at``; None if there was none."""
    if schedule.period is not None:
        return float(math.floor(at / schedule.period) * schedule.period)
    assert schedule.cron is not None
    return _cron_last(schedule.cron, at)


def count_between(schedule: Schedule, first: float, last: float, cap: int = 1000) -> int:
    """Fire times in [first, last], counted up to ``cap`` (it feeds logs, not decisions)."""
    if last < first:
        return 0
    if schedule.period is not None:
        return min(cap, int((last - first) // schedule.period) + 1)
    count, at = 0, first - 1
    while count < cap:
        nxt = next_after(schedule, at)
        if nxt is None or nxt > last:
            break
        count, at = count + 1, nxt
    return count
