"""The control plane's reading aids (issue #13, /work api contract): ``state`` on an execution;
``kind``, ``duration_seconds``, ``pending``, ``state`` and ``events`` on its history."""

from __future__ import annotations

import pytest
from freezegun import freeze_time

from tests.integration.api_support import Functions

pytestmark = pytest.mark.integration


def test_a_sleeping_execution_says_until_when_and_what_is_left(fn: Functions) -> None:
    with freeze_time("2026-12-01T22:52:00Z"):
        fn.api(
            "POST", "/executions", {"workflow": "order_fulfillment", "input": {"order_id": "o1"}, "execution_id": "s1"}
        )
        fn.drain()
        status, body = fn.api("GET", "/executions/s1")
        assert status == 200 and body["status"] == "SLEEPING"
        assert body["state"] == {
            "kind": "sleeping",
            "reason": "sleeping until 2026-12-01 23:52:00Z",
            "step": 2,
            "until": "2026-12-01T23:52:00.000Z",
            "until_epoch": body["next_wake_at_epoch"],
        }
        history = fn.api("GET", "/executions/s1/history")[1]
    assert history["state"] == body["state"]
    assert history["read_at"] == body["read_at"] == "2026-12-01T22:52:00.000Z"
    assert [(s["name"], s["kind"]) for s in history["steps"]] == [
        ("reserve_inventory", "step"),
        ("charge_payment", "step"),
    ]
    assert all(s["duration_seconds"] == 0.0 for s in history["steps"])  # frozen clock: no time passed
    assert all(a["duration_seconds"] == 0.0 for s in history["steps"] for a in s["attempts"])
    assert history["pending"] == [
        {"index": 2, "name": "sleep_1h", "kind": "sleep"},
        {"index": 3, "name": "ship_order", "kind": "step"},
        {"index": 4, "name": "notify_customer", "kind": "step"},
    ]
    assert [e["kind"] for e in history["events"]] == ["started"]
    assert history["events"][0]["at"] == "2026-12-01T22:52:00.000Z"


def test_a_cancelled_execution_has_its_cancel_entry(fn: Functions) -> None:
    with freeze_time("2026-12-01T10:00:00Z"):
        fn.api("POST", "/executions", {"workflow": "pipeline", "execution_id": "c1"})
    with freeze_time("2026-12-01T10:00:07Z"):
        fn.api("POST", "/executions/c1/cancel")
    body = fn.api("GET", "/executions/c1/history")[1]
    assert body["events"] == [
        {"kind": "started", "at": "2026-12-01T10:00:00.000Z", "at_epoch": 1796119200.0},
        {"kind": "cancelled", "at": "2026-12-01T10:00:07.000Z", "at_epoch": 1796119207.0, "compensate": False},
    ]
    assert body["state"]["kind"] == "cancelled" and body["state"]["reason"] == "cancelled at step stage_0"
    assert body["pending"] == [], "nothing is pending once terminal"


def test_a_cancel_with_compensate_is_dated(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    from functions import wiring
    from tests.integration.api_support import sqs_event

    fn = Functions(fn.refs, monkeypatch, LOOM_CHAIN="false")  # one step per message: stop after reserve
    wiring.reset()
    with freeze_time("2026-12-01T10:00:00Z"):
        fn.api("POST", "/executions", {"workflow": "order_saga", "input": {"courier": "x"}, "execution_id": "k1"})
        first = fn.receive()
        fn.worker(sqs_event(first, fn.refs["StepQueue.Arn"]))  # reserve commits; charge is queued
        for m in first:
            fn.refs["sqs"].delete_message(QueueUrl=fn.refs["StepQueue"], ReceiptHandle=m["ReceiptHandle"])
    with freeze_time("2026-12-01T10:00:05Z"):
        status, answer = fn.api("POST", "/executions/k1/cancel", {"compensate": True})
        assert status == 200 and answer["status"] == "COMPENSATING"
        assert fn.api("GET", "/executions/k1")[1]["state"]["kind"] == "compensating"
        fn.drain()
    body = fn.api("GET", "/executions/k1/history")[1]
    assert [(e["kind"], e["at"]) for e in body["events"]] == [
        ("started", "2026-12-01T10:00:00.000Z"),
        ("cancelled", "2026-12-01T10:00:05.000Z"),
        ("compensated", "2026-12-01T10:00:05.000Z"),
    ]
    assert body["events"][1]["compensate"] is True
    assert body["state"]["kind"] == "compensated"
    assert "compensation" in {s["phase"] for s in body["steps"]}


def test_a_failure_reads_in_one_line(fn: Functions) -> None:
    fn.api(
        "POST",
        "/executions",
        {"workflow": "order_fulfillment", "input": {"order_id": "o1", "amount": -5}, "execution_id": "f1"},
    )
    fn.drain()
    body = fn.api("GET", "/executions/f1")[1]
    assert body["state"]["kind"] == "failed" and body["state"]["until"] is None
    assert body["state"]["reason"].startswith("failed at step charge_payment: NonRetryableError: ")
    events = fn.api("GET", "/executions/f1/history")[1]["events"]
    assert events[-1]["kind"] == "failed" and events[-1]["error"].startswith("NonRetryableError: ")
