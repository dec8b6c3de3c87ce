"""child() and wait_until() on the real table (moto): a parent advances exactly once whatever
its child does; a cancelled parent takes its child with it; polls cost nothing between checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import Registry, RetryPolicy
from engine.children import child_id
from engine.ports import FaultPoint
from engine.workflow import NOT_YET, build_spec, child, wait_until
from loom.testing import WorkerDied, WorkflowTest
from loom.testing.runner import StillRunning
from tests.integration.waits_support import Inbox, Runs, poller, registry

pytestmark = pytest.mark.integration


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def t(runs: Runs) -> Iterator[WorkflowTest]:
    with WorkflowTest(registry(Inbox(), runs), backend="moto") as test:
        yield test


def test_a_child_runs_and_its_output_merges_into_the_parent(t: WorkflowTest, runs: Runs) -> None:
    t.start("family", {"order": 1}, execution_id="p1")
    ex = t.run("p1")
    kid = t.execution("p1--0-1")
    assert kid.parent == {"id": "p1", "step": 0, "attempt": 1} and kid.status.value == "COMPLETED"
    assert ex.status.value == "COMPLETED" and ex.context["kid_out"] == 42 and runs.count["after"] == 1
    assert t.execution("p1--0-1").next_wake_at is not None  # held in GSI1 until the sweeper re-notifies
    t.run()
    after = t.execution("p1")  # the notice changed nothing (the sweep that sent it may stamp it for retention)
    assert t.execution("p1--0-1").next_wake_at is None
    assert (after.status, after.current_step, after.context) == (ex.status, ex.current_step, ex.context)


def test_a_child_whose_worker_dies_after_its_end_still_wakes_the_parent_once(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'child crashes after its terminal write, before the notice'."""
    t.crash(FaultPoint.AFTER_CHECKPOINT, step="kid_work")
    t.start("family", {}, execution_id="p2")
    ex = t.run("p2")
    assert t.faults.fired and ex.status.value == "COMPLETED"
    assert runs.count["after"] == 1 and runs.count["kid_work"] == 1


def test_a_failed_child_fails_the_attempt_and_the_retry_starts_a_fresh_child(t: WorkflowTest, runs: Runs) -> None:
    t.start("retrying_family", {}, execution_id="p3")
    ex = t.run("p3")
    assert ex.status.value == "FAILED" and ex.error["type"] == "ChildFailed"
    assert [t.status(child_id("p3", 0, a)) for a in (1, 2)] == ["FAILED", "FAILED"]
    [record] = [r for r in t.history("p3") if r.index == 0]
    assert [a.detail for a in record.attempts] == [{"child": "p3--0-1"}, {"child": "p3--0-2"}]


def test_a_redriven_child_does_not_advance_its_parent_twice(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'a child re-driven after its parent moved on'."""
    t.start("patient_family", {}, execution_id="p4")
    t.run("p4")
    kid = child_id("p4", 0, 1)
    t.signal(kid, "go", {})
    ex = t.run("p4")
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1
    # A duplicate notice (the sweeper's, or a redelivery) changes nothing.
    from engine.children import notify_parent

    notify_parent(t.engine, t.execution(kid))
    t.run()
    after = t.execution("p4")
    assert runs.count["after"] == 1 and (after.current_step, after.context) == (ex.current_step, ex.context)


def test_cancelling_a_parent_cancels_its_running_child(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'parent cancelled while its child runs': both end CANCELLED."""
    t.start("patient_family", {}, execution_id="p5")
    assert t.run("p5").status.value == "WAITING"
    kid = child_id("p5", 0, 1)
    assert t.status(kid) == "WAITING"
    t.engine.cancel("p5")
    t.run()
    assert t.status("p5") == "CANCELLED" and t.status(kid) == "CANCELLED" and runs.count["after"] == 0


def test_a_parent_restarted_before_its_park_never_starts_two_children(t: WorkflowTest, runs: Runs) -> None:
    """The parent's worker dies after starting the child: the re-driven step finds the same child."""
    from loom.testing.runner import WorkerDied

    original = t.engine.store.put_execution
    state = {"armed": True}

    def die_on_park(ex, **kw):
        if state["armed"] and ex.id == "p6" and ex.status.value == "WAITING":
            state["armed"] = False
            raise WorkerDied("before the park")
        return original(ex, **kw)

    t.engine.store.put_execution = die_on_park  # type: ignore[method-assign]
    t.start("family", {}, execution_id="p6")
    ex = t.run("p6")
    assert ex.status.value == "COMPLETED" and runs.count["kid_work"] == 1 and runs.count["after"] == 1


def test_a_poll_checks_until_done_without_running_between() -> None:
    answers = [NOT_YET, NOT_YET, NOT_YET, {"settled": True}]
    reg = Registry()
    reg.add(build_spec("settle", [wait_until(poller(answers), every=1800, timeout=86_400)]))
    with WorkflowTest(reg, backend="moto") as t:
        t.start("settle", {}, execution_id="q1")
        began = t.clock.now()
        ex = t.run("q1")
        assert ex.status.value == "COMPLETED" and ex.context == {"settled": True}
        assert t.clock.now() - began == pytest.approx(3 * 1800)  # 30 min > SQS's 15: the sweeper drives it
        assert t.deliveries == 4  # one per check, nothing in between
        [record] = t.history("q1")
        assert [a.outcome.value for a in record.attempts] == ["completed"]


def test_a_short_poll_rides_sqs_delays_and_times_out_through_the_policy() -> None:
    reg = Registry()
    reg.add(
        build_spec(
            "never",
            # The wait's own policy: the workflow's would not retry a timeout.
            [wait_until(poller([NOT_YET]), every=300, timeout=1200, retry=RetryPolicy(max_attempts=2, jitter="none"))],
            RetryPolicy(max_attempts=1),
        )
    )
    with WorkflowTest(reg, backend="moto") as t:
        t.start("never", {}, execution_id="q2")
        ex = t.run("q2")
        assert ex.status.value == "FAILED" and ex.error["type"] == "PollTimeout"
        [record] = t.history("q2")
        assert [a.error["type"] for a in record.attempts] == ["PollTimeout", "PollTimeout"]
        assert t.deliveries == 2 * 5  # checks at 0, 5, 10, 15, 20 minutes, per attempt


def test_a_cancel_cut_short_before_its_child_is_finished_by_cancelling_again(t: WorkflowTest, runs: Runs) -> None:
    """The cancel's worker dies between the parent's write and the child's: the child keeps
    running until the cancel is repeated (409 for the parent, and the cascade completes)."""
    from engine import lifecycle
    from engine.errors import AlreadyTerminal

    t.start("patient_family", {}, execution_id="p7")
    t.run("p7")
    kid = child_id("p7", 0, 1)
    real = lifecycle.cancel_children

    def die(parts, ex):
        raise WorkerDied("between the parent's cancel and the child's")

    lifecycle.cancel_children = die  # type: ignore[assignment]
    try:
        with pytest.raises(WorkerDied):
            t.engine.cancel("p7")
    finally:
        lifecycle.cancel_children = real  # type: ignore[assignment]
    assert t.status("p7") == "CANCELLED" and t.status(kid) == "WAITING"
    with pytest.raises(AlreadyTerminal):
        t.engine.cancel("p7")
    assert t.status(kid) == "CANCELLED"


def test_cancelling_a_parent_whose_worker_died_before_parking_cancels_the_child_it_started(
    t: WorkflowTest, runs: Runs
) -> None:
    """Failure table: 'parent cancelled after starting a child, before parking on it'. No wait
    names the child yet; the cascade finds it by its deterministic id."""
    original = t.engine.store.put_execution

    def die_on_park(ex, **kw):
        if ex.id == "p8" and ex.status.value == "WAITING":
            raise WorkerDied("after the child's start, before the park")
        return original(ex, **kw)

    t.engine.store.put_execution = die_on_park  # type: ignore[method-assign]
    t.start("family", {}, execution_id="p8")
    with pytest.raises(StillRunning):
        t.run("p8", max_deliveries=1)  # the parent's delivery only: the child's message waits
    t.engine.store.put_execution = original  # type: ignore[method-assign]
    kid = child_id("p8", 0, 1)
    assert t.status("p8") == "RUNNING" and t.status(kid) == "RUNNING"
    t.engine.cancel("p8")
    t.run()
    assert t.status("p8") == "CANCELLED" and t.status(kid) == "CANCELLED"
    assert runs.count["kid_work"] == 0 and runs.count["after"] == 0


def test_a_cancel_that_lands_before_the_child_is_started_still_stops_it(t: WorkflowTest, runs: Runs) -> None:
    """The cancel's cascade looks before the parent's worker creates the child: that worker's
    park then loses to the cancel, and it cancels the child it has just started."""
    original = t.engine.store.create_execution

    def cancel_first(ex):
        if ex.id == child_id("p9", 0, 1):
            t.engine.cancel("p9")
        return original(ex)

    t.engine.store.create_execution = cancel_first  # type: ignore[method-assign]
    t.start("family", {}, execution_id="p9")
    t.run()
    assert t.status("p9") == "CANCELLED" and t.status(child_id("p9", 0, 1)) == "CANCELLED"
    assert runs.count["kid_work"] == 0 and runs.count["after"] == 0


def _fill(ctx) -> dict:
    return {"mine": "p" * 200_000}


def _grow(ctx) -> dict:
    return {"blob": "k" * 250_000}


def test_a_childs_output_too_large_for_its_parent_fails_the_parents_attempt() -> None:
    """The child's output fits its own item, not the parent's context with it: the parent's
    attempt fails with ResultTooLarge (non-retryable), not its message again and again."""
    reg = Registry()
    reg.add(build_spec("big_kid", [_grow]))
    reg.add(build_spec("big_family", [_fill, child("big_kid")], RetryPolicy(max_attempts=3)))
    with WorkflowTest(reg, backend="moto") as t:
        t.start("big_family", {}, execution_id="big")
        ex = t.run("big")
        assert ex.status.value == "FAILED" and ex.error["type"] == "ResultTooLarge"
        assert t.status(child_id("big", 1, 1)) == "COMPLETED"
        [record] = [r for r in t.history("big") if r.index == 1]
        assert [(a.attempt, a.error["type"]) for a in record.attempts] == [(1, "ResultTooLarge")], "one attempt"
