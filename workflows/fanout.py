"""Fan-out examples: an order that reserves in parallel (and undoes it when shipping fails), and a
map over an order's lines.

Each branch and item lands its effect in the ledger under its own idempotency key
(``<id>:<step>:<branch or item>``), each undo under ``<id>:<step>:<branch>:compensate``.

- ``order_parallel``: reserve stock and authorize the card side by side, then ship. Without a
  ``courier`` in the input, ship fails for good: the authorization is voided, then the stock
  released (the committed branches, last first), and the execution ends COMPENSATED.
- ``order_parallel`` fails its fan-out on a failed branch (``on_failure="fail"``): shipping
  with a declined card is worse than undoing the reservation.
- ``price_lines``: price every line of ``lines`` (at most 5 at once), then total them; the next
  step reads the results in line order with ``ctx.results("prices")`` and the batch result
  with ``ctx.batch("prices")``: a line that cannot be priced is left out of the total and named
  in ``unpriced``, instead of failing the order.
"""

from __future__ import annotations

from typing import Any

from engine import RetryPolicy, StepContext, map_items, parallel, step, workflow
from workflows.saga import UNDO, land, release_stock, reserve_stock, ship  # the saga's order steps, fanned out


def authorize_card(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.data.get("amount", 0)
    return {**land(ctx, "authorization", amount=amount), "authorized": amount}


def void_authorization(ctx: StepContext) -> dict[str, Any]:
    return land(ctx, "void", amount=(ctx.result or {}).get("authorized"), reason=(ctx.failure or {}).get("message"))


# docs:start parallel
@workflow("order_parallel")
class OrderParallel:
    steps = [
        parallel(
            step(reserve_stock, compensate=release_stock, compensate_retry=UNDO),
            step(authorize_card, compensate=void_authorization, compensate_retry=UNDO),
            name="reserve",
            on_failure="fail",  # a declined card fails the step: the saga releases the stock
        ),
        ship,
    ]
    retry = RetryPolicy(max_attempts=3, base=1, max_delay=5)


# docs:end parallel


def order_lines(ctx: StepContext) -> list[Any]:
    return list(ctx.data.get("lines") or [])


def price_line(ctx: StepContext) -> dict[str, Any]:
    line = ctx.item or {}
    price = round(float(line.get("qty", 1)) * float(line.get("unit_price", 0)), 2)
    land(ctx, "price", sku=line.get("sku"), price=price)
    return {"sku": line.get("sku"), "price": price}


# docs:start map
def total(ctx: StepContext) -> dict[str, Any]:
    prices = [r["price"] for r in ctx.results("prices") if r is not None]  # in item order; None: failed
    batch = ctx.batch("prices")  # reason, succeeded, failed, not_started, errors, raise_if_failed()
    unpriced = [e.index for e in batch.errors]
    return {"total": round(sum(prices), 2), "priced_lines": len(prices), "unpriced": unpriced}


@workflow("price_lines")
class PriceLines:
    # Also: min_successful, tolerated_failures, tolerated_failure_percentage (when to stop starting items).
    steps = [map_items(items=order_lines, run=price_line, name="prices", max_concurrency=5), total]
    retry = RetryPolicy(max_attempts=3, base=1, max_delay=5)


# docs:end map
