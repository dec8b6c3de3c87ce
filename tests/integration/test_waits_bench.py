"""The waits' cost figures (loom/bench/waits.py), measured on moto: the issue's budget holds."""

from __future__ import annotations

import pytest

from loom.bench.waits import render, wait_costs

pytestmark = pytest.mark.integration


def test_a_callback_and_a_signal_stay_in_budget_and_waiting_costs_nothing() -> None:
    result = wait_costs()
    rows = {r["wait"]: r for r in result["rows"]}
    assert rows["callback"]["extra_writes"] == 2  # mark + park
    assert rows["signal, sent while waiting"]["extra_writes"] == 3  # signal item + park + consume
    assert rows["signal, sent before the wait"]["extra_writes"] == 2  # signal item + consume
    for name in ("callback", "signal, sent while waiting", "signal, sent before the wait"):
        assert rows[name]["extra_sqs_sends"] == 0 and rows[name]["extra_deliveries"] == 0
    assert rows["poll, 3 not-yets"]["extra_writes"] == 3 and rows["poll, 3 not-yets"]["extra_sqs_sends"] == 3
    assert result["while_waiting"] == {"writes": 0, "reads": 0, "sqs_sends": 0, "deliveries": 0}
    assert all(c["met"] for c in result["checks"]) and len(result["checks"]) == 4
    approval = result["approval"]
    assert approval["binding"] == "sqs_requests" and approval["executions_per_month"]["sqs_requests"] > 40_000
    assert "long human approval" in render(result)
