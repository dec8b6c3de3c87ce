"""Typed inputs and results: an order comes in as a dataclass, its quote goes out as one.

``input_type=Order`` refuses at start (InvalidInput, nothing written) an input that does not
load into ``Order``; ``price`` returns a ``Quote``, stored as plain JSON under the step's name
(``{"price": {"total": ..., ...}}``), which the history, the API and the console show as it is;
``confirm`` reads it back as a ``Quote``. Start ``typed_order`` with
``{"id": "o-1", "lines": [{"sku": "tea", "qty": 2, "unit_price": 3.5}],
"placed_at": "2026-01-05T09:00:00+00:00", "tier": "gold"}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from engine import StepContext, workflow


class Tier(Enum):
    STANDARD = "standard"
    GOLD = "gold"


@dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    unit_price: float


# docs:start typed
@dataclass(frozen=True)
class Order:
    id: str
    lines: list[Line]  # nested dataclasses, lists, Optional, datetime (ISO), Enums
    placed_at: datetime
    tier: Tier = Tier.STANDARD
    note: str | None = None


@dataclass(frozen=True)
class Quote:
    order_id: str
    total: float
    discount: float
    valid_until: datetime
    skus: list[str] = field(default_factory=list)


DISCOUNTS = {Tier.STANDARD: 0.0, Tier.GOLD: 0.1}


def price(ctx: StepContext) -> Quote:
    order: Order = ctx.input_as(Order)  # the input as started, loaded into Order
    gross = sum(line.qty * line.unit_price for line in order.lines)
    discount = round(gross * DISCOUNTS[order.tier], 2)
    # From the input, not the clock: a re-run of this step commits the same quote.
    valid_until = order.placed_at + timedelta(days=7)
    return Quote(order.id, round(gross - discount, 2), discount, valid_until, [line.sku for line in order.lines])


def confirm(ctx: StepContext) -> dict[str, Any]:
    quote: Quote = ctx.get("price", Quote)  # ctx.data["price"] loaded back as a Quote
    return {"confirmation": f"{quote.order_id}:{quote.total:.2f}", "items": len(quote.skus)}


@workflow("typed_order", input_type=Order)  # a start whose input does not load is a 400, nothing written
class TypedOrder:
    steps = [price, confirm]


# docs:end typed
