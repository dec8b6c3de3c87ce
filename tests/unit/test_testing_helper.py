"""loom.testing: in-process workflow tests on a virtual clock (its own tests)."""

from __future__ import annotations

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, sleep, step, workflow
from engine.ports import FaultPoint
from loom.testing import StillRunning, WorkflowTest, run_workflow

pytestmark = pytest.mark.unit

RUNS: dict[str, int] = {}


def counted(name: str, result: dict | None = None, fail_first: int = 0):
    def fn(ctx):
        RUNS[f"{ctx.execution_id}:{name}"] = RUNS.get(f"{ctx.execution_id}:{name}", 0) + 1
        if ctx.attempt <= fail_first:
            raise RuntimeError(f"{name} attempt {ctx.attempt}")
        return result

    fn.__name__ = name
    return fn


@pytest.fixture
def reg() -> Registry:
    RUNS.clear()
    reg = Registry()

    @workflow("approval", registry=reg)
    class Approval:
        steps = [counted("ask", {"asked": True}), sleep(days=3), counted("decide", {"ok": True})]

    @workflow("flaky", registry=reg)
    class Flaky:
        steps = [step(counted("call", {"n": 1}, fail_first=2), retry=RetryPolicy(max_attempts=5, base=600))]

    @workflow("once", registry=reg)
    class Once:
        steps = [counted("a"), step(counted("pay", {"paid": 1}), semantics="at_most_once"), counted("z")]

    def refuse(ctx):
        raise NonRetryableError("no")

    @workflow("refused", registry=reg)
    class Refused:
        steps = [refuse]

    return reg


def test_a_three_day_sleep_is_skipped_not_waited_for(reg: Registry) -> None:
    test = WorkflowTest(reg)
    eid = test.start("approval", {"order": 1})
    t0 = test.clock.now()
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPLETED" and ex.context == {"order": 1, "asked": True, "ok": True}
    assert test.clock.now() - t0 >= 3 * 86_400, "the virtual clock moved past the sleep"
    assert [name for name, _, _ in test.steps(eid)] == ["ask", "sleep_3d", "decide"]


def test_retry_delays_are_skipped_and_every_attempt_is_in_the_history(reg: Registry) -> None:
    ex, history = run_workflow("flaky", registry=reg)
    assert ex.status.value == "COMPLETED"
    assert [a.outcome.value for a in history[0].attempts] == ["failed", "failed", "completed"]


def test_a_crash_after_the_step_ran_costs_that_step_and_the_redelivery_rolls_on(reg: Registry) -> None:
    test = WorkflowTest(reg)
    test.crash(FaultPoint.AFTER_STEP, step="a")
    eid = test.start("once")
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
    assert test.deaths == 1 and RUNS[f"{eid}:a"] == 2, "the step ran again after the worker died before its commit"
    assert RUNS[f"{eid}:pay"] == 1


def test_a_worker_killed_inside_an_at_most_once_step_counts_the_attempt_lost(reg: Registry) -> None:
    test = WorkflowTest(reg)
    test.crash(FaultPoint.AFTER_STEP, step="pay")
    eid = test.start("once")
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
    pay = test.steps(eid)[1]
    assert pay == ("pay", "COMPLETED", ["worker_lost", "completed"])


def test_a_duplicate_delivery_commits_once(reg: Registry) -> None:
    test = WorkflowTest(reg)
    test.duplicate_next_deliveries(1)
    eid = test.start("once")
    test.run(eid)
    assert test.status(eid) == "COMPLETED" and test.deliveries >= 2
    assert all(len([o for o in outcomes if o == "completed"]) == 1 for _, _, outcomes in test.steps(eid))


def test_a_final_failure_is_parked_in_the_dead_letters(reg: Registry) -> None:
    test = WorkflowTest(reg)
    eid = test.start("refused")
    assert test.run(eid).status.value == "FAILED"  # type: ignore[union-attr]
    assert [d["execution_id"] for d in test.dead_letters] == [eid]


def test_run_never_hangs_it_says_what_is_left(reg: Registry) -> None:
    test = WorkflowTest(reg)
    eid = test.start("approval")
    with pytest.raises(StillRunning, match=f"{eid} SLEEPING"):
        test.run(eid, max_time=3600)


def test_advance_wakes_a_sleeper_like_loom_time_advance(reg: Registry) -> None:
    test = WorkflowTest(reg)
    eid = test.start("approval")
    with pytest.raises(StillRunning):
        test.run(eid, max_time=60)
    assert test.status(eid) == "SLEEPING"
    assert test.advance(3 * 86_400).woken == 1
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
