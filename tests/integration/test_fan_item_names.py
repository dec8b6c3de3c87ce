"""A map's item namer against moto: the name is an attribute of the item record, written by the
write that records the item (no request of its own), and the control plane's history and items
pages show it on the map's item rows (the console and ``loom history`` draw ``name``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from engine import Registry, RetryPolicy, map_items, workflow
from functions import wiring
from tests.integration.api_support import Functions
from tests.integration.engine_support import build_rig

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, base=1, jitter="none")


def lines(ctx: Any) -> Any:
    return ctx.data["lines"]


def price(ctx: Any) -> Any:
    if ctx.item["sku"] == "broken":
        raise ValueError("no price for this line")
    return {"sku": ctx.item["sku"], "price": ctx.item["qty"] * 1.5}


def sku_name(item: Any, index: int) -> str:
    return f"line {index}: {item['sku']}"


def registry(namer: Any = sku_name) -> Registry:
    reg = Registry()
    steps = [map_items(items=lines, run=price, name="prices", item_namer=namer, retry=QUICK, max_concurrency=2)]
    workflow("named_lines", registry=reg)(type("NamedLines", (), {"steps": steps}))
    return reg


LINES = [{"sku": "tea", "qty": 2}, {"sku": "cup", "qty": 1}, {"sku": "pot", "qty": 4}]


def test_the_name_is_stored_on_the_item_record_with_no_request_of_its_own(aws, make_engine, clock) -> None:
    requests: list[Counter[str]] = []
    for namer in (sku_name, None):
        calls: Counter[str] = Counter()

        def count(event_name: str, calls: Counter[str] = calls, **_: Any) -> None:
            calls[event_name.rsplit(".", 1)[-1]] += 1

        aws["dynamodb"].meta.events.register("before-call.dynamodb", count)
        rig = build_rig(aws, make_engine, clock, registry(namer))
        eid = f"n-{namer is not None}"
        rig.engine.start("named_lines", {"lines": LINES}, execution_id=eid)
        rig.driver.pump()
        aws["dynamodb"].meta.events.unregister("before-call.dynamodb", count)
        assert rig.status(eid) == "COMPLETED"
        requests.append(calls)
    named, plain = requests
    assert named == plain and named["TransactWriteItems"] == len(LINES)
    raw = aws["dynamodb"].scan(TableName=aws["Table"])["Items"]
    labels = sorted(i["label"]["S"] for i in raw if "label" in i)
    assert labels == ["line 0: tea", "line 1: cup", "line 2: pot"], "only the named map's records carry one"


def deploy(fn: Functions, monkeypatch: pytest.MonkeyPatch, reg: Registry) -> None:
    wiring.reset()
    monkeypatch.setattr(wiring, "default_registry", reg)


def test_the_history_and_the_items_page_show_each_items_name(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    deploy(fn, monkeypatch, registry())
    body = {"workflow": "named_lines", "input": {"lines": [*LINES, {"sku": "broken", "qty": 1}]}, "execution_id": "h"}
    assert fn.api("POST", "/executions", body)[0] == 201
    for _ in range(5):
        fn.drain()
        if fn.api("GET", "/executions/h")[1]["status"] != "RUNNING":
            break
    status, history = fn.api("GET", "/executions/h/history")
    assert status == 200
    (prices,) = [s for s in history["steps"] if s["phase"] == "forward"]
    rows = [(i["index"], i.get("name"), i["status"]) for i in prices["items"]]
    assert rows[:3] == [
        (0, "line 0: tea", "COMPLETED"),
        (1, "line 1: cup", "COMPLETED"),
        (2, "line 2: pot", "COMPLETED"),
    ]
    assert rows[3][:2] == (3, "line 3: broken"), "a failing item is named on its first failed attempt"
    status, more = fn.api("GET", "/executions/h/history?step=0&items_from=2&items_limit=2")
    assert status == 200
    assert [(i["index"], i["name"]) for i in more["items"]] == [(2, "line 2: pot"), (3, "line 3: broken")]


def test_colliding_names_fail_the_map_as_it_opens(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    deploy(fn, monkeypatch, registry(lambda item, i: item["sku"]))
    body = {"workflow": "named_lines", "input": {"lines": [LINES[0], LINES[0]]}, "execution_id": "dup"}
    fn.api("POST", "/executions", body)
    fn.drain()
    _, ex = fn.api("GET", "/executions/dup")
    assert ex["status"] == "FAILED" and ex["error"]["type"] == "InvalidFanoutItems"
    assert "items 0 and 1 are both named 'tea'" in ex["error"]["message"]
    _, history = fn.api("GET", "/executions/dup/history")
    (prices,) = [s for s in history["steps"] if s["phase"] == "forward"]
    assert "items" not in prices, "the map never opened: no item was recorded"
