"""The waiting examples, tested the way users test theirs: loom.testing, no emulator."""

from __future__ import annotations

import pytest

import workflows  # noqa: F401  (registers the examples)
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

pytestmark = pytest.mark.unit


def test_order_approval_waits_for_the_signal_then_ships(test: WorkflowTest) -> None:
    eid = test.start("order_approval", {"order_id": "A-1"})
    assert test.run(eid).status.value == "WAITING"
    test.signal(eid, "approval", {"approved": True, "approver": "ada"})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["approved_by"] == "ada"


def test_order_approval_rejected_or_unanswered_fails(test: WorkflowTest) -> None:
    rejected = test.start("order_approval", {"order_id": "A-2"})
    test.run(rejected)
    test.signal(rejected, "approval", {"approved": False})
    assert test.run(rejected).error["type"] == "NonRetryableError"
    silent = test.start("order_approval", {"order_id": "A-3"})
    ex = test.run(silent, skip_waits=True)  # three days pass in virtual time
    assert ex.status.value == "FAILED" and ex.error["type"] == "SignalTimeout"


def test_payment_webhook_completes_from_the_providers_inbox(test: WorkflowTest, ledger: MemoryLedger) -> None:
    eid = test.start("payment_webhook", {"order_id": "P-1", "amount": 12, "settle_after": 3})
    assert test.run(eid).status.value == "WAITING"
    [request] = [e for e in ledger.effects(eid).values() if e["kind"] == "payment_request"]
    test.complete_callback(request["callback_token"], {"paid": 12})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["paid"] == 12 and ex.context["settlement_checks"] == 3


def test_order_with_children_merges_both_childrens_output(test: WorkflowTest) -> None:
    eid = test.start("order_with_children", {"order_id": "C-1"}, execution_id="C-1")
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED"
    assert ex.context["reservation"] == "res-C-1" and ex.context["tracking"].startswith("trk-")
    assert test.status("C-1--0-1") == "COMPLETED" and test.status("C-1--1-1") == "COMPLETED"


def test_report_export_collects_the_chunks_across_checks(test: WorkflowTest) -> None:
    eid = test.start("report_export", {"chunks": 4})
    began = test.clock.now()
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["export"] == ["chunk-1", "chunk-2", "chunk-3", "chunk-4"]
    assert ex.context["attached_chunks"] == 4 and test.deliveries == 4  # one per check (publish is chained)
    assert 0 < test.clock.now() - began < 10 + 20 + 40, "three backoffs, each under its ceiling"


def test_report_export_that_never_finishes_is_caught_after_its_checks(test: WorkflowTest) -> None:
    eid = test.start("report_export", {"chunks": 100})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["export_error"] == "PollExhausted"
    assert ex.context["attached_chunks"] == 0
