"""Catching a failure against moto: the handler runs as a durable step and the workflow goes on."""

from __future__ import annotations

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, step
from engine.ports import FaultPoint
from engine.state import StepStatus
from engine.workflow import Phase
from tests.integration.engine_support import add_workflow, dead_letters

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, base=5, jitter="none")


class Calls:
    def __init__(self) -> None:
        self.handled: list[tuple[str, int, str, dict]] = []  # (key, attempt, phase, error)
        self.handler_fails = 0
        self.after: list[dict] = []


def declined(ctx):
    raise NonRetryableError("card declined")


@pytest.fixture
def calls():
    return Calls()


@pytest.fixture
def reg(calls):
    def handler(ctx, error):
        calls.handled.append((ctx.idempotency_key, ctx.attempt, ctx.phase.value, dict(error)))
        if calls.handler_fails:
            calls.handler_fails -= 1
            raise RuntimeError("the fallback is down too")
        return {"paid_by": "invoice", "declined": error["message"]}

    def after(ctx):
        calls.after.append(dict(ctx.data))
        return {"done": True}

    def flaky(ctx):
        raise RuntimeError(f"attempt {ctx.attempt} fails")

    reg = Registry()
    add_workflow(reg, "caught", [step(declined, name="charge", catch=handler), step(after, name="after")], retry=QUICK)
    add_workflow(
        reg, "caught_late", [step(flaky, name="charge", catch=handler), step(after, name="after")], retry=QUICK
    )
    return reg


def test_a_caught_failure_runs_the_handler_and_the_workflow_goes_on(rig, calls):
    rig.engine.start("caught", {"amount": 5}, execution_id="k1")
    rig.driver.pump()
    ex = rig.engine.get("k1")
    assert ex.status.value == "COMPLETED" and ex.catching is None
    assert calls.handled == [
        ("k1:0:catch", 2, Phase.CATCH.value, calls.handled[0][3]),
    ]
    assert calls.handled[0][3]["message"] == "card declined"
    assert calls.after == [{"amount": 5, "paid_by": "invoice", "declined": "card declined"}]
    history = rig.engine.history("k1")
    assert [(r.name, r.status) for r in history] == [
        ("charge", StepStatus.FAILED),
        ("charge#catch", StepStatus.COMPLETED),
        ("after", StepStatus.COMPLETED),
    ], "history shows the failure and the catch"
    assert not dead_letters(rig.aws)


def test_retries_run_out_before_the_catch(rig, calls):
    rig.engine.start("caught_late", {}, execution_id="k2")
    rig.driver.pump()
    assert rig.status("k2") == "COMPLETED"
    (charge,) = [r for r in rig.engine.history("k2") if r.name == "charge"]
    assert [a.attempt for a in charge.attempts] == [1, 2]
    assert calls.handled[0][1] == 3, "the handler's attempts follow the step's"


def test_a_handler_that_fails_for_good_fails_the_execution(rig, calls):
    calls.handler_fails = 5
    rig.engine.start("caught", {}, execution_id="k3")
    rig.driver.pump()
    ex = rig.engine.get("k3")
    assert ex.status.value == "FAILED"
    assert "the fallback is down" in ex.error["message"]
    assert len(calls.handled) == 2, "the handler retried by the step's policy, then gave up"
    (letter,) = dead_letters(rig.aws)
    assert letter["execution_id"] == "k3"


def test_a_redrive_after_the_handler_failed_for_good_runs_the_step_and_its_catch_again(rig, calls):
    calls.handler_fails = 2
    rig.engine.start("caught", {}, execution_id="k3r")
    rig.driver.pump()
    assert rig.status("k3r") == "FAILED" and len(dead_letters(rig.aws)) == 1
    handled = len(calls.handled)
    rig.engine.redrive_failed("k3r")  # the fallback is back
    rig.driver.pump()
    ex = rig.engine.get("k3r")
    assert ex.status.value == "COMPLETED", ex.error
    assert len(calls.handled) == handled + 1, "the step failed again and its handler ran once more"
    assert ex.context["paid_by"] == "invoice" and ex.catching is None
    assert not dead_letters(rig.aws), "the redrive parked nothing"
    record = rig.engine.store.get_step("k3r", 0, "charge#catch")
    attempts = [a.attempt for a in record.attempts]
    assert record.status is StepStatus.COMPLETED and attempts == sorted(set(attempts))


def test_a_handler_that_fails_once_is_retried(rig, calls):
    calls.handler_fails = 1
    rig.engine.start("caught", {}, execution_id="k4")
    rig.driver.pump()
    assert rig.status("k4") == "COMPLETED"
    record = rig.engine.store.get_step("k4", 0, "charge#catch")
    assert [a.outcome.value for a in record.attempts] == ["failed", "completed"]


@pytest.mark.parametrize("point", [FaultPoint.BEFORE_STEP, FaultPoint.AFTER_STEP])
def test_a_crash_in_the_handler_is_recovered_by_the_lease(rig, calls, point):
    rig.engine.start("caught", {}, execution_id="k5")
    rig.driver.deliver(rig.driver.receive(1))  # charge fails for good
    rig.faults.arm(point.value, step=0)  # the handler's run
    rig.driver.pump()
    for _ in range(5):
        if rig.engine.get("k5").terminal:
            break
        rig.clock.advance(rig.engine.config.lease_seconds * 3)
        rig.engine.sweep()
        rig.driver.pump()
    assert rig.status("k5") == "COMPLETED"
    assert [info.get("phase") for _, info in rig.faults.fired] == ["catch"]
    assert rig.store.commits[("k5", 0, "charge#catch")] == 1
    assert len(calls.after) == 1


def test_duplicate_deliveries_of_the_handler_commit_once(rig, calls):
    from engine.messages import StepMessage

    rig.engine.start("caught", {}, execution_id="k6")
    rig.driver.deliver(rig.driver.receive(1))  # charge fails for good: the handler's message is queued
    ex = rig.engine.get("k6")
    assert ex.catching is not None and ex.attempt == 2
    rig.engine.queue.send(StepMessage("k6", 0, 2))
    rig.engine.queue.send(StepMessage("k6", 0, 2))
    rig.driver.pump()
    assert rig.status("k6") == "COMPLETED"
    assert len(calls.handled) == 1 and len(calls.after) == 1
