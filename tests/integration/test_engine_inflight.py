"""A guarded runner that finds an attempt started less than a lease ago leaves it alone."""

from __future__ import annotations

import pytest

from engine import Registry, step
from engine.config import EngineConfig
from engine.messages import StepMessage
from engine.state import Status
from engine.workflow import build_spec

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("semantics", ["at_most_once", "at_least_once"])
def test_duplicate_during_a_live_attempt_neither_runs_nor_fails_it(make_engine, clock, semantics):
    reg, seen = Registry(), {}
    engine_box = {}

    def pay(ctx):
        seen.setdefault("runs", 0)
        seen["runs"] += 1
        if seen["runs"] == 1:
            # While this attempt runs, a copy of its message arrives marked as a redelivery.
            clock.advance(5)
            seen["duplicate"] = engine_box["engine"].handle(
                StepMessage(ctx.execution_id, 0, 1, "step"), redelivered=True
            )
        return {"paid": True}

    reg.add(build_spec("pay", [step(pay, semantics=semantics)]))
    engine = make_engine(registry=reg, config=EngineConfig(lease_seconds=60))
    engine_box["engine"] = engine
    if semantics == "at_least_once":
        # Only guarded runs mark the start: make the original a redelivery too.
        engine.start("pay", {}, execution_id="live")
        outcome = engine.handle(StepMessage("live", 0, 1, "step"), redelivered=True)
    else:
        engine.start("pay", {}, execution_id="live")
        outcome = engine.handle(StepMessage("live", 0, 1, "step"))
    assert seen["duplicate"].status == "in_flight"
    assert seen["runs"] == 1, "the duplicate did not run the step"
    assert outcome.status == "completed_step"
    ex = engine.get("live")
    assert ex.status is Status.COMPLETED
    (record,) = engine.history("live")
    assert [(a.attempt, a.outcome) for a in record.attempts] == [(1, "completed")]


def test_a_mark_older_than_a_lease_counts_as_a_lost_worker(make_engine, clock):
    reg, runs = Registry(), []

    def pay(ctx):
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise KeyboardInterrupt  # stands for the process dying mid-step (a BaseException)
        return {}

    reg.add(build_spec("pay", [step(pay, semantics="at_most_once")]))
    engine = make_engine(registry=reg, config=EngineConfig(lease_seconds=60))
    engine.start("pay", {}, execution_id="dead")
    with pytest.raises(KeyboardInterrupt):
        engine.handle(StepMessage("dead", 0, 1, "step"))
    clock.advance(30)
    assert engine.handle(StepMessage("dead", 0, 1, "step"), redelivered=True).status == "in_flight"
    clock.advance(31)
    assert engine.handle(StepMessage("dead", 0, 1, "step"), redelivered=True).status == "retry_scheduled"
    clock.advance(400)
    assert engine.handle(StepMessage("dead", 0, 2, "retry")).status == "completed_step"
    assert runs == [1, 2], "attempt 1 was never re-run"
    (record,) = engine.history("dead")
    assert [(a.attempt, a.outcome) for a in record.attempts] == [(1, "worker_lost"), (2, "completed")]
