"""Attempt numbers are unique in a step's history, and a redrive never re-runs a committed step."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine import Registry, RetryPolicy, Status, step
from engine.attempts import fail_execution
from engine.errors import UnknownWorkflow
from engine.messages import MessageKind, StepMessage
from engine.state import StepStatus
from tests.integration.engine_support import Recorder, Rig, add_workflow, build_rig, dead_letters

pytestmark = pytest.mark.integration

RETRY = RetryPolicy(max_attempts=3, base=5, jitter="none")


class Flaky(Exception):
    pass


@pytest.fixture
def reg(rec: Recorder) -> Registry:
    reg = Registry()
    add_workflow(reg, "two", [rec.step("a"), rec.step("b")])
    return reg


def attempts(rig: Rig, execution_id: str, index: int = 0) -> list[tuple[int, str]]:
    record = rig.engine.history(execution_id)[index]
    return [(a.attempt, a.outcome.value) for a in record.attempts]


def test_a_guarded_redelivery_that_fails_while_the_first_run_succeeds_records_attempt_one_once(aws, make_engine, clock):
    """The first delivery runs attempt 1 unguarded; its redelivery (a visibility timeout ran
    out) runs attempt 1 guarded, fails first and schedules attempt 2; then the first run's
    success arrives. It must lose: attempt 1 is recorded already."""
    reg, box = Registry(), {"runs": 0}

    def a(ctx: Any) -> dict[str, Any]:
        box["runs"] += 1
        if box["runs"] == 1:
            box["engine"].handle(StepMessage(ctx.execution_id, 0, 1), redelivered=True)
            return {"a": f"run{box['runs']}@{ctx.attempt}"}
        if box["runs"] == 2:
            raise Flaky("the redelivery fails")
        return {"a": f"run{box['runs']}@{ctx.attempt}"}

    add_workflow(reg, "race", [step(a, retry=RETRY), lambda ctx: {"b": 1}])
    rig = build_rig(aws, make_engine, clock, reg)
    box["engine"] = rig.engine
    rig.engine.start("race", {}, execution_id="r9")
    outer = rig.engine.handle(StepMessage("r9", 0, 1))
    assert outer.status == "stale", "the late success of a recorded attempt no-ops"
    rig.driver.pump()  # the start message (now stale), then the retry of attempt 2
    assert attempts(rig, "r9") == [(1, "failed"), (2, "completed")]
    ex = rig.engine.get("r9")
    assert ex.status is Status.COMPLETED and ex.context["a"] == "run3@2"
    rig.store.assert_versions_contiguous()


def test_a_first_run_that_fails_while_the_guarded_redelivery_succeeds_records_attempt_one_once(aws, make_engine, clock):
    """The other order: the unguarded first run fails first, but its retry write loses to the
    redelivery's start mark; the redelivery's success must lose to the recorded failure and
    carry that failure's retry out itself, or nobody moves the execution until the lease."""
    reg, box = Registry(), {"runs": 0}
    first_inside, marked = threading.Event(), threading.Event()

    def a(ctx: Any) -> dict[str, Any]:
        box["runs"] += 1
        if box["runs"] == 1:  # the first run, in its own thread
            first_inside.set()
            assert marked.wait(10)
            raise Flaky("the first run fails")
        if box["runs"] == 2:  # the redelivery, marked and running
            marked.set()
            box["first"].join(10)
        return {"a": f"run{box['runs']}@{ctx.attempt}"}

    add_workflow(reg, "race", [step(a, retry=RETRY), lambda ctx: {"b": 1}])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("race", {}, execution_id="r9b")
    first: dict[str, Any] = {}
    box["first"] = threading.Thread(
        target=lambda: first.setdefault("outcome", rig.engine.handle(StepMessage("r9b", 0, 1)))
    )
    box["first"].start()
    assert first_inside.wait(10)
    began = rig.clock.now()
    second = rig.engine.handle(StepMessage("r9b", 0, 1), redelivered=True)
    assert first["outcome"].status == "stale", "its retry write lost to the start mark"
    assert second.status == "retry_scheduled", "the redelivery carries the recorded failure out"
    rig.driver.pump()
    assert attempts(rig, "r9b") == [(1, "failed"), (2, "completed")]
    ex = rig.engine.get("r9b")
    assert ex.status is Status.COMPLETED and ex.context["a"] == "run3@2"
    assert rig.clock.now() - began == RETRY.base, "attempt 2 ran after its backoff, not after a lease"
    rig.store.assert_versions_contiguous()


def test_a_recorded_final_failure_fails_the_execution_once_whoever_lost(aws, make_engine, clock):
    """As above, but attempt 1 was the last one: the recorded failure is final."""
    reg, box = Registry(), {"runs": 0}
    first_inside, marked = threading.Event(), threading.Event()

    def a(ctx: Any) -> dict[str, Any]:
        box["runs"] += 1
        if box["runs"] == 1:
            first_inside.set()
            assert marked.wait(10)
            raise Flaky("the first run fails")
        marked.set()
        box["first"].join(10)
        return {"a": "late"}

    add_workflow(reg, "race", [step(a, retry=RetryPolicy(max_attempts=1))])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("race", {}, execution_id="r9c")
    box["first"] = threading.Thread(target=lambda: rig.engine.handle(StepMessage("r9c", 0, 1)))
    box["first"].start()
    assert first_inside.wait(10)
    second = rig.engine.handle(StepMessage("r9c", 0, 1), redelivered=True)
    assert second.status == "failed"
    (record,) = rig.engine.history("r9c")
    assert record.status is StepStatus.FAILED and attempts(rig, "r9c") == [(1, "failed")]
    ex = rig.engine.get("r9c")
    assert ex.status is Status.FAILED and ex.error["type"] == "Flaky" and ex.error["message"] == "the first run fails"
    # The first run parked it before its state write lost; the follower parks it again
    # (DESIGN.md: "at worst parks the execution twice"), never a third time.
    assert [d["execution_id"] for d in dead_letters(aws)] == ["r9c", "r9c"]


def test_redrive_failed_at_a_committed_step_rolls_forward_without_running_it(rig, rec, make_engine):
    """The trigger: the step committed, the worker died before the execution moved, and the
    redelivery reached a worker without the workflow module, which failed the execution (as
    an older worker did: one now blocks it instead, engine/definitions.py)."""
    rig.engine.start("two", {}, execution_id="r7")
    rig.store.crash_after_commit = 1
    rig.driver.deliver(rig.driver.receive(1))
    assert rig.driver.crashes == ["after_commit"] and rig.engine.history("r7")[0].status is StepStatus.COMPLETED
    fail_execution(rig.engine, rig.engine.get("r7"), UnknownWorkflow("unknown workflow 'two'"), st_name=None)
    failed = rig.engine.get("r7")
    assert failed.status is Status.FAILED and failed.current_step == 0 and failed.error["type"] == "UnknownWorkflow"
    for m in rig.driver.receive():
        rig.driver.delete(m)  # the redelivery was consumed by that worker

    rig.engine.redrive_failed("r7")
    assert rig.queue.sent[-1].message.kind is MessageKind.REDRIVE
    rig.driver.pump()
    ex = rig.engine.get("r7")
    assert ex.status is Status.COMPLETED
    assert rec.count("r7", 0) == 1, "the committed step was not run again"
    assert ex.context["a"] == "a@1", "the execution rolled forward with the committed result"
    assert attempts(rig, "r7") == [(1, "completed")]
