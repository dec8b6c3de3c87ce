"""Example workflows that wait on the outside world (README, "Waiting on the outside world").

- ``order_approval``: a person approves from the CLI,
  ``loom signal ID approval --payload '{"approved": true}'``.
- ``payment_webhook``: a payment provider answers a webhook-style callback
  (``POST /callbacks/{token}/succeed``), then the settlement is polled durably.
- ``order_with_children``: a parent starts two child workflows and waits for both.

The "outside world" of these examples is the side-effect ledger: ``request_payment``
hands its token to the provider by landing it there (the provider's inbox), which is
where ``loom demo`` picks it up to complete the callback from outside.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine import NonRetryableError, RetryPolicy, StepContext, workflow
from engine.workflow import NOT_YET, child, wait_for_callback, wait_for_signal, wait_until
from workflows.examples import notify_customer, reserve_inventory, ship_order


def apply_decision(ctx: StepContext) -> dict[str, Any]:
    if ctx.data.get("approved") is not True:
        raise NonRetryableError(f"order {ctx.data.get('order_id')!r} was not approved")
    return {"approved_by": ctx.data.get("approver", "someone")}


@workflow("order_approval")
class OrderApproval:
    steps = [
        reserve_inventory,
        wait_for_signal("approval", timeout=timedelta(days=3)),
        apply_decision,
        ship_order,
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=1)  # an approval that times out is not asked for again


def request_payment(ctx: StepContext, token: str) -> None:
    """Hand the token to the payment provider; it calls back when the customer has paid."""
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        # One request per attempt: a retry asks again, with its new token.
        key = f"{ctx.execution_id}:{ctx.step_index}.{ctx.attempt}"
        ledger.apply(key, {"kind": "payment_request", "amount": ctx.data.get("amount", 0), "callback_token": token})


def check_settled(ctx: StepContext) -> Any:
    """The provider's settlement report: not yet for the first ``settle_after`` checks."""
    ledger = ctx.services.get("ledger")
    checks = ledger.ran(f"{ctx.execution_id}:{ctx.step_index}.checks") if ledger is not None else 1
    if checks < int(ctx.data.get("settle_after", 2)):
        return NOT_YET
    return {"settled": True, "settlement_checks": checks}


@workflow("payment_webhook")
class PaymentWebhook:
    steps = [
        reserve_inventory,
        wait_for_callback("payment", submit=request_payment, timeout=timedelta(hours=1)),
        wait_until(check_settled, every=timedelta(minutes=5), timeout=timedelta(hours=6)),
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=3, base=30, max_delay=300)


def _child_chaos(ctx: StepContext) -> dict[str, Any]:
    # The chaos kit aims faults at the children through the parent's input.
    knobs = ctx.data.get("child_chaos")
    return {"chaos": knobs} if isinstance(knobs, dict) else {}


def pick_input(ctx: StepContext) -> dict[str, Any]:
    return {"order_id": ctx.data.get("order_id"), **_child_chaos(ctx)}


def courier_input(ctx: StepContext) -> dict[str, Any]:
    return {"order_id": ctx.data.get("order_id"), "reservation": ctx.data.get("reservation"), **_child_chaos(ctx)}


@workflow("warehouse_pick")
class WarehousePick:
    steps = [reserve_inventory]


@workflow("courier_booking")
class CourierBooking:
    steps = [ship_order]


@workflow("order_with_children")
class OrderWithChildren:
    steps = [
        child("warehouse_pick", input=pick_input),
        child("courier_booking", input=courier_input),
        notify_customer,
    ]
