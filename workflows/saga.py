"""A saga: an order whose shipping fails for good, so its charge and reservation are undone.

Each forward step and each compensation lands its effect in the ledger under its own
idempotency key (``<id>:<step>`` and ``<id>:<step>:compensate``), so the refund of a charge
is made once however often the compensation runs. Start ``order_saga`` with a ``courier``
in the input to see it complete; without one, ship fails and the execution ends COMPENSATED.
"""

from __future__ import annotations

from typing import Any

from engine import NonRetryableError, RetryPolicy, StepContext, step, workflow


def land(ctx: StepContext, kind: str, **data: Any) -> dict[str, Any]:
    """Record the effect in the example ledger under the step's idempotency key."""
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
        ledger.apply(ctx.idempotency_key, {"kind": kind, **data})
    return {f"{kind}_key": ctx.idempotency_key}


def reserve_stock(ctx: StepContext) -> dict[str, Any]:
    return {**land(ctx, "reservation", sku=ctx.data.get("sku")), "reservation": f"res-{ctx.execution_id[:12]}"}


def release_stock(ctx: StepContext) -> dict[str, Any]:
    # ctx.result is what reserve_stock committed; ctx.failure is why the saga is undone.
    return land(ctx, "release", reservation=(ctx.result or {}).get("reservation"))


def charge_card(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.data.get("amount", 0)
    return {**land(ctx, "charge", amount=amount), "charged": amount}


def refund_card(ctx: StepContext) -> dict[str, Any]:
    reason = (ctx.failure or {}).get("message", "")
    return land(ctx, "refund", amount=(ctx.result or {}).get("charged"), reason=reason)


def ship(ctx: StepContext) -> dict[str, Any]:
    courier = ctx.data.get("courier")
    if not courier:
        raise NonRetryableError("no courier will take this parcel")
    return {**land(ctx, "shipment", courier=courier), "tracking": f"trk-{ctx.execution_id[:12]}"}


UNDO = RetryPolicy(max_attempts=5, base=1, max_delay=30)


# docs:start saga
@workflow("order_saga")
class OrderSaga:
    steps = [
        step(reserve_stock, compensate=release_stock, compensate_retry=UNDO),
        step(charge_card, compensate=refund_card, compensate_retry=UNDO),
        ship,  # fails for good without a courier: refund, then release
    ]
    retry = RetryPolicy(max_attempts=3, base=1, max_delay=5)


# docs:end saga
