"""loom.testing runs a failing saga: compensations in reverse order, crashes and duplicates included."""

from __future__ import annotations

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, step, workflow
from engine.errors import WaitEnded
from engine.workflow import wait_for_callback
from loom.testing import WorkflowTest

undo_calls: list[str] = []


def _do(name):
    def fn(ctx):
        return {name: True}

    fn.__name__ = name
    return fn


def _undo(name):
    def fn(ctx):
        undo_calls.append(f"{name}:{ctx.idempotency_key}:{sorted(ctx.result)}:{ctx.failure['type']}")
        return None

    fn.__name__ = f"undo_{name}"
    return fn


def _ship(ctx):
    raise NonRetryableError("no courier")


def _registry() -> Registry:
    reg = Registry()

    @workflow("saga_unit", registry=reg)
    class Saga:
        steps = [
            step(_do("reserve"), compensate=_undo("reserve")),
            step(_do("charge"), compensate=_undo("charge")),
            step(_ship, name="ship", compensate=_undo("ship")),
        ]
        retry = RetryPolicy(max_attempts=2, base=1, jitter="none")

    return reg


def test_a_failing_saga_is_compensated_in_reverse_order():
    undo_calls.clear()
    with WorkflowTest(_registry()) as wt:
        ex_id = wt.start("saga_unit", {}, execution_id="s1")
        wt.run(ex_id)
        assert wt.status(ex_id) == "COMPENSATED"
        assert wt.compensations(ex_id) == ["charge", "reserve"]
        assert undo_calls == [
            "charge:s1:1:compensate:['charge']:NonRetryableError",
            "reserve:s1:0:compensate:['reserve']:NonRetryableError",
        ]
        assert [n for n, _, _ in wt.steps(ex_id)][-2:] == ["charge#compensate", "reserve#compensate"]


def test_a_crash_during_a_compensation_and_duplicate_deliveries_still_undo_once():
    undo_calls.clear()
    with WorkflowTest(_registry()) as wt:
        wt.crash("after_checkpoint", step="charge", phase="compensate")
        wt.duplicate_next_deliveries(20)
        ex_id = wt.start("saga_unit", {}, execution_id="s2")
        wt.run(ex_id)
        assert wt.status(ex_id) == "COMPENSATED"
        assert wt.compensations(ex_id) == ["charge", "reserve"]
        assert wt.faults.fired and wt.faults.fired[0][0] == "after_checkpoint"
        assert [c.split(":")[0] for c in undo_calls] == ["charge", "reserve"]


def test_a_caught_failure_goes_on_and_a_crash_in_the_handler_is_recovered():
    reg = Registry()
    handled: list[str] = []

    def fallback(ctx, error):
        handled.append(ctx.idempotency_key)
        return {"fallback": error["type"]}

    def after(ctx):
        return {"saw": ctx.data.get("fallback")}

    @workflow("caught_unit", registry=reg)
    class Caught:
        steps = [step(_ship, name="ship", catch=fallback), after]

    with WorkflowTest(reg) as wt:
        wt.crash("after_step", step="ship", phase="catch")
        ex_id = wt.start("caught_unit", {}, execution_id="c1")
        ex = wt.run(ex_id)
        assert ex is not None and ex.status.value == "COMPLETED"
        assert ex.context["saw"] == "NonRetryableError"
        assert handled == ["c1:0:catch", "c1:0:catch"], "killed after the handler ran; the redelivery ran it again"
        assert [(n, s) for n, s, _ in wt.steps(ex_id)] == [
            ("ship", "FAILED"),
            ("ship#catch", "COMPLETED"),
            ("after", "COMPLETED"),
        ]


def test_a_caught_callback_wait_goes_on_with_the_handlers_result():
    reg = Registry()
    tokens: list[str] = []
    handled: list[tuple[str, str]] = []

    def fallback(ctx, error):
        handled.append((ctx.idempotency_key, error["type"]))
        return {"approved_by": "default", "reason": error["message"]}

    def after(ctx):
        return {"saw": ctx.data.get("approved_by")}

    approval = wait_for_callback("approval", submit=lambda ctx, token: tokens.append(token), catch=fallback)

    @workflow("caught_wait_unit", registry=reg)
    class CaughtWait:
        steps = [approval, after]
        retry = RetryPolicy(max_attempts=2)

    with WorkflowTest(reg) as wt:
        wt.duplicate_next_deliveries(10)
        wt.crash("after_step", step="approval", phase="catch")
        ex_id = wt.start("caught_wait_unit", {}, execution_id="w1")
        for _ in range(2):  # the first failure retries with a new token; the second is for good
            wt.run(ex_id)
            wt.fail_callback(tokens[-1], "Rejected", "no reviewer")
        ex = wt.run(ex_id)
        assert len(tokens) == 2
        assert ex is not None and ex.status.value == "COMPLETED", ex
        assert ex.context["saw"] == "default" and "no reviewer" in ex.context["reason"]
        assert handled == [("w1:0:catch", "CallbackFailed")] * 2, "killed after it ran; the redelivery ran it again"
        assert [(n, s) for n, s, _ in wt.steps(ex_id)] == [
            ("approval", "FAILED"),
            ("approval#catch", "COMPLETED"),
            ("after", "COMPLETED"),
        ]
        with pytest.raises(WaitEnded):
            wt.complete_callback(tokens[-1], {"late": True})
        assert "late" not in wt.execution(ex_id).context and not wt.dead_letters
