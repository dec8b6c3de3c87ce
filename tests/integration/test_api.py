"""The control plane's HTTP API, row by row, through functions.api.handler with Function URL
v2.0 events against moto in-process. Rejected requests must write nothing."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

import pytest

from engine.limits import DYNAMODB_ITEM_LIMIT
from functions import wiring
from tests.integration.api_support import Functions, url_event

pytestmark = pytest.mark.integration


def start(fn: Functions, workflow: str = "pipeline", input: Any = None, execution_id: str | None = None) -> Any:
    body: dict[str, Any] = {"workflow": workflow, "input": input if input is not None else {"n": 1}}
    if execution_id is not None:
        body["execution_id"] = execution_id
    return fn.api("POST", "/executions", body)


def assert_error(answer: tuple[int, Any], status: int, code: str) -> str:
    got_status, body = answer
    assert (got_status, body["error"]["code"]) == (status, code), body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    return body["error"]["message"]


# ------------------------------------------------------------------ POST /executions


def test_start_201_then_200_for_same_id_and_input_then_409_for_other_input(fn: Functions) -> None:
    status, body = start(fn, input={"order": 7}, execution_id="order-7")
    assert status == 201
    assert body["id"] == "order-7" and body["workflow"] == "pipeline" and body["status"] == "RUNNING"
    assert body["input"] == {"order": 7} and body["output"] == {"order": 7}
    after_first = fn.counts()
    assert after_first["StepQueue"] == 1  # the first step's message

    status, again = start(fn, input={"order": 7}, execution_id="order-7")
    assert status == 200
    assert again["version"] == body["version"] and again["created_at"] == body["created_at"]
    assert fn.counts() == after_first  # idempotent: no second message, no second item

    message = assert_error(start(fn, input={"order": 8}, execution_id="order-7"), 409, "execution_exists")
    assert "order-7" in message
    assert fn.counts() == after_first
    assert fn.api("GET", "/executions/order-7")[1]["input"] == {"order": 7}


def test_start_without_id_generates_one_and_defaults_input(fn: Functions) -> None:
    status, body = fn.api("POST", "/executions", {"workflow": "pipeline"})
    assert status == 201
    assert body["input"] == {} and len(body["id"]) >= 16


def test_start_accepts_a_base64_body(fn: Functions) -> None:
    event = url_event("POST", "/executions", {"workflow": "pipeline", "input": {"b": 64}, "execution_id": "b64"})
    event["body"] = base64.b64encode(event["body"].encode()).decode()
    event["isBase64Encoded"] = True
    from functions import api

    fn.use("ControlPlaneFunction")
    answer = api.handler(event, None)
    assert answer["statusCode"] == 201
    assert json.loads(answer["body"])["input"] == {"b": 64}


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'{"workflow": "pipeline", "input": ', "malformed_json"),
        (b"", "malformed_json"),
        (b"\xff\xfe not utf-8", "malformed_json"),
        (b'["pipeline"]', "invalid_input"),
        (b'{"workflow": "pipeline", "inptu": {}}', "invalid_input"),
        (b'{"input": {}}', "invalid_input"),
        (b'{"workflow": "no_such_workflow", "input": {}}', "unknown_workflow"),
        (b'{"workflow": "pipeline", "input": [1, 2]}', "invalid_input"),
        (b'{"workflow": "pipeline", "input": {}, "execution_id": "bad id!"}', "invalid_execution_id"),
        (b'{"workflow": "pipeline", "input": {}, "execution_id": ""}', "invalid_execution_id"),
        (b'{"workflow": "pipeline", "input": {}, "execution_id": 42}', "invalid_execution_id"),
        ('{"workflow": "pipeline", "execution_id": "' + "x" * 129 + '"}', "invalid_execution_id"),
        # Nested past the parser's stack: the client's fault (400), not the function's (500).
        (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),
        (b'{"workflow": "pipeline", "input": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001, "malformed_json"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_start_rejects_bad_requests_with_400_and_writes_nothing(fn: Functions, raw: bytes | str, code: str) -> None:
    before = fn.counts()
    data = raw.encode() if isinstance(raw, str) else raw
    assert_error(fn.api("POST", "/executions", raw=data), 400, code)
    assert fn.counts() == before == {"items": 0, "StepQueue": 0, "DeadLetterQueue": 0}


def test_start_rejects_an_input_over_the_item_limit_with_413(fn: Functions) -> None:
    before = fn.counts()
    big = {"blob": "x" * (DYNAMODB_ITEM_LIMIT // 2)}  # stored twice: as input and as context
    message = assert_error(start(fn, input=big, execution_id="too-big"), 413, "payload_too_large")
    assert "400 KB" in message
    assert fn.counts() == before
    assert_error(fn.api("GET", "/executions/too-big"), 404, "execution_not_found")


def test_an_id_of_128_characters_is_accepted(fn: Functions) -> None:
    assert start(fn, execution_id="a" * 128)[0] == 201


# ------------------------------------------------------------------ GET /executions/{id}


def test_status_has_every_field_and_consistent_timestamps(fn: Functions) -> None:
    start(fn, input={"n": 1}, execution_id="s1")
    status, body = fn.api("GET", "/executions/s1")
    assert status == 200
    for key in (
        "id",
        "workflow",
        "status",
        "current_step",
        "version",
        "output",
        "error",
        "next_wake_at",
        "created_at",
        "updated_at",
    ):
        assert key in body
    assert body["current_step"] == 0 and body["current_step_name"] == "stage_0"
    for key in ("created_at", "updated_at", "next_wake_at"):
        parsed = datetime.fromisoformat(body[key])
        assert body[key].endswith("Z")
        assert parsed.timestamp() == pytest.approx(body[f"{key}_epoch"], abs=0.001)


def test_status_404_and_400(fn: Functions) -> None:
    assert_error(fn.api("GET", "/executions/nobody"), 404, "execution_not_found")
    assert_error(fn.api("GET", "/executions/bad%20id"), 400, "invalid_execution_id")
    assert_error(fn.api("GET", "/executions/" + "x" * 129), 400, "invalid_execution_id")


def test_a_completed_execution_shows_its_output(fn: Functions) -> None:
    start(fn, input={"n": 1}, execution_id="done")
    fn.drain()
    status, body = fn.api("GET", "/executions/done")
    assert status == 200 and body["status"] == "COMPLETED"
    assert body["next_wake_at"] is None and body["current_step_name"] is None
    assert body["expires_at_epoch"] == pytest.approx(body["updated_at_epoch"] + 30 * 86400)
    assert body["output"]["n"] == 1 and body["output"]["stage_9_key"] == "done:9"


# ------------------------------------------------------------------ GET /executions/{id}/history


def test_history_lists_every_step_in_order(fn: Functions) -> None:
    start(fn, execution_id="h1")
    status, before = fn.api("GET", "/executions/h1/history")
    assert (status, before["id"], before["steps"]) == (200, "h1", [])
    assert [p["name"] for p in before["pending"]] == [f"stage_{i}" for i in range(10)]
    fn.drain()
    status, body = fn.api("GET", "/executions/h1/history")
    assert status == 200
    steps = body["steps"]
    assert [s["index"] for s in steps] == list(range(10))
    assert [s["name"] for s in steps] == [f"stage_{i}" for i in range(10)]
    for s in steps:
        assert s["status"] == "COMPLETED" and s["error"] is None
        assert s["result"] == {f"{s['name']}_key": f"h1:{s['index']}"}
        assert [a["attempt"] for a in s["attempts"]] == [1] and s["attempts"][0]["outcome"] == "completed"
        assert s["started_at_epoch"] <= s["finished_at_epoch"]
    assert [s["started_at_epoch"] for s in steps] == sorted(s["started_at_epoch"] for s in steps)


def test_history_records_failures(fn: Functions) -> None:
    start(fn, "order_fulfillment", {"order_id": "o1", "amount": -5}, "neg")
    fn.drain()
    steps = fn.api("GET", "/executions/neg/history")[1]["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [
        ("reserve_inventory", "COMPLETED"),
        ("charge_payment", "FAILED"),
    ]
    assert steps[1]["error"]["type"] == "NonRetryableError"
    body = fn.api("GET", "/executions/neg")[1]
    assert body["status"] == "FAILED" and body["error"]["step_name"] == "charge_payment"


def test_history_404_and_400(fn: Functions) -> None:
    assert_error(fn.api("GET", "/executions/nobody/history"), 404, "execution_not_found")
    assert_error(fn.api("GET", "/executions/b@d/history"), 400, "invalid_execution_id")


# ------------------------------------------------------------------ GET /executions


def test_list_newest_first_filtered_and_paginated(fn: Functions) -> None:
    from freezegun import freeze_time

    ids = [f"e{i}" for i in range(5)]
    for i, execution_id in enumerate(ids):
        with freeze_time(f"2026-01-01T00:00:0{i}Z"):
            start(fn, "pipeline" if i % 2 == 0 else "payment_retry", {"i": i}, execution_id)
    fn.api("POST", "/executions/e3/cancel")

    status, body = fn.api("GET", "/executions")
    assert status == 200
    assert [e["id"] for e in body["executions"]] == ids[::-1] and body["next_cursor"] is None
    assert "output" not in body["executions"][0]

    seen, cursor = [], None
    for _ in range(5):
        target = "/executions?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = fn.api("GET", target)[1]
        seen += [e["id"] for e in page["executions"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ids[::-1]

    assert [e["id"] for e in fn.api("GET", "/executions?workflow=pipeline")[1]["executions"]] == ["e4", "e2", "e0"]
    assert [e["id"] for e in fn.api("GET", "/executions?status=CANCELLED")[1]["executions"]] == ["e3"]
    both = fn.api("GET", "/executions?status=RUNNING&workflow=payment_retry")[1]["executions"]
    assert [e["id"] for e in both] == ["e1"]


@pytest.mark.parametrize(
    "query",
    ["status=DONE", "limit=0", "limit=1001", "limit=ten", "cursor=%%%", "colour=red"],
)
def test_list_rejects_bad_parameters(fn: Functions, query: str) -> None:
    assert_error(fn.api("GET", f"/executions?{query}"), 400, "invalid_input")


# ------------------------------------------------------------------ POST /executions/{id}/cancel


def test_cancel_200_then_409_and_404(fn: Functions) -> None:
    start(fn, execution_id="c1")
    status, body = fn.api("POST", "/executions/c1/cancel")
    assert status == 200 and body["status"] == "CANCELLED" and body["next_wake_at"] is None
    message = assert_error(fn.api("POST", "/executions/c1/cancel"), 409, "already_terminal")
    assert "CANCELLED" in message
    assert_error(fn.api("POST", "/executions/nobody/cancel"), 404, "execution_not_found")
    assert_error(fn.api("POST", "/executions/no%21/cancel"), 400, "invalid_execution_id")
    # The queued message for step 0 is now stale: the worker acknowledges it and runs nothing.
    fn.drain()
    assert fn.api("GET", "/executions/c1/history")[1]["steps"] == []


def test_cancel_a_completed_execution_is_409(fn: Functions) -> None:
    start(fn, execution_id="c2")
    fn.drain()
    before = fn.counts()
    assert_error(fn.api("POST", "/executions/c2/cancel"), 409, "already_terminal")
    assert fn.counts() == before
    assert fn.api("GET", "/executions/c2")[1]["status"] == "COMPLETED"


# ------------------------------------------------------------------ GET /workflows


def test_workflows_lists_registered_workflows_and_their_steps(fn: Functions) -> None:
    status, body = fn.api("GET", "/workflows")
    assert status == 200
    by_name = {w["name"]: w for w in body["workflows"]}
    assert {"order_fulfillment", "payment_retry", "poison_pill", "pipeline"} <= set(by_name)
    order = by_name["order_fulfillment"]["steps"]
    assert [s["name"] for s in order] == [
        "reserve_inventory",
        "charge_payment",
        "sleep_1h",
        "ship_order",
        "notify_customer",
    ]
    assert order[2] == {"index": 2, "name": "sleep_1h", "kind": "sleep", "seconds": 3600.0}
    assert order[1]["semantics"] == "at_most_once"


# ------------------------------------------------------------------ unknown paths and methods


@pytest.mark.parametrize(
    ("method", "target", "status", "code"),
    [
        ("GET", "/", 404, "not_found"),
        ("GET", "/execution", 404, "not_found"),
        ("GET", "/executions/a/b/c", 404, "not_found"),
        ("DELETE", "/executions", 405, "method_not_allowed"),
        ("PUT", "/executions/e1", 405, "method_not_allowed"),
        ("GET", "/executions/e1/cancel", 405, "method_not_allowed"),
        ("POST", "/executions/e1/history", 405, "method_not_allowed"),
        ("POST", "/workflows", 405, "method_not_allowed"),
        ("DELETE", "/dlq", 405, "method_not_allowed"),
        ("GET", "/dlq/redrive", 405, "method_not_allowed"),
    ],
)
def test_unknown_paths_404_and_wrong_methods_405(
    fn: Functions, method: str, target: str, status: int, code: str
) -> None:
    before = fn.counts()
    assert_error(fn.api(method, target, {"workflow": "pipeline"}), status, code)
    assert fn.counts() == before


def test_405_says_which_methods_are_allowed(fn: Functions) -> None:
    fn.use("ControlPlaneFunction")
    from functions import api

    answer = api.handler(url_event("DELETE", "/executions"), None)
    assert answer["statusCode"] == 405 and answer["headers"]["allow"] == "GET, POST"
    assert answer["headers"]["content-type"] == "application/json"


def test_a_missing_table_is_a_clear_500(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    fn.use("ControlPlaneFunction")
    monkeypatch.setenv("LOOM_TABLE_NAME", "no-such-table")
    from functions import api

    answer = api.handler(url_event("GET", "/executions/x"), None)
    body = json.loads(answer["body"])
    assert answer["statusCode"] == 500 and body["error"]["code"] == "resource_missing"
    assert "no-such-table" in body["error"]["message"]


# ------------------------------------------------------------------ the DLQ


def park(fn: Functions, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    fn.refs["sqs"].send_message(QueueUrl=fn.refs["DeadLetterQueue"], MessageBody=text)


def test_dlq_list_peeks_without_removing(fn: Functions) -> None:
    start(fn, "order_fulfillment", {"order_id": "o1", "amount": -1}, "parked")
    fn.drain()
    park(fn, "not json at all")

    status, body = fn.api("GET", "/dlq")
    assert status == 200 and body["approximate_count"] == 2
    by_kind = {m["kind"]: m for m in body["messages"]}
    assert set(by_kind) == {"failed", "unknown"}
    failed = by_kind["failed"]
    assert failed["execution_id"] == "parked" and failed["body"]["loom"] == "failed"
    assert failed["body"]["error"]["type"] == "NonRetryableError"
    assert failed["sent_at"].endswith("Z") and failed["sent_at_epoch"] > 0
    assert by_kind["unknown"]["body"] == "not json at all" and by_kind["unknown"]["execution_id"] is None

    # Still there, and visible again at once: a second peek sees the same messages.
    again = fn.api("GET", "/dlq")[1]
    assert {m["message_id"] for m in again["messages"]} == {m["message_id"] for m in body["messages"]}
    assert fn.counts()["DeadLetterQueue"] == 2
    assert_error(fn.api("GET", "/dlq?limit=0"), 400, "invalid_input")


def test_dlq_redrive_acts_on_each_message_by_the_executions_state(fn: Functions) -> None:
    # FAILED: a Loom "failed" record from a real failure.
    start(fn, "order_fulfillment", {"order_id": "o1", "amount": -1}, "failed-one")
    fn.drain()
    assert fn.api("GET", "/executions/failed-one")[1]["status"] == "FAILED"
    # RUNNING: a raw step message SQS parked after maxReceiveCount.
    start(fn, execution_id="running-one")
    fn.discard()  # take its message off the step queue: as if SQS moved it to the DLQ
    park(fn, {"v": 1, "execution_id": "running-one", "step": 0, "attempt": 1, "kind": "step"})
    # COMPLETED, CANCELLED, unknown execution and garbage.
    start(fn, execution_id="done-one")
    fn.drain()
    park(fn, {"v": 1, "execution_id": "done-one", "step": 3, "attempt": 1, "kind": "step"})
    start(fn, execution_id="cancelled-one")
    fn.api("POST", "/executions/cancelled-one/cancel")
    fn.discard()
    park(fn, {"loom": "failed", "execution_id": "cancelled-one", "workflow": "pipeline", "error": {}})
    park(fn, {"v": 1, "execution_id": "ghost", "step": 0})
    park(fn, "garbage")

    status, body = fn.api("POST", "/dlq/redrive")
    assert status == 200
    by_id = {r["execution_id"]: r for r in body["results"]}
    assert by_id["failed-one"]["action"] == "redriven" and by_id["failed-one"]["status"] == "RUNNING"
    assert by_id["running-one"]["action"] == "resent"
    assert by_id["done-one"]["action"] == "dropped" and "COMPLETED" in by_id["done-one"]["reason"]
    assert by_id["cancelled-one"]["action"] == "dropped" and "CANCELLED" in by_id["cancelled-one"]["reason"]
    assert by_id["ghost"]["action"] == "dropped" and by_id["ghost"]["reason"] == "no such execution"
    assert by_id[None]["action"] == "kept" and by_id[None]["kind"] == "unknown"
    assert body["summary"] == {"redriven": 1, "resent": 1, "dropped": 3, "kept": 1}

    # Only the message that could not be dealt with is left, and it is visible again.
    left = fn.api("GET", "/dlq")[1]["messages"]
    assert [m["body"] for m in left] == ["garbage"]

    # The redriven and the resent executions now run to their ends.
    sent = sorted(json.loads(m["Body"])["execution_id"] for m in fn.receive())
    assert sent == ["failed-one", "running-one"]
    assert fn.api("GET", "/executions/failed-one")[1]["attempt"] > 1


def test_dlq_redrive_handles_one_execution_once_per_pass(fn: Functions) -> None:
    start(fn, "order_fulfillment", {"order_id": "o1", "amount": -1}, "twice")
    fn.drain()
    park(fn, {"loom": "failed", "execution_id": "twice", "workflow": "order_fulfillment", "error": {}})
    results = fn.api("POST", "/dlq/redrive")[1]["results"]
    assert sorted(r["action"] for r in results) == ["dropped", "redriven"]
    assert len(fn.receive()) == 1
    assert fn.counts()["DeadLetterQueue"] == 0


def test_redriving_a_failed_child_whose_parent_failed_is_409_naming_the_parent(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    wiring.reset()
    fn = Functions(aws, monkeypatch, LOOM_WORKFLOW_MODULES="workflows,tests.integration.child_redrive_workflows")
    start(fn, "redrive_family", {}, "fam")
    fn.drain()
    assert fn.api("GET", "/executions/fam")[1]["status"] == "FAILED"
    assert fn.api("GET", "/executions/fam--0-1")[1]["status"] == "FAILED"
    message = assert_error(fn.api("POST", "/executions/fam--0-1/redrive"), 409, "parent_decides")
    assert "'fam'" in message and "re-drive 'fam' instead" in message
    assert fn.api("GET", "/executions/fam--0-1")[1]["status"] == "FAILED", "nothing written"
    assert fn.receive() == [], "nothing sent"
    assert fn.api("POST", "/executions/fam/redrive")[0] == 200
    wiring.reset()
