"""A fan-out step's items in the control plane's history (issue #13): the first page on the
step (or on its pending row while it runs), the join's counts, and ``?step=N&items_from=K``
for the pages after it. The ``price_lines`` example (workflows/fanout.py) is the map."""

from __future__ import annotations

from typing import Any

import pytest
from freezegun import freeze_time

from functions import wiring
from tests.integration.api_support import Functions, sqs_event

pytestmark = pytest.mark.integration

BAD = {"sku": "bad", "qty": 1, "unit_price": "n/a"}  # float("n/a") raises: retried, then failed


def line(i: int) -> dict[str, Any]:
    return {"sku": f"s{i}", "qty": 2, "unit_price": 1.5}


def start_lines(fn: Functions, eid: str, lines: list[Any]) -> None:
    status, _ = fn.api(
        "POST", "/executions", {"workflow": "price_lines", "input": {"lines": lines}, "execution_id": eid}
    )
    assert status == 201


def deliver(fn: Functions, count: int) -> int:
    """Deliver at most ``count`` step messages to the worker, one at a time; the rest stay queued."""
    done = 0
    while done < count and (messages := fn.receive(limit=1)):
        fn.worker(sqs_event(messages, fn.refs["StepQueue.Arn"]))
        fn.refs["sqs"].delete_message(QueueUrl=fn.refs["StepQueue"], ReceiptHandle=messages[0]["ReceiptHandle"])
        done += 1
    return done


def test_a_maps_failed_item_carries_its_attempts_and_status_in_the_batch(fn: Functions) -> None:
    with freeze_time("2026-12-01T10:00:00Z") as frozen:
        start_lines(fn, "m1", [line(0), BAD, line(2)])
        for _ in range(6):  # each round lets the bad line's retry delay pass
            fn.drain()
            frozen.tick(10)
            if fn.api("GET", "/executions/m1")[1]["status"] == "COMPLETED":
                break
        body = fn.api("GET", "/executions/m1/history")[1]
        ex = fn.api("GET", "/executions/m1")[1]
    assert body["state"]["kind"] == "completed", "a failed line does not fail the order: the batch says"
    assert ex["output"]["unpriced"] == [1] and ex["output"]["total"] == 6.0
    assert ex["output"]["prices:batch"]["reason"] == "ALL_COMPLETED"
    prices = next(s for s in body["steps"] if s["phase"] == "forward")
    assert (prices["name"], prices["kind"], prices["status"]) == ("prices", "map", "COMPLETED")
    assert (prices["n"], prices["ok"], prices["failed"], prices["decided"]) == (3, 2, 1, "SUCCEEDED")
    assert prices["items_next"] is None
    items = prices["items"]
    assert [(i["index"], i["status"], len(i["attempts"])) for i in items] == [
        (0, "COMPLETED", 1),
        (1, "FAILED", 3),
        (2, "COMPLETED", 1),
    ]
    assert items[0]["result"] == {"sku": "s0", "price": 3.0}
    assert [a["outcome"] for a in items[1]["attempts"]] == ["failed"] * 3
    assert items[1]["attempts"][0]["error"]["type"] == "ValueError"
    assert items[1]["attempts"][0]["retry_delay"] is not None and items[1]["attempts"][-1]["retry_delay"] is None
    assert all(i["duration_seconds"] is not None for i in items)
    assert body["pending"] == [], "an ended execution has nothing pending"


def test_a_running_maps_items_so_far_hang_on_its_pending_row(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    fn = Functions(fn.refs, monkeypatch, LOOM_CHAIN="false")  # one message at a time: stop mid-map
    wiring.reset()
    start_lines(fn, "m2", [line(i) for i in range(8)])
    assert deliver(fn, 3) == 3  # the open (sends items 0..4), then items 0 and 1
    body = fn.api("GET", "/executions/m2/history")[1]
    assert body["state"]["kind"] == "running" and body["state"]["step"] == 0
    (prices,) = body["steps"]  # no record of its own until it joins: a row made from its join
    assert (prices["index"], prices["name"], prices["kind"], prices["status"]) == (0, "prices", "map", "RUNNING")
    assert prices["attempts"] == [] and prices["duration_seconds"] is None and prices["started_at"] is not None
    assert (prices["n"], prices["ok"], prices["failed"], prices["decided"]) == (8, 2, 0, None)
    assert prices["items_next"] is None
    assert [i["status"] for i in prices["items"]] == ["COMPLETED"] * 2 + ["PENDING"] * 6
    assert prices["items"][2] == {"index": 2, "status": "PENDING", "attempts": [], "duration_seconds": None}
    assert body["pending"] == [{"index": 1, "name": "total", "kind": "step"}], "the map is not pending too"
    assert fn.api("POST", "/executions/m2/cancel")[0] == 200
    cancelled = fn.api("GET", "/executions/m2/history")[1]["steps"][0]
    assert cancelled["status"] == "CANCELLED" and cancelled["finished_at"] is not None
    assert [i["status"] for i in cancelled["items"]][:3] == ["COMPLETED", "COMPLETED", "PENDING"]


def test_a_parallels_items_are_named_after_its_branches(fn: Functions) -> None:
    payload = {"workflow": "order_parallel", "input": {"sku": "k", "amount": 5, "courier": "c"}, "execution_id": "p1"}
    assert fn.api("POST", "/executions", payload)[0] == 201
    fn.drain()
    reserve = fn.api("GET", "/executions/p1/history")[1]["steps"][0]
    assert (reserve["kind"], reserve["status"], reserve["n"], reserve["ok"]) == ("parallel", "COMPLETED", 2, 2)
    assert [(i["index"], i["name"], i["status"]) for i in reserve["items"]] == [
        (0, "reserve_stock", "COMPLETED"),
        (1, "authorize_card", "COMPLETED"),
    ]
    page = fn.api("GET", "/executions/p1/history?step=0&items_from=1")[1]
    assert [(i["index"], i["name"]) for i in page["items"]] == [(1, "authorize_card")]


def test_items_page_in_index_order_past_the_first_fifty(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    fn = Functions(fn.refs, monkeypatch, LOOM_CHAIN="false")
    wiring.reset()
    start_lines(fn, "m3", [line(i) for i in range(53)])
    assert deliver(fn, 4) == 4  # the open, then items 0, 1 and 2
    prices = fn.api("GET", "/executions/m3/history")[1]["steps"][0]
    assert [i["index"] for i in prices["items"]] == list(range(50)) and prices["items_next"] == 50
    status, page = fn.api("GET", "/executions/m3/history?step=0&items_from=50")
    assert status == 200 and page["step"] == 0 and page["n"] == 53 and page["ok"] == 3
    assert [i["index"] for i in page["items"]] == [50, 51, 52] and page["items_next"] is None
    status, page = fn.api("GET", "/executions/m3/history?step=0&items_from=1&items_limit=2")
    assert [(i["index"], i["status"]) for i in page["items"]] == [(1, "COMPLETED"), (2, "COMPLETED")]
    assert page["items_next"] == 3
    assert fn.api("GET", "/executions/m3/history?step=0&items_from=60")[1]["items"] == []


def test_a_one_item_page_of_a_two_shard_map_shows_the_item_as_it_is(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn = Functions(fn.refs, monkeypatch, LOOM_CHAIN="false")
    wiring.reset()
    start_lines(fn, "m5", [line(i) for i in range(201)])  # 201 items: 2 shards, item 1 in shard 1
    assert deliver(fn, 3) == 3  # the open, then items 0 and 1
    page = fn.api("GET", "/executions/m5/history?step=0&items_from=1&items_limit=1")[1]
    assert [(i["index"], i["status"]) for i in page["items"]] == [(1, "COMPLETED")]


def test_bad_item_page_requests_are_clear_errors(fn: Functions) -> None:
    start_lines(fn, "m4", [line(0)])
    fn.drain()
    for target, words in [
        ("/executions/m4/history?step=1", "step 1 of execution m4 is not a fan-out step that has started"),
        ("/executions/m4/history?step=x", "step must be an integer"),
        ("/executions/m4/history?step=0&items_limit=0", "items_limit must be between 1 and 500"),
        ("/executions/m4/history?items_from=3", "name it with step=N"),
    ]:
        status, body = fn.api("GET", target)
        assert status == 400 and words in body["error"]["message"], (target, body)
    assert fn.api("GET", "/executions/nope/history?step=0")[0] == 404
    done = fn.api("GET", "/executions/m4/history")[1]["steps"]
    assert done[0]["items"][0]["status"] == "COMPLETED" and done[1]["kind"] == "step" and "items" not in done[1]
