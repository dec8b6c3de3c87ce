"""loom.testing with typed inputs and results: what a test of a typed workflow sees."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from engine import NonRetryableError, Registry, map_items, step, workflow
from engine import parallel as fan_parallel
from engine.errors import InvalidInput
from engine.fan_view import page
from engine.serde import JsonSerializer
from loom.testing import WorkflowTest, run_workflow
from workflows.typed import Line, Order, Quote, Tier

pytestmark = pytest.mark.unit

ORDER = {
    "id": "o-1",
    "lines": [{"sku": "tea", "qty": 2, "unit_price": 3.5}, {"sku": "cup", "qty": 1, "unit_price": 3.0}],
    "placed_at": "2026-01-05T09:00:00+00:00",
    "tier": "gold",
}


def test_the_example_stores_its_typed_result_as_json_under_the_step_name():
    ex, history = run_workflow("typed_order", ORDER)
    assert ex.status.value == "COMPLETED"
    price, confirm = history
    assert price.result == {
        "price": {
            "order_id": "o-1",
            "total": 9.0,
            "discount": 1.0,
            "valid_until": "2026-01-12T09:00:00+00:00",
            "skus": ["tea", "cup"],
        }
    }
    assert confirm.result == {"confirmation": "o-1:9.00", "items": 2}
    assert ex.context["price"] == price.result["price"]  # one object under one name, not merged


def test_a_test_reads_the_typed_result_back_and_may_start_with_a_typed_input():
    order = Order("o-2", [Line("tea", 1, 4.0)], datetime(2026, 2, 1, tzinfo=UTC), Tier.STANDARD)
    with WorkflowTest() as t:
        eid = t.start("typed_order", order)
        t.run(eid)
        assert t.execution(eid).input["placed_at"] == "2026-02-01T00:00:00+00:00"
        quote = t.value(eid, "price", Quote)
        assert quote == Quote("o-2", 4.0, 0.0, datetime(2026, 2, 8, tzinfo=UTC), ["tea"])
        assert t.value(eid, "confirmation") == "o-2:4.00"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({**ORDER, "tier": "platinum"}, "$.tier: 'platinum' is not a Tier"),
        ({**ORDER, "lines": [{"sku": "tea", "qty": "two", "unit_price": 1}]}, "$.lines[0].qty: expected int, got str"),
        ({"id": "o-3", "lines": []}, "needs field 'placed_at'"),
    ],
)
def test_an_input_that_does_not_load_into_the_input_type_is_refused_writing_nothing(bad, says):
    with WorkflowTest() as t:
        with pytest.raises(InvalidInput) as err:
            t.start("typed_order", bad, execution_id="bad")
        assert "workflow 'typed_order': the input does not load into Order" in str(err.value)
        assert says in str(err.value)
        assert t.store.get_execution("bad") is None and t.queue.receive() is None


class Opaque:
    pass


@dataclass
class Holder:
    thing: Any


def holds_opaque(ctx):
    return Holder(Opaque())


def returns_a_list(ctx):
    return [1, 2]


class Tagged(JsonSerializer):
    """A custom serializer: what it dumps is what is stored; it loads what it dumped."""

    def dump(self, value: Any) -> Any:
        dumped = super().dump(value)
        return {**dumped, "v": 1} if isinstance(dumped, dict) else dumped

    def load(self, data: Any, type_: Any) -> Any:
        return super().load({k: v for k, v in data.items() if k != "v"}, type_)


def part(ctx):
    return Line("bolt", 3, 0.25)


def reads_part(ctx):
    line: Line = ctx.get("part", Line)
    return {"seen": line.sku, "cost": line.qty * line.unit_price}


@pytest.fixture
def reg() -> Registry:
    reg = Registry()
    workflow("opaque", registry=reg)(type("Opaque", (), {"steps": [holds_opaque]}))
    workflow("listy", registry=reg)(type("Listy", (), {"steps": [returns_a_list]}))
    workflow("tagged", registry=reg, serializer=Tagged())(type("T", (), {"steps": [part, reads_part]}))
    return reg


def test_an_unserialisable_typed_result_fails_the_step_naming_the_type(reg):
    ex, (record,) = run_workflow("opaque", registry=reg)
    assert ex.status.value == "FAILED" and ex.error["type"] == "InvalidResult"
    assert ex.error["step_name"] == "holds_opaque" and ex.error["reason"] == "non_retryable"
    assert (
        ex.error["message"]
        == "the step's result is not JSON-serialisable: Object of type Opaque is not JSON serializable"
    )
    assert record.result is None


def test_a_plain_non_dict_result_is_still_refused(reg):
    ex, _ = run_workflow("listy", registry=reg)
    assert ex.error["message"] == "a step must return a dict, None or a typed value (a dataclass, a model), not list"


def test_the_workflow_serializer_decides_the_stored_form_and_loads_it_back(reg):
    ex, (first, second) = run_workflow("tagged", registry=reg)
    assert ex.status.value == "COMPLETED"
    assert first.result == {"part": {"sku": "bolt", "qty": 3, "unit_price": 0.25, "v": 1}}
    assert second.result == {"seen": "bolt", "cost": 0.75, "v": 1}  # a dict result goes through it too


@dataclass(frozen=True)
class Hold:
    id: str
    seats: int


def hold(ctx):
    return Hold(f"h-{ctx.input_as(Holder).thing}", 2)


def release(ctx):
    # The compensation reads the typed result it undoes, through the step's serializer.
    undone: Hold = ctx.get("hold", Hold)
    return {"released": undone.id, "seats": undone.seats}


def refuse(ctx):
    raise NonRetryableError("no seats left on the flight")


def test_a_compensation_reads_the_typed_result_it_undoes():
    reg = Registry()
    steps = [step(hold, compensate=release), refuse]
    workflow("typed_saga", registry=reg, input_type=Holder)(type("TypedSaga", (), {"steps": steps}))
    with WorkflowTest(reg) as t:
        eid = t.start("typed_saga", Holder("x1"))
        assert t.run(eid).status.value == "COMPENSATED"
        undo = [r for r in t.history(eid) if r.name.endswith("compensate")]
        assert [r.result for r in undo] == [{"released": "h-x1", "seats": 2}]


def typed_item(ctx):
    return Hold(f"h-{ctx.item}", 1)


def test_typed_map_items_and_branches_are_stored_as_json_and_read_back_typed():
    reg = Registry()

    def holds(ctx):
        return {"seats": [h.seats for h in ctx.get("holds", list[Hold])], "branch": ctx.get("typed_item", Hold).id}

    steps = [
        map_items(items=lambda ctx: [1, 2], run=typed_item, name="holds"),
        fan_parallel(step(typed_item), name="one"),
        step(holds),
    ]
    workflow("typed_items", registry=reg)(type("TypedItems", (), {"steps": steps}))
    with WorkflowTest(reg) as t:
        eid = t.start("typed_items")
        ex = t.run(eid)
        assert ex.status.value == "COMPLETED", ex.error
        assert ex.context["holds"] == [{"id": "h-1", "seats": 1}, {"id": "h-2", "seats": 1}], "stored as JSON"
        assert ex.context["typed_item"] == {"id": "h-None", "seats": 1}, "a typed branch lands under its name"
        assert ex.context["seats"] == [1, 1] and ex.context["branch"] == "h-None"
        found = page(t.engine, eid, 0)
        assert found is not None and [r.result for r in found.records] == ex.context["holds"]


def test_an_item_result_no_serializer_dumps_is_refused_naming_its_type():
    reg = Registry()
    steps = [map_items(items=lambda ctx: [1], run=lambda ctx: object(), name="holds")]
    workflow("untyped_items", registry=reg)(type("UntypedItems", (), {"steps": steps}))
    with WorkflowTest(reg) as t:
        eid = t.start("untyped_items")
        t.run(eid)
        found = page(t.engine, eid, 0)
        assert found is not None
        (item,) = found.records
        assert item.status.value == "FAILED" and item.error is not None and item.error["type"] == "InvalidResult"
        assert "the item's result is not JSON-serialisable: Object of type object" in item.error["message"]
