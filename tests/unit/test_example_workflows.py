"""The example workflows, tested the way users test theirs: loom.testing, no emulator."""

from __future__ import annotations

import pytest

import workflows.examples  # noqa: F401  (registers the examples)
from engine.ports import FaultPoint
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

pytestmark = pytest.mark.unit


def test_order_fulfillment_sleeps_an_hour_in_virtual_time(test: WorkflowTest, ledger: MemoryLedger) -> None:
    eid = test.start("order_fulfillment", {"order_id": "A-1", "amount": 42})
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPLETED"
    assert ex.context["charged"] == 42 and ex.context["tracking"].startswith("trk-")
    kinds = sorted(e["kind"] for e in ledger.effects(eid).values())
    assert kinds == ["charge", "notification", "reservation", "shipment"]


def test_a_negative_amount_fails_without_retrying(test: WorkflowTest) -> None:
    eid = test.start("order_fulfillment", {"order_id": "A-2", "amount": -1})
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "FAILED" and ex.error["type"] == "NonRetryableError"
    assert test.steps(eid)[1] == ("charge_payment", "FAILED", ["failed"])


def test_payment_retry_succeeds_on_the_third_attempt(test: WorkflowTest) -> None:
    eid = test.start("payment_retry", {"amount": 5})
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
    assert test.steps(eid)[1] == ("flaky_charge", "COMPLETED", ["failed", "failed", "completed"])


def test_poison_pill_ends_failed_and_parked(test: WorkflowTest) -> None:
    eid = test.start("poison_pill")
    assert test.run(eid).status.value == "FAILED"  # type: ignore[union-attr]
    assert len(test.dead_letters) == 1 and test.steps(eid)[1][2] == ["failed"] * 3


def test_a_worker_killed_after_the_charge_never_charges_twice(test: WorkflowTest, ledger: MemoryLedger) -> None:
    test.crash(FaultPoint.AFTER_STEP, step="charge_payment")
    eid = test.start("order_fulfillment", {"order_id": "A-3", "amount": 7})
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
    assert test.deaths == 1 and ledger.duplicates == 1, "the second attempt ran, its effect landed once"
    assert test.steps(eid)[1][2] == ["worker_lost", "completed"]


def test_the_pipeline_survives_duplicates_with_each_effect_once(test: WorkflowTest, ledger: MemoryLedger) -> None:
    test.duplicate_next_deliveries(3)
    eid = test.start("pipeline")
    assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
    assert len(ledger.effects(eid)) == 10


def test_plain_steps_only_return_and_land_no_effect(test: WorkflowTest, ledger: MemoryLedger) -> None:
    """The local speed bench's unit (loom/bench/local_speed.py): ten steps, nothing but their results."""
    eid = test.start("plain_steps")
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPLETED"
    assert ex.context == {f"step_{i}": i for i in range(10)}
    assert [s[1] for s in test.steps(eid)] == ["COMPLETED"] * 10
    assert ledger.effects(eid) == {}
