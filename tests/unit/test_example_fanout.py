"""The fan-out examples, tested the way users test theirs: loom.testing on the in-memory store."""

from __future__ import annotations

import pytest

import workflows.fanout  # noqa: F401  (registers the examples)
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

pytestmark = pytest.mark.unit

LINES = [{"sku": f"S{i}", "qty": i + 1, "unit_price": 2.5} for i in range(12)]


def test_a_parallel_order_ships_with_both_branches_merged(test: WorkflowTest) -> None:
    eid = test.start("order_parallel", {"sku": "S-1", "amount": 30, "courier": "ups"})
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPLETED"
    assert ex.context["authorized"] == 30 and ex.context["reservation"].startswith("res-")
    assert ex.context["reservation_key"] == f"{eid}:0:0" and ex.context["authorization_key"] == f"{eid}:0:1"


def test_a_parallel_order_that_cannot_ship_undoes_both_branches_last_first(
    test: WorkflowTest, ledger: MemoryLedger
) -> None:
    eid = test.start("order_parallel", {"sku": "S-1", "amount": 30})
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPENSATED"
    assert test.compensations(eid) == ["reserve[1]", "reserve[0]"], "void the authorization, then release"
    effects = ledger.effects(eid)
    assert effects[f"{eid}:0:1:compensate"]["kind"] == "void"
    assert effects[f"{eid}:0:0:compensate"]["kind"] == "release"


def test_a_map_prices_every_line_once_in_line_order(test: WorkflowTest, ledger: MemoryLedger) -> None:
    test.duplicate_next_deliveries(5)
    eid = test.start("price_lines", {"lines": LINES})
    ex = test.run(eid)
    assert ex is not None and ex.status.value == "COMPLETED"
    assert [r["sku"] for r in ex.context["prices"]] == [line["sku"] for line in LINES]
    assert ex.context["total"] == sum((i + 1) * 2.5 for i in range(12)) and ex.context["priced_lines"] == 12
    priced = [k for k, e in ledger.effects(eid).items() if e["kind"] == "price"]
    assert sorted(priced) == sorted(f"{eid}:0:{i}" for i in range(12)) and ledger.duplicates == 0
