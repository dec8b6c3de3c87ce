"""Fan-out examples: an order that reserves in parallel (and undoes it when shipping fails), and a
map over an order's lines.

Each branch and item lands its effect in the ledger under its own idempotency key
(``<id>:<step>:<branch or item>``), each undo under ``<id>:<step>:<branch>:compensate``.

- ``order_parallel``: reserve stock and authorize the card side by side, then ship. Without a
  ``courier`` in the input, ship fails for good: the authorization is voided, then the stock
  released (the committed branches, last first), and the execution ends COMPENSATED.
- ``price_lines``: price every line of ``lines`` (at most 5 at once), then total them; the next
  step reads the results in line order with ``ctx.results("prices")``.
"""

from __future__ import annotations

from typing import Any

from engine import NonRetryableError, RetryPolicy, StepContext, step, workflow
from engine.fanout_spec import map, parallel


def _land(ctx: StepContext, kind: str, **data: Any) -> dict[str, Any]:
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
        ledger.apply(ctx.idempotency_key, {"kind": kind, **data})
    return {f"{kind}_key": ctx.idempotency_key}


def reserve_stock(ctx: StepContext) -> dict[str, Any]:
    return {**_land(ctx, "reservation", sku=ctx.data.get("sku")), "reservation": f"res-{ctx.execution_id[:12]}"}


def release_stock(ctx: StepContext) -> dict[str, Any]:
    return _land(ctx, "release", reservation=(ctx.result or {}).get("reservation"))


def authorize_card(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.data.get("amount", 0)
    return {**_land(ctx, "authorization", amount=amount), "authorized": amount}


def void_authorization(ctx: StepContext) -> dict[str, Any]:
    return _land(ctx, "void", amount=(ctx.result or {}).get("authorized"), reason=(ctx.failure or {}).get("message"))


def ship(ctx: StepContext) -> dict[str, Any]:
    courier = ctx.data.get("courier")
    if not courier:
        raise NonRetryableError("no courier will take this parcel")
    return {**_land(ctx, "shipment", courier=courier), "tracking": f"trk-{ctx.execution_id[:12]}"}


UNDO = RetryPolicy(max_attempts=5, base=1, max_delay=30)


@workflow("order_parallel")
class OrderParallel:
    steps = [
        parallel(
            step(reserve_stock, compensate=release_stock, compensate_retry=UNDO),
            step(authorize_card, compensate=void_authorization, compensate_retry=UNDO),
            name="reserve",
        ),
        ship,
    ]
    retry = RetryPolicy(max_attempts=3, base=1, max_delay=5)


def order_lines(ctx: StepContext) -> list[Any]:
    return list(ctx.data.get("lines") or [])


def price_line(ctx: StepContext) -> dict[str, Any]:
    line = ctx.item or {}
    price = round(float(line.get("qty", 1)) * float(line.get("unit_price", 0)), 2)
    _land(ctx, "price", sku=line.get("sku"), price=price)
    return {"sku": line.get("sku"), "price": price}


def total(ctx: StepContext) -> dict[str, Any]:
    prices = [r["price"] for r in ctx.results("prices") if r is not None]
    return {"total": round(sum(prices), 2), "priced_lines": len(prices)}


@workflow("price_lines")
class PriceLines:
    steps = [map(items=order_lines, run=price_line, name="prices", max_concurrency=5), total]
    retry = RetryPolicy(max_attempts=3, base=1, max_delay=5)
