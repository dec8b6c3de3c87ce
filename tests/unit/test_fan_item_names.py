"""A map's item namer (issue #22 item 6): names checked as the map opens, stored with each item
record by the write that records it, shown by the history's item rows; on loom.testing."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Registry, RetryPolicy, map_items, workflow
from engine.errors import InvalidFanoutItems, WorkflowDefinitionError
from engine.fan_items import ITEM_NAME_RE, check_item_names, item_label
from engine.fan_view import page
from functions import views
from loom.testing import WorkflowTest

pytestmark = pytest.mark.unit


def lines(ctx: Any) -> Any:
    return ctx.data["lines"]


def price(ctx: Any) -> Any:
    if ctx.item["sku"] == "flaky" and ctx.attempt == 1:
        raise RuntimeError("try again")
    if ctx.item["sku"] == "broken":
        raise ValueError("no price")
    return ctx.item["qty"] * 2


def by_sku(item: Any, index: int) -> str:
    return f"{item['sku']} #{index}" if item.get("dup_ok") else str(item["sku"])


def spec_of(namer: Any) -> Any:
    return map_items(items=lines, run=price, name="prices", item_namer=namer)


@pytest.mark.parametrize("name", ["sku-1", "a", "order 17: tea", "x" * 64, "s3://bucket/key#2", "user@host", "a+b=c"])
def test_safe_names_are_accepted(name):
    assert ITEM_NAME_RE.fullmatch(name)
    assert item_label(spec_of(lambda item, i: name), 0, {}) == name


@pytest.mark.parametrize(
    "bad", ["", " lead", "trail ", "x" * 65, "<script>", 'quo"te', "new\nline", "tab\t", "é", 7, None]
)
def test_an_unsafe_or_unbounded_name_is_refused_naming_the_item(bad):
    with pytest.raises(InvalidFanoutItems) as err:
        item_label(spec_of(lambda item, i: bad), 3, {})
    assert "map 'prices': item 3's name" in str(err.value) and "1 to 64" in str(err.value)


def test_a_namer_that_raises_is_an_invalid_items_error():
    with pytest.raises(InvalidFanoutItems, match="item_namer failed on item 1: KeyError"):
        item_label(spec_of(lambda item, i: item["missing"]), 1, {})


def test_duplicate_names_are_refused_naming_both_items():
    with pytest.raises(InvalidFanoutItems) as err:
        check_item_names(spec_of(by_sku), [{"sku": "a"}, {"sku": "b"}, {"sku": "a"}])
    assert str(err.value) == "map 'prices': items 0 and 2 are both named 'a'; item names must be unique"
    check_item_names(spec_of(None), [{"sku": "a"}, {"sku": "a"}])  # no namer: numbered, nothing to check


def test_the_namer_is_checked_at_the_definition_and_described():
    with pytest.raises(WorkflowDefinitionError, match="item_namer 'sku' of map 'prices' must be a function"):
        spec_of("sku")
    assert spec_of(by_sku).describe_fan(_registry().get("named"))["item_namer"] == "by_sku"
    assert "item_namer" not in spec_of(None).describe_fan(_registry().get("named"))


def _registry(namer: Any = by_sku) -> Registry:
    reg = Registry()
    policy = RetryPolicy(max_attempts=2, base=1)
    workflow("named", registry=reg)(
        type("Named", (), {"steps": [map_items(items=lines, run=price, name="prices", item_namer=namer, retry=policy)]})
    )
    return reg


LINES = [{"sku": "tea", "qty": 1}, {"sku": "flaky", "qty": 2}, {"sku": "cup", "qty": 3}]


def test_each_item_record_carries_its_name_and_the_history_rows_show_it():
    with WorkflowTest(_registry()) as t:
        eid = t.start("named", {"lines": LINES})
        assert t.run(eid).status.value == "COMPLETED"
        found = page(t.engine, eid, 0)
        assert found is not None
        assert [(r.index, r.label, r.status.value) for r in found.records] == [
            (0, "tea", "COMPLETED"),
            (1, "flaky", "COMPLETED"),  # named on its failed first attempt's record, kept by the commit
            (2, "cup", "COMPLETED"),
        ]
        rows = views.fan_page(found)["items"]
        assert [(i["index"], i["name"]) for i in rows] == [(0, "tea"), (1, "flaky"), (2, "cup")]


def test_a_failed_item_is_named_too():
    with WorkflowTest(_registry()) as t:
        eid = t.start("named", {"lines": [{"sku": "tea", "qty": 1}, {"sku": "broken", "qty": 1}]})
        assert t.run(eid).status.value == "COMPLETED", "a failed item is in the batch; it does not fail the map"
        found = page(t.engine, eid, 0)
        assert found is not None and [(r.label, r.status.value) for r in found.records] == [
            ("tea", "COMPLETED"),
            ("broken", "FAILED"),
        ]


def test_naming_adds_no_write():
    counts = []
    for namer in (by_sku, None):
        with WorkflowTest(_registry(namer)) as t:
            eid = t.start("named", {"lines": LINES})
            t.run(eid)
            counts.append(t.store.writes)
    assert counts[0] == counts[1]


def test_a_map_whose_names_collide_fails_as_it_opens_and_runs_no_item():
    with WorkflowTest(_registry()) as t:
        eid = t.start("named", {"lines": [{"sku": "tea", "qty": 1}, {"sku": "tea", "qty": 2}]})
        ex = t.run(eid)
        assert ex.status.value == "FAILED" and ex.error["type"] == "InvalidFanoutItems"
        assert ex.error["message"] == "map 'prices': items 0 and 1 are both named 'tea'; item names must be unique"
        assert page(t.engine, eid, 0) is None, "the map never opened: no join, no item record"


def test_unnamed_map_items_keep_their_numbered_rows():
    with WorkflowTest(_registry(None)) as t:
        eid = t.start("named", {"lines": LINES})
        t.run(eid)
        found = page(t.engine, eid, 0)
        assert found is not None and all(r.label is None for r in found.records)
        assert all("name" not in i for i in views.fan_page(found)["items"])
