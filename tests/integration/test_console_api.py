"""What the console added to the control plane: POST /executions/{id}/redrive and the richer
GET /workflows (retry policies and wait settings). The FAILED -> redriven path runs on a real
stack in tests/e2e/test_console_browser.py::test_redrive_a_failed_execution."""

from __future__ import annotations

import pytest

from tests.integration.api_support import Functions
from tests.integration.test_api import assert_error, start

pytestmark = pytest.mark.integration


def test_redrive_refuses_what_is_not_a_failed_execution_and_writes_nothing(fn: Functions) -> None:
    start(fn, execution_id="r1")
    before = fn.counts()
    message = assert_error(fn.api("POST", "/executions/r1/redrive"), 409, "not_failed")
    assert "RUNNING" in message and "not FAILED" in message
    assert fn.counts() == before
    assert_error(fn.api("POST", "/executions/nobody/redrive"), 404, "execution_not_found")
    assert_error(fn.api("POST", "/executions/r1/redrive", {"x": 1}), 400, "invalid_input")
    assert_error(fn.api("GET", "/executions/r1/redrive"), 405, "method_not_allowed")


def test_workflows_report_retry_policies_and_wait_settings(fn: Functions) -> None:
    body = fn.api("GET", "/workflows")[1]
    by_name = {w["name"]: w for w in body["workflows"]}
    poison = by_name["poison_pill"]
    assert poison["retry"] == {
        "max_attempts": 3,
        "base": 0.5,
        "rate": 2.0,
        "max_delay": 1,
        "jitter": "none",
        "custom": False,
    }
    assert all(s["retry"] == poison["retry"] for s in poison["steps"])  # steps without their own policy
    approval = {s["name"]: s for s in by_name["order_approval"]["steps"]}["signal_approval"]
    assert (approval["kind"], approval["signal"], approval["wait_timeout"]) == ("signal", "approval", 3 * 86400)
    webhook = {s["kind"]: s for s in by_name["payment_webhook"]["steps"]}
    assert webhook["callback"]["wait_timeout"] == 3600 and webhook["callback"]["heartbeat_timeout"] is None
    assert webhook["poll"]["every"] == 300
    child = next(s for s in by_name["order_with_children"]["steps"] if s["kind"] == "child")
    assert child["workflow"] in by_name
    saga = [s for s in by_name["order_saga"]["steps"] if s.get("compensate")]
    assert saga and all("compensate_retry" in s for s in saga)


def test_workflows_report_fanout_steps_with_their_branches(fn: Functions) -> None:
    by_name = {w["name"]: w for w in fn.api("GET", "/workflows")[1]["workflows"]}
    reserve = by_name["order_parallel"]["steps"][0]
    assert (reserve["kind"], reserve["max_concurrency"], reserve["completion"]["all"]) == ("parallel", 2, True)
    assert [(b["name"], b["compensate"]) for b in reserve["branches"]] == [
        ("reserve_stock", "release_stock"),
        ("authorize_card", "void_authorization"),
    ]
    assert reserve["compensate"] == "each committed item's own compensation"
    prices = by_name["price_lines"]["steps"][0]
    assert (prices["kind"], prices["items"], prices["max_concurrency"]) == ("map", "order_lines", 5)
    assert [b["name"] for b in prices["branches"]] == ["price_line"] and "compensate" not in prices
