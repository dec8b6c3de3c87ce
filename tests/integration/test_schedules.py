"""Scheduled workflows on moto: one execution per fire time, whatever the sweeps do.

The store is the real DynamoDB adapter; a wrapper only lets a test run a second sweep inside
the first one (overlapping ticks) or kill the sweeper between the cursor's claim and the start.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from engine import Registry
from engine.schedule_plan import scheduled_id
from engine.state import ScheduleCursor
from engine.workflow import workflow
from loom.testing import WorkflowTest
from tests.integration.engine_support import Crash

pytestmark = pytest.mark.integration

HOUR = 3600.0


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @workflow("hourly", registry=reg, schedule="rate(1 hour)")
    class Hourly:
        steps = [lambda ctx: {"report_for": ctx.data["scheduled_at"]}]

    @workflow("hourly_skip", registry=reg, schedule="rate(1 hour)", catch_up="skip")
    class HourlySkip:
        steps = [lambda ctx: None]

    return reg


class Interposed:
    """The real store, with a hook run once inside the next call of a method: ``before`` it
    reaches the table (a sweeper killed first), or ``after`` it answered (another sweep then
    runs on what this one has just read or written)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.before: dict[str, Callable[[], None]] = {}
        self.after: dict[str, Callable[[], None]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        before, after = self.before.pop(name, None), self.after.pop(name, None)
        if before is None and after is None:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before()
            answer = target(*args, **kwargs)
            if after is not None:
                after()
            return answer

        return call


def fired(engine: Any, name: str) -> list[str]:
    return sorted(ex.id for ex in engine.list(workflow=name, limit=1000).items)


def cursor_of(engine: Any, name: str) -> ScheduleCursor:
    return next(c for c in engine.store.schedules() if c.workflow == name)


@pytest.fixture
def engines(make_engine, clock, reg):  # type: ignore[no-untyped-def]
    """Two sweepers on one table and one clock; the first one's store can be interposed."""
    clock.set(at("2026-12-02T00:30:00"))
    first = make_engine(registry=reg)
    first.store = Interposed(first.store)
    second = make_engine(registry=reg)
    first.sweep()  # the first tick after the deploy: cursors at 01:00, nothing fired
    return first, second


def test_a_tick_at_the_fire_time_starts_one_execution_and_the_next_tick_none(engines, clock) -> None:
    first, second = engines
    assert fired(first, "hourly") == []
    assert cursor_of(first, "hourly").next_fire == at("2026-12-02T01:00:00")
    clock.set(at("2026-12-02T01:00:40"))
    report = first.sweep()
    assert report.fired == 2  # hourly and hourly_skip, each once
    assert fired(first, "hourly") == [scheduled_id("hourly", at("2026-12-02T01:00:00"))] == ["hourly-20261202T0100Z"]
    ex = first.get("hourly-20261202T0100Z")
    assert ex.input == {"scheduled_at": "2026-12-02T01:00:00Z"}
    clock.advance(20)
    assert second.sweep().fired == 0
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    stored = cursor_of(first, "hourly")
    assert (stored.next_fire, stored.pending, stored.last_fired) == (
        at("2026-12-02T02:00:00"),
        None,
        at("2026-12-02T01:00:00"),
    )


@pytest.mark.parametrize("inside", ["schedules", "put_schedule"])
def test_two_overlapping_ticks_at_a_fire_time_start_it_once(engines, clock, inside: str) -> None:
    """The second sweep runs whole inside the first: after the first read the cursors (both
    claim from the same version: one claim wins), or after its claim (the second one finds the
    firing pending and starts the same id)."""
    first, second = engines
    clock.set(at("2026-12-02T01:00:05"))
    reports = []
    first.store.after[inside] = lambda: reports.append(second.sweep())
    reports.append(first.sweep())
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    assert fired(first, "hourly_skip") == ["hourly_skip-20261202T0100Z"]
    assert sum(r.fired for r in reports) == 2  # one creation for each workflow, by whichever sweep
    assert cursor_of(first, "hourly").pending is None
    clock.set(at("2026-12-02T02:00:05"))
    second.sweep()
    assert fired(first, "hourly") == ["hourly-20261202T0100Z", "hourly-20261202T0200Z"]


def test_a_sweeper_killed_between_the_claim_and_the_start_still_makes_one_execution(engines, clock) -> None:
    first, second = engines
    clock.set(at("2026-12-02T01:00:05"))

    def killed() -> None:
        raise Crash("sweeper killed after the claim")

    first.store.before["create_execution"] = killed
    with pytest.raises(Crash):
        first.sweep()
    claimed = cursor_of(first, "hourly")
    assert claimed.pending == at("2026-12-02T01:00:00") and fired(first, "hourly") == []
    assert claimed.next_fire == at("2026-12-02T02:00:00")  # the claim landed before the kill
    clock.advance(60)
    assert second.sweep().fired == 2  # hourly's resumed firing, and hourly_skip's own
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    assert cursor_of(first, "hourly").pending is None
    clock.advance(60)
    assert first.sweep().fired == 0
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]


def test_a_start_that_landed_before_the_kill_is_not_started_twice(engines, clock) -> None:
    first, second = engines
    clock.set(at("2026-12-02T01:00:05"))

    def killed() -> None:
        raise Crash("sweeper killed after the start, before the note was cleared")

    # the claim passes; the next cursor write (the note's clearing, after the start) is killed
    first.store.after["put_schedule"] = lambda: first.store.before.__setitem__("put_schedule", killed)
    with pytest.raises(Crash):
        first.sweep()  # the claim and the start landed; the note's clearing did not
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    assert cursor_of(first, "hourly").pending == at("2026-12-02T01:00:00")
    clock.advance(60)
    assert second.sweep().fired == 1  # hourly_skip's own; hourly's resume found its execution there
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    assert cursor_of(first, "hourly").pending is None


def test_an_outage_of_three_periods_runs_once_under_run_once_and_not_at_all_under_skip(engines, clock) -> None:
    first, _ = engines
    # 01:00, 02:00 and 03:00 pass with no sweep; it comes back at 03:30
    clock.set(at("2026-12-02T03:30:00"))
    report = first.sweep()
    assert fired(first, "hourly") == ["hourly-20261202T0300Z"]  # the latest stands for the three
    assert fired(first, "hourly_skip") == []
    # 01:00 and 02:00 passed over by hourly's catch-up run, and all three of hourly_skip's
    assert (report.fired, report.fires_skipped) == (1, 2 + 3)
    assert cursor_of(first, "hourly_skip").next_fire == at("2026-12-02T04:00:00")
    clock.set(at("2026-12-02T04:00:30"))
    first.sweep()
    assert fired(first, "hourly") == ["hourly-20261202T0300Z", "hourly-20261202T0400Z"]
    assert fired(first, "hourly_skip") == ["hourly_skip-20261202T0400Z"]  # on time again


def test_a_changed_schedule_starts_over_and_a_removed_one_is_deleted(make_engine, clock) -> None:
    clock.set(at("2026-12-02T00:30:00"))
    before = Registry()
    workflow("report", registry=before, schedule="rate(1 hour)")(type("R", (), {"steps": [lambda ctx: None]}))
    workflow("other", registry=before, schedule="rate(1 day)")(type("O", (), {"steps": [lambda ctx: None]}))
    make_engine(registry=before).sweep()
    after = Registry()  # the next deploy: report every 2 hours from 00:45, other unscheduled
    workflow("report", registry=after, schedule="cron(45 0/2 * * ? *)")(type("R", (), {"steps": [lambda ctx: None]}))
    workflow("keep", registry=after, schedule="rate(1 day)")(type("K", (), {"steps": [lambda ctx: None]}))
    workflow("other", registry=after)(type("O", (), {"steps": [lambda ctx: None]}))
    engine = make_engine(registry=after)
    clock.set(at("2026-12-02T01:10:00"))  # past the old 01:00, which is not fired
    engine.sweep()
    names = {c.workflow: c for c in engine.store.schedules()}
    assert sorted(names) == ["keep", "report"]
    assert names["report"].expression == "cron(45 0/2 * * ? *)"
    assert names["report"].next_fire == at("2026-12-02T02:45:00")
    assert fired(engine, "report") == []
    assert engine.next_fires() == {"report": at("2026-12-02T02:45:00"), "keep": at("2026-12-03T00:00:00")}


def test_overlapping_ticks_on_either_side_of_a_fire_time_after_an_outage_run_once(engines, clock) -> None:
    """After an outage the first tick sees 03:00 as the latest missed fire time; a second tick
    inside it, a second later, sees 04:00 on time. Both would start their own run; the claim
    on the cursor's version lets one of them, so the outage costs one run, not two."""
    first, second = engines
    clock.set(at("2026-12-02T03:59:59"))

    def later_tick() -> None:
        clock.set(at("2026-12-02T04:00:01"))
        second.sweep()

    first.store.after["schedules"] = later_tick
    first.sweep()
    assert fired(first, "hourly") == ["hourly-20261202T0400Z"]
    assert cursor_of(first, "hourly").next_fire == at("2026-12-02T05:00:00")


def test_loom_testing_on_moto_fires_when_the_virtual_clock_moves() -> None:
    reg = Registry()
    workflow("nightly_report", registry=reg, schedule="cron(0 2 * * ? *)")(
        type("N", (), {"steps": [lambda ctx: {"for": ctx.data["scheduled_at"]}]})
    )
    with WorkflowTest(reg, start=at("2026-12-01T23:30:00"), backend="moto") as test:
        assert test.advance(2.5 * HOUR).fired == 1
        ex = test.run("nightly_report-20261202T0200Z")
        assert ex is not None and ex.context["for"] == "2026-12-02T02:00:00Z"


def test_a_lost_answer_of_the_claim_is_a_claim_and_the_firing_starts_in_the_same_tick(engines, clock, aws) -> None:
    """DynamoDB applied the claim, its answer was lost, botocore resent it: the resend fails its
    own condition, and the write token tells it was ours (not another sweep's win)."""
    first, _ = engines
    lost: list[str] = []

    def needs_retry(response: Any = None, operation: Any = None, request_dict: Any = None, **_: Any) -> Any:
        body = json.loads(request_dict["body"])
        item = body.get("Item", {})
        if lost or response is None or response[0].status_code != 200 or "pending" not in item:
            return None
        lost.append(item["SK"]["S"])
        return 0  # resend the very same request

    client = first.store.inner._db
    client.meta.events.register("needs-retry.dynamodb.PutItem", needs_retry)
    try:
        clock.set(at("2026-12-02T01:00:05"))
        report = first.sweep()
    finally:
        client.meta.events.unregister("needs-retry.dynamodb.PutItem", needs_retry)
    assert lost == ["SCHED#hourly"]  # the first claim of the tick, hourly's
    assert report.fired == 2 and report.errors == 0
    assert fired(first, "hourly") == ["hourly-20261202T0100Z"]
    assert cursor_of(first, "hourly").pending is None
