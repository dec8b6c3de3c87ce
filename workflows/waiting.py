"""Example workflows that wait on the outside world (docs/guide/waits.md).

- ``order_approval``: a person approves from the CLI,
  ``loom signal ID approval --payload '{"approved": true}'``.
- ``payment_webhook``: a payment provider answers a webhook-style callback
  (``POST /callbacks/{token}/succeed``), then the settlement is polled durably.
- ``order_with_children``: a parent starts two child workflows and waits for both.
- ``order_sign_off``: two callbacks pending at once: ``create_callback`` makes a finance and a
  warehouse handle, one step sends both tokens out, and ``wait_for_callbacks`` waits for the
  two answers, in whichever order (or before it starts) they come.
- ``report_export``: a poll that carries state: each check collects the export's chunks that
  are ready and checkpoints what it has, backing off exponentially, at most ``max_checks``
  checks; an export that never finishes is caught and the report goes out without it.

The "outside world" of these examples is the side-effect ledger: ``request_payment``
hands its token to the provider by landing it there (the provider's inbox), which is
where ``loom demo`` picks it up to complete the callback from outside.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine import (
    NOT_YET,
    NonRetryableError,
    RetryPolicy,
    StepContext,
    child,
    create_callback,
    exponential,
    not_yet,
    wait_for_callback,
    wait_for_callbacks,
    wait_for_signal,
    wait_until,
    workflow,
)
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
        # An unanswered payment request is asked again (a new token), up to three times: a wait's
        # timeout is retried only when the wait names its own policy (engine/retry.py, for_wait).
        wait_for_callback(
            "payment",
            submit=request_payment,
            timeout=timedelta(hours=1),
            retry=RetryPolicy(max_attempts=3, base=30, max_delay=300),
        ),
        wait_until(check_settled, every=timedelta(minutes=5), timeout=timedelta(hours=6)),
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=3, base=30, max_delay=300)


# docs:start sign_off
def request_sign_offs(ctx: StepContext) -> dict[str, Any]:
    """Send finance and the warehouse each their own token; both are pending from now on."""
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        for who in ("finance", "warehouse"):
            # Keyed by the step, not the attempt: a retry sends the same token (a handle has one).
            key = f"{ctx.execution_id}:{ctx.step_index}.{who}"
            ledger.apply(key, {"kind": "sign_off_request", "to": who, "callback_token": ctx.callback_token(who)})
    return {"sign_offs_requested": ["finance", "warehouse"]}


def apply_sign_offs(ctx: StepContext) -> dict[str, Any]:
    finance, warehouse = ctx.data.get("finance") or {}, ctx.data.get("warehouse") or {}
    if finance.get("approved") is not True:
        raise NonRetryableError(f"finance did not approve order {ctx.data.get('order_id')!r}")
    return {"dock": warehouse.get("dock", "any")}


@workflow("order_sign_off")
class OrderSignOff:
    steps = [
        reserve_inventory,
        create_callback("finance", timeout=timedelta(days=2)),
        create_callback("warehouse", timeout=timedelta(days=1), heartbeat_timeout=timedelta(hours=6)),
        request_sign_offs,
        wait_for_callbacks("finance", "warehouse"),
        apply_sign_offs,
        ship_order,
    ]
    retry = RetryPolicy(max_attempts=3, base=30, max_delay=300)


# docs:end sign_off


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


def collect_export(ctx: StepContext, state: dict[str, Any]) -> Any:
    """Fetch the chunks of the export that are ready since the last check; done when all are in.

    ``state`` is what earlier checks collected, checkpointed after each: a crash between two
    checks fetches nothing twice. The example's export service makes one chunk ready per check
    (``ready_per_check``), out of ``chunks``.
    """
    total = int(ctx.data.get("chunks", 3))
    have = list(state["chunks"])
    ready = min(total, len(have) + int(ctx.data.get("ready_per_check", 1)))
    have += [f"chunk-{i + 1}" for i in range(len(have), ready)]
    if len(have) >= total:
        return {"export": have}
    return not_yet({"chunks": have})


def export_unavailable(ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
    """The export never finished within its checks: the report goes out without it."""
    return {"export": None, "export_error": error["type"]}


def publish_report(ctx: StepContext) -> dict[str, Any]:
    export = ctx.data.get("export")
    return {"published": True, "attached_chunks": 0 if export is None else len(export)}


@workflow("report_export")
class ReportExport:
    steps = [
        wait_until(
            collect_export,
            initial_state={"chunks": []},
            strategy=exponential(initial=10, factor=2, max=600),  # 10 s, 20 s, 40 s ... 10 min, full jitter
            max_checks=8,
            timeout=timedelta(hours=2),
            catch=export_unavailable,
        ),
        publish_report,
    ]
    retry = RetryPolicy(max_attempts=1)  # an export past its checks is not polled again: it is caught
