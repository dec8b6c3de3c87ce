"""Typed inputs and results against moto: stored as plain JSON, read as JSON through the API,
refused at start (nothing written) when the input does not load into the workflow's input_type."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from engine import Registry, Status, workflow
from engine.errors import InvalidInput
from tests.integration.api_support import Functions
from tests.integration.engine_support import build_rig
from workflows.typed import Line, Order, Tier

pytestmark = pytest.mark.integration

ORDER = {
    "id": "o-9",
    "lines": [{"sku": "tea", "qty": 4, "unit_price": 2.5}],
    "placed_at": "2026-01-05T09:00:00+00:00",
    "tier": "standard",
}
QUOTE = {"order_id": "o-9", "total": 10.0, "discount": 0.0, "valid_until": "2026-01-12T09:00:00+00:00", "skus": ["tea"]}


def test_a_typed_result_reads_as_json_through_the_api(fn: Functions) -> None:
    status, _ = fn.api("POST", "/executions", {"workflow": "typed_order", "input": ORDER, "execution_id": "t1"})
    assert status == 201
    fn.drain()
    status, history = fn.api("GET", "/executions/t1/history")
    assert status == 200
    assert [(s["name"], s["status"]) for s in history["steps"]] == [("price", "COMPLETED"), ("confirm", "COMPLETED")]
    assert history["steps"][0]["result"] == {"price": QUOTE}
    _, body = fn.api("GET", "/executions/t1")
    assert body["status"] == "COMPLETED" and body["output"]["price"] == QUOTE
    assert body["output"]["confirmation"] == "o-9:10.00"
    _, listed = fn.api("GET", "/workflows")
    (typed,) = [w for w in listed["workflows"] if w["name"] == "typed_order"]
    assert typed["input_type"] == "Order"  # the console's Workflows page shows it


def test_the_stored_history_item_holds_the_json_the_result_dumped_to(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "typed_order", "input": ORDER, "execution_id": "t2"})
    fn.drain()
    items = fn.refs["dynamodb"].scan(TableName=fn.refs["Table"])["Items"]
    stored = [i for i in items if "price" in json.dumps(i) and "valid_until" in json.dumps(i)]
    assert stored, "the quote is in the table as JSON text, its datetime an ISO string"
    assert all("Quote" not in json.dumps(i) for i in items), "no type name is stored beside the value"


@pytest.mark.parametrize(
    "bad",
    [
        {**ORDER, "tier": "platinum"},
        {**ORDER, "lines": [{"sku": "tea"}]},
        {**ORDER, "placed_at": "tomorrow"},
        {**ORDER, "unknown": 1},
    ],
)
def test_an_input_that_does_not_load_is_a_400_and_writes_nothing(fn: Functions, bad: dict) -> None:
    before = fn.counts()
    status, body = fn.api("POST", "/executions", {"workflow": "typed_order", "input": bad, "execution_id": "t3"})
    assert (status, body["error"]["code"]) == (400, "invalid_input")
    assert "does not load into Order" in body["error"]["message"]
    assert fn.counts() == before == {"items": 0, "StepQueue": 0, "DeadLetterQueue": 0}


@dataclass(frozen=True)
class Receipt:
    order: Order
    paid: bool


def pay(ctx):
    return Receipt(ctx.input_as(Order), paid=True)


def check(ctx):
    receipt: Receipt = ctx.get("pay", Receipt)
    return {"paid_for": receipt.order.lines[0].sku, "tier": receipt.order.tier.value}


def test_the_engine_starts_from_a_typed_input_and_steps_read_it_back_typed(aws, make_engine, clock) -> None:
    reg = Registry()
    workflow("typed_pay", registry=reg, input_type=Order)(type("TypedPay", (), {"steps": [pay, check]}))
    rig = build_rig(aws, make_engine, clock, reg)
    order = Order("o-1", [Line("mug", 1, 8.0)], datetime(2026, 5, 1, tzinfo=UTC), Tier.GOLD)
    ex, created = rig.engine.start("typed_pay", order, execution_id="tp")
    assert created and ex.input["tier"] == "gold" and ex.input["placed_at"] == "2026-05-01T00:00:00+00:00"
    # The same order again, as JSON: the same input, so the start is idempotent.
    again, created = rig.engine.start("typed_pay", json.loads(json.dumps(ex.input)), execution_id="tp")
    assert not created and again.id == "tp"
    rig.driver.pump()
    done = rig.engine.get("tp")
    assert done.status is Status.COMPLETED and done.context["paid_for"] == "mug" and done.context["tier"] == "gold"
    (paid, _) = rig.engine.history("tp")
    assert paid.result == {"pay": {"order": ex.input, "paid": True}}
    with pytest.raises(InvalidInput, match="input does not load into Order"):
        rig.engine.start("typed_pay", {"id": "o-2"}, execution_id="tp2")
    assert rig.store.get_execution("tp2") is None
