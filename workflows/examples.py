"""Example workflows: what ``loom demo`` runs and what the chaos kit drives.

Every step records its run and lands its side effect in the ledger under its
idempotency key, so a test can tell "ran twice" from "took effect twice".
Inputs can ask steps to misbehave (``fail``, ``hold``, ``crash``), which is how
the chaos kit injects faults that live inside a step in real life. ``hold`` and
``crash`` reach past the execution that asks (they tie up or kill the worker that
runs it), so they are obeyed only when the stack's chaos switch is on
(``ctx.services["chaos"]``, from the ChaosCrashAfterCheckpoint parameter);
``fail`` only fails the asking execution's own step and is always obeyed.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine import NonRetryableError, RetryPolicy, StepContext, sleep, step, workflow


class TransientStepError(Exception):
    """A failure worth retrying (a timeout from a payment provider, say)."""


def _effect(ctx: StepContext, kind: str, **data: Any) -> dict[str, Any]:
    """Run-count, misbehave if asked, then land the side effect once."""
    ledger = ctx.services.get("ledger")
    knobs = ctx.data.get("chaos", {}) if isinstance(ctx.data.get("chaos"), dict) else {}
    runs = ledger.ran(ctx.idempotency_key) if ledger is not None else ctx.attempt
    chaos_on = ctx.services.get("chaos") is True
    hold = knobs.get("hold", {}).get(ctx.step_name) if chaos_on else None
    if hold:
        # A step that takes this long, in real time: visibility and crash scenarios need it.
        time.sleep(float(hold))
    crash = knobs.get("crash", {}).get(ctx.step_name) if chaos_on else None
    if crash == "always" or (crash == "once" and runs == 1):
        if ledger is not None and knobs.get("crash_after_effect"):
            ledger.apply(ctx.idempotency_key, {"kind": kind, **data})
        os._exit(137)  # the process dies as a SIGKILLed worker would: no cleanup, no reply
    fail = knobs.get("fail", {}).get(ctx.step_name)
    if fail == "always":
        raise TransientStepError(f"{ctx.step_name} always fails (chaos)")
    if isinstance(fail, int) and ctx.attempt <= fail:
        raise TransientStepError(f"{ctx.step_name} fails on attempt {ctx.attempt} of the first {fail}")
    if ledger is not None:
        ledger.apply(ctx.idempotency_key, {"kind": kind, **data})
    return {f"{kind}_key": ctx.idempotency_key}


def reserve_inventory(ctx: StepContext) -> dict[str, Any]:
    out = _effect(ctx, "reservation", order_id=ctx.data.get("order_id"))
    return {**out, "reservation": f"res-{ctx.data.get('order_id', ctx.execution_id)}"}


def charge_payment(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.data.get("amount", 0)
    if not isinstance(amount, (int, float)) or amount < 0:
        raise NonRetryableError(f"amount must be a non-negative number, not {amount!r}")
    out = _effect(ctx, "charge", amount=amount)
    return {**out, "charged": amount}


def ship_order(ctx: StepContext) -> dict[str, Any]:
    out = _effect(ctx, "shipment", reservation=ctx.data.get("reservation"))
    return {**out, "tracking": f"trk-{ctx.execution_id[:12]}"}


def notify_customer(ctx: StepContext) -> dict[str, Any]:
    return _effect(ctx, "notification", tracking=ctx.data.get("tracking"))


# docs:start readme (README.md shows this region; tests/unit/test_docs.py keeps the two equal)
@workflow("order_fulfillment")
class OrderFulfillment:
    steps = [
        reserve_inventory,
        step(charge_payment, retry=RetryPolicy(max_attempts=3, base=1, max_delay=5), semantics="at_most_once"),
        sleep(hours=1),
        ship_order,
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=5, base=2, max_delay=900)


# docs:end readme


def flaky_charge(ctx: StepContext) -> dict[str, Any]:
    # Fails the first two attempts unless the input says otherwise: a retry that succeeds.
    knobs = dict(ctx.data.get("chaos") or {})
    knobs.setdefault("fail", {}).setdefault("flaky_charge", int(ctx.data.get("fail_first", 2)))
    return _effect(
        StepContext(
            ctx.execution_id,
            ctx.workflow,
            ctx.step_index,
            ctx.step_name,
            ctx.attempt,
            {**ctx.data, "chaos": knobs},
            ctx.log,
            ctx.services,
        ),
        "charge",
        amount=ctx.data.get("amount", 0),
    )


@workflow("payment_retry")
class PaymentRetry:
    steps = [reserve_inventory, flaky_charge, notify_customer]
    retry = RetryPolicy(max_attempts=4, base=0.5, max_delay=2, jitter="none")


def always_fails(ctx: StepContext) -> dict[str, Any]:
    if ctx.services.get("ledger") is not None:
        ctx.services["ledger"].ran(ctx.idempotency_key)
    raise TransientStepError("the downstream service rejects this request every time")


@workflow("poison_pill")
class PoisonPill:
    steps = [reserve_inventory, always_fails, notify_customer]
    retry = RetryPolicy(max_attempts=3, base=0.5, max_delay=1, jitter="none")


def _stage(name: str) -> Any:
    def run(ctx: StepContext) -> dict[str, Any]:
        return _effect(ctx, name, index=ctx.step_index)

    run.__name__ = name
    return run


@workflow("pipeline")
class Pipeline:
    """Ten plain steps: the chaos soak and the benchmark's unit of work."""

    steps = [_stage(f"stage_{i}") for i in range(10)]
    retry = RetryPolicy(max_attempts=4, base=0.5, max_delay=2)


def _plain(name: str) -> Any:
    def run(ctx: StepContext) -> dict[str, Any]:
        return {name: ctx.step_index}

    run.__name__ = name
    return run


@workflow("plain_steps")
class PlainSteps:
    """Ten steps that only return: what the engine itself costs per step (the local speed bench)."""

    steps = [_plain(f"step_{i}") for i in range(10)]
