"""Fire times of EventBridge expressions and the catch-up decisions (engine/schedule_expr.py,
engine/schedule_plan.py): pure, no store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.errors import WorkflowDefinitionError
from engine.schedule_expr import CatchUp, count_between, last_at_or_before, next_after, parse
from engine.schedule_plan import ScheduleVerdict, plan, scheduled_id, scheduled_input
from engine.state import ScheduleCursor
from engine.workflow import Registry, build_spec, workflow

pytestmark = pytest.mark.unit

GRACE = 120.0


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def shown(value: float | None) -> str | None:
    return None if value is None else datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %a %H:%M")


# 2026-12-02 is a Wednesday.
NOW = at("2026-12-02T05:55:30")


@pytest.mark.parametrize(
    ("expression", "first", "second"),
    [
        ("cron(0 2 * * ? *)", "2026-12-03 Thu 02:00", "2026-12-04 Fri 02:00"),  # ? in day-of-week
        ("cron(0 2 ? * * *)", "2026-12-03 Thu 02:00", "2026-12-04 Fri 02:00"),  # ? in day-of-month
        ("cron(0/15 * * * ? *)", "2026-12-02 Wed 06:00", "2026-12-02 Wed 06:15"),  # a step from 0
        ("cron(*/20 9-10 * * ? *)", "2026-12-02 Wed 09:00", "2026-12-02 Wed 09:20"),  # step on *, a range
        ("cron(10-40/15 6 * * ? *)", "2026-12-02 Wed 06:10", "2026-12-02 Wed 06:25"),  # a stepped range
        ("cron(5,35 14 * JAN,MAR ? *)", "2027-01-01 Fri 14:05", "2027-01-01 Fri 14:35"),  # lists, month names
        ("cron(0 18 ? * MON-FRI *)", "2026-12-02 Wed 18:00", "2026-12-03 Thu 18:00"),  # weekday range
        ("cron(0 12 ? * FRI-MON *)", "2026-12-04 Fri 12:00", "2026-12-05 Sat 12:00"),  # a range wrapping the week
        ("cron(0 9 ? * 1 *)", "2026-12-06 Sun 09:00", "2026-12-13 Sun 09:00"),  # 1 is Sunday
        ("cron(0 10 ? * 6#3 *)", "2026-12-18 Fri 10:00", "2027-01-15 Fri 10:00"),  # third Friday
        ("cron(15 10 ? * 6L 2027-2029)", "2027-01-29 Fri 10:15", "2027-02-26 Fri 10:15"),  # last Friday, years
        ("cron(0 9 LW * ? *)", "2026-12-31 Thu 09:00", "2027-01-29 Fri 09:00"),  # last weekday
        ("cron(0 9 15W * ? *)", "2026-12-15 Tue 09:00", "2027-01-15 Fri 09:00"),  # nearest weekday
        ("cron(0 0 L * ? *)", "2026-12-31 Thu 00:00", "2027-01-31 Sun 00:00"),  # last day of the month
        ("cron(0 0 29 2 ? *)", "2028-02-29 Tue 00:00", "2032-02-29 Sun 00:00"),  # leap days only
        ("rate(1 hour)", "2026-12-02 Wed 06:00", "2026-12-02 Wed 07:00"),  # aligned to the epoch
        ("rate(7 minutes)", "2026-12-02 Wed 06:02", "2026-12-02 Wed 06:09"),
        ("rate(1 day)", "2026-12-03 Thu 00:00", "2026-12-04 Fri 00:00"),
    ],
)
def test_the_next_fire_times_of_an_expression(expression: str, first: str, second: str) -> None:
    schedule = parse(expression)
    one = next_after(schedule, NOW)
    assert shown(one) == first
    assert one is not None
    assert shown(next_after(schedule, one)) == second
    # the fire time itself is the last one at or before it, and not "after" it
    assert last_at_or_before(schedule, one) == one
    assert last_at_or_before(schedule, one - 1) != one


def test_the_nearest_weekday_of_a_sunday_is_the_monday_and_of_a_saturday_the_friday() -> None:
    schedule = parse("cron(0 9 15W * ? *)")
    # 2026-11-15 is a Sunday, 2026-08-15 a Saturday
    assert shown(next_after(schedule, at("2026-11-01T00:00:00"))) == "2026-11-16 Mon 09:00"
    assert shown(next_after(schedule, at("2026-08-01T00:00:00"))) == "2026-08-14 Fri 09:00"
    # 1W on a Saturday stays in the month: the Monday after (2026-08-01 is a Saturday)
    assert shown(next_after(parse("cron(0 9 1W * ? *)"), at("2026-07-31T12:00:00"))) == "2026-08-03 Mon 09:00"


def test_an_expression_whose_years_have_passed_has_no_next_fire_time() -> None:
    schedule = parse("cron(0 0 1 1 ? 2025)")
    assert next_after(schedule, NOW) is None
    assert shown(last_at_or_before(schedule, NOW)) == "2025-01-01 Wed 00:00"


def test_the_last_fire_time_at_or_before() -> None:
    assert shown(last_at_or_before(parse("cron(0 2 * * ? *)"), NOW)) == "2026-12-02 Wed 02:00"
    assert shown(last_at_or_before(parse("cron(0 18 ? * MON-FRI *)"), NOW)) == "2026-12-01 Tue 18:00"
    assert shown(last_at_or_before(parse("rate(1 hour)"), NOW)) == "2026-12-02 Wed 05:00"


def test_fire_times_are_counted_between_two_of_them() -> None:
    assert count_between(parse("rate(1 hour)"), at("2026-12-02T01:00:00"), at("2026-12-02T04:00:00")) == 4
    assert count_between(parse("cron(0 18 ? * MON-FRI *)"), at("2026-12-04T18:00:00"), at("2026-12-08T18:00:00")) == 3
    assert count_between(parse("rate(1 minute)"), 0.0, 10_000_000.0, cap=50) == 50


def test_the_decorator_refuses_what_eventbridge_refuses_with_the_workflows_name() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"'nightly'.*takes the unit 'minutes'"):
        workflow("nightly", registry=Registry(), schedule="rate(5 minute)")
    with pytest.raises(WorkflowDefinitionError, match="exactly one of day-of-month and day-of-week"):
        workflow("nightly", registry=Registry(), schedule="cron(0 2 * * * *)")
    with pytest.raises(WorkflowDefinitionError, match="catch_up must be one of 'run_once', 'skip'"):
        workflow("nightly", registry=Registry(), schedule="rate(1 hour)", catch_up="all")
    with pytest.raises(WorkflowDefinitionError, match="catch_up needs a schedule"):
        workflow("nightly", registry=Registry(), catch_up="skip")


def spec(expression: str = "rate(1 hour)", catch_up: CatchUp = CatchUp.RUN_ONCE):  # type: ignore[no-untyped-def]
    return build_spec("report", [lambda ctx: None], schedule=expression, catch_up=catch_up)


def cursor(next_fire: float | None, expression: str = "rate(1 hour)", **extra: float) -> ScheduleCursor:
    return ScheduleCursor("report", expression, next_fire, version=4, **extra)  # type: ignore[arg-type]


def test_a_new_schedule_starts_at_its_first_fire_time_after_now_and_fires_nothing_yet() -> None:
    decided = plan(spec(), None, at("2026-12-02T02:00:00"), GRACE)
    assert decided.verdict is ScheduleVerdict.CREATE
    assert shown(decided.next_fire) == "2026-12-02 Wed 03:00"  # strictly after: a deploy is not a firing


def test_a_fire_time_found_within_the_grace_fires_it_and_moves_past_now() -> None:
    due = at("2026-12-02T03:00:00")
    for now in (due, due + 59, due + GRACE):
        decided = plan(spec(), cursor(due), now, GRACE)
        assert (decided.verdict, decided.fire_at, decided.late, decided.missed) == (ScheduleVerdict.FIRE, due, False, 0)
        assert shown(decided.next_fire) == "2026-12-02 Wed 04:00"
    assert plan(spec(), cursor(due), due - 1, GRACE).verdict is ScheduleVerdict.WAIT


@pytest.mark.parametrize(
    ("catch_up", "verdict", "fire_at", "missed"),
    [
        (CatchUp.RUN_ONCE, ScheduleVerdict.FIRE, "2026-12-02 Wed 05:00", 2),
        (CatchUp.SKIP, ScheduleVerdict.SKIP, None, 3),
    ],
)
def test_an_outage_of_three_periods_runs_once_or_not_at_all(
    catch_up: CatchUp, verdict: ScheduleVerdict, fire_at: str | None, missed: int
) -> None:
    # 03:00, 04:00 and 05:00 passed while nothing swept; the sweep comes back at 05:30
    decided = plan(spec(catch_up=catch_up), cursor(at("2026-12-02T03:00:00")), at("2026-12-02T05:30:00"), GRACE)
    assert decided.verdict is verdict
    assert shown(decided.fire_at) == fire_at  # the latest missed fire time stands for all of them
    assert decided.missed == missed
    assert shown(decided.next_fire) == "2026-12-02 Wed 06:00"
    assert decided.late is (catch_up is CatchUp.RUN_ONCE)


def test_an_outage_that_ends_at_a_fire_time_runs_that_one_on_time_under_either_policy() -> None:
    for catch_up in CatchUp:
        decided = plan(spec(catch_up=catch_up), cursor(at("2026-12-02T03:00:00")), at("2026-12-02T05:00:30"), GRACE)
        assert (decided.verdict, shown(decided.fire_at), decided.missed, decided.late) == (
            ScheduleVerdict.FIRE,
            "2026-12-02 Wed 05:00",
            2,
            False,
        )


def test_a_claimed_firing_is_resumed_before_anything_else() -> None:
    claimed = cursor(at("2026-12-02T04:00:00"), pending=at("2026-12-02T03:00:00"))
    for deployed in (spec(), spec("rate(2 hours)"), None):
        decided = plan(deployed, claimed, at("2026-12-02T05:00:00"), GRACE)
        assert (decided.verdict, shown(decided.fire_at)) == (ScheduleVerdict.RESUME, "2026-12-02 Wed 03:00")


def test_a_changed_expression_starts_over_and_a_removed_schedule_goes() -> None:
    old = cursor(at("2026-12-02T03:00:00"))
    decided = plan(spec("cron(30 * * * ? *)"), old, at("2026-12-02T05:10:00"), GRACE)
    assert (decided.verdict, shown(decided.next_fire)) == (ScheduleVerdict.RESET, "2026-12-02 Wed 05:30")
    assert plan(None, old, at("2026-12-02T05:10:00"), GRACE).verdict is ScheduleVerdict.REMOVE
    unscheduled = build_spec("report", [lambda ctx: None])
    assert plan(unscheduled, old, at("2026-12-02T05:10:00"), GRACE).verdict is ScheduleVerdict.REMOVE
    assert plan(unscheduled, None, at("2026-12-02T05:10:00"), GRACE).verdict is ScheduleVerdict.WAIT


def test_a_schedule_with_no_fire_time_left_waits_for_ever() -> None:
    decided = plan(spec("cron(0 0 1 1 ? 2025)"), None, NOW, GRACE)
    assert (decided.verdict, decided.next_fire) == (ScheduleVerdict.CREATE, None)
    assert plan(spec("cron(0 0 1 1 ? 2025)"), cursor(None, "cron(0 0 1 1 ? 2025)"), NOW, GRACE).verdict is (
        ScheduleVerdict.WAIT
    )


def test_a_firing_has_one_id_and_one_input_whoever_computes_them() -> None:
    fire = at("2026-12-02T02:00:00")
    assert scheduled_id("nightly_report", fire) == "nightly_report-20261202T0200Z"
    assert scheduled_input(fire) == {"scheduled_at": "2026-12-02T02:00:00Z"}
    # a dot cannot be in an id: replaced, and the name's crc keeps a.b and a_b apart
    dotted, underscored = scheduled_id("a.b", fire), scheduled_id("a_b", fire)
    assert dotted != underscored and dotted.startswith("a_b-") and dotted.endswith("-20261202T0200Z")
