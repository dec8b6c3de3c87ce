"""The map mode of scripts/bench.py on a tiny map: every request counted, the per-item budget met.

Counts, never timings: a map of 12 items at max_concurrency 4 completes with its results in
order, each item's final write is one transaction, and the engine stays within 5 write units
and 1 SQS send per item.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.bench import fanout
from loom.bench.inprocess import BenchStack

pytestmark = [pytest.mark.integration, pytest.mark.server]

ITEMS, WINDOW = 12, 4


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    state = Path(tmp_path_factory.mktemp("bench_map"))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.setenv(name, "testing")
        with BenchStack(workers=1, state_dir=state, batching_window=0.0) as stack:
            return fanout.run_map(stack, items=ITEMS, concurrency=WINDOW, tick=3600, timeout=120)


def test_the_map_completes_in_item_order_with_one_transaction_per_item(measured):
    assert measured["completed"] and measured["results_in_order"]
    ops = {(r["role"], r["service"], r["operation"]): r["count"] for r in measured["requests"]}
    assert ops[("worker", "dynamodb", "TransactWriteItems")] == ITEMS, "item commit + join count: one request"
    assert ops[("worker", "sqs", "SendMessageBatch")] == 1, "the first window goes out in one batch"
    assert ops[("worker", "sqs", "SendMessage")] == ITEMS - WINDOW, "each completion starts exactly one item"


def test_an_item_costs_at_most_5_write_units_and_1_sqs_send(measured):
    per_item = measured["per_item"]
    assert 4 <= per_item["wcu_per_item"] <= 5, "a transaction of two items under 1 KB is billed 4 WCU"
    assert per_item["sqs_sends_per_item"] <= 1
    assert all(c["met"] for c in measured["checks"]), measured["checks"]
    assert "map of 12 items" in fanout.render_map(measured)
