"""EventBridge schedule expressions: what AWS accepts and what it rejects (loom.schedule)."""

from __future__ import annotations

import pytest

from loom import schedule
from loom.local.lambdas.events import schedule_seconds

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expr", "seconds"),
    [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(1 hour)", 3600), ("rate(2 days)", 172800)],
)
def test_valid_rates(expr: str, seconds: int) -> None:
    assert schedule.rate_seconds(expr) == seconds
    schedule.check(expr)


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("rate(5 minute)", "takes the unit .minutes."),
        ("rate(1 minutes)", "'minute'"),
        ("rate(2 hour)", "'hours'"),
        ("rate(0 minutes)", "positive integer"),
        ("rate(-1 minutes)", "positive integer"),
        ("rate(1.5 hours)", "positive integer"),
        ("rate(5 seconds)", "minute"),
        ("rate(5minutes)", "rate\\(value unit\\)"),
        ("rate()", "rate\\(value unit\\)"),
        ("every 5 minutes", "neither"),
    ],
)
def test_rates_eventbridge_rejects(expr: str, why: str) -> None:
    with pytest.raises(schedule.ScheduleError, match=why):
        schedule.check(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "cron(0 12 * * ? *)",
        "cron(15 10 ? * 6L 2027-2029)",
        "cron(0/15 * * * ? *)",
        "cron(0 8 1 * ? *)",
        "cron(0 18 ? * MON-FRI *)",
        "cron(0 10 ? * 6#3 *)",
        "cron(5,35 14 * JAN,MAR ? *)",
        "cron(0 9 LW * ? *)",
        "cron(0 9 15W * ? *)",
        "cron(0 0 L * ? *)",
    ],
)
def test_valid_crons(expr: str) -> None:
    schedule.check(expr)


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("cron(0 12 * * *)", "6 fields"),  # Unix cron: five fields
        ("cron(0 12 * * * *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 12 ? * ? *)", "exactly one of day-of-month and day-of-week"),
        ("cron(60 12 * * ? *)", "outside 0-59"),
        ("cron(0 24 * * ? *)", "outside 0-23"),
        ("cron(0 12 32 * ? *)", "outside 1-31"),
        ("cron(0 12 ? * 8 *)", "outside 1-7"),
        ("cron(0 12 * 13 ? *)", "outside 1-12"),
        ("cron(0 12 * * ? 1969)", "outside 1970-2199"),
        ("cron(? 12 * * ? *)", "\\? is allowed only"),
        ("cron(0/0 * * * ? *)", "positive increment"),
        ("cron(0 12 * FOO ? *)", "not a number"),
        ("cron(0 10 ? * 6#9 *)", "week number"),
    ],
)
def test_crons_eventbridge_rejects(expr: str, why: str) -> None:
    with pytest.raises(schedule.ScheduleError, match=why):
        schedule.check(expr)


def test_the_local_tick_rejects_what_eventbridge_rejects() -> None:
    with pytest.raises(ValueError, match="takes the unit"):
        schedule_seconds("rate(5 minute)")
    with pytest.raises(ValueError, match="positive integer"):
        schedule_seconds("rate(0 minutes)")
