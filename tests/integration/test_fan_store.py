"""The fan-out records on both stores: the DynamoDB adapter (moto) and loom.testing's in-memory
store refuse and count exactly the same things."""

from __future__ import annotations

from typing import Any

import pytest

from engine.adapters.dynamodb import DynamoStore
from engine.errors import ConflictError
from engine.join import JoinRecord
from engine.state import Attempt, AttemptOutcome, StepStatus
from loom.testing.memory import InMemoryStore

pytestmark = pytest.mark.integration

SHARDS = 3


def attempt(n: int, outcome: AttemptOutcome = AttemptOutcome.COMPLETED) -> Attempt:
    return Attempt(n, float(n), float(n) + 0.5, outcome, None if outcome is AttemptOutcome.COMPLETED else {"type": "E"})


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest, aws: dict[str, Any]) -> Any:
    if request.param == "memory":
        return InMemoryStore()
    return DynamoStore(aws["dynamodb"], aws["Table"], 4)


def test_open_is_idempotent_and_items_count_once(store):
    first = store.open_join(JoinRecord("e1", 2, 7, SHARDS, 3))
    again = store.open_join(JoinRecord("e1", 2, 99, 1, 1))
    assert (first.n, again.n, again.shards, again.window) == (7, 7, SHARDS, 3), "the first open stands"
    store.commit_item("e1", 2, "price", 4, SHARDS, attempt(1), {"p": 40})
    with pytest.raises(ConflictError):
        store.commit_item("e1", 2, "price", 4, SHARDS, attempt(2), {"p": 41})  # COMMIT_ONCE
    assert not store.fail_item("e1", 2, "price", 4, SHARDS, attempt(2, AttemptOutcome.FAILED), final=True)
    assert store.fail_item("e1", 2, "price", 1, SHARDS, attempt(1, AttemptOutcome.FAILED), final=False)
    assert not store.fail_item("e1", 2, "price", 1, SHARDS, attempt(1, AttemptOutcome.FAILED), final=True)
    assert store.fail_item("e1", 2, "price", 1, SHARDS, attempt(2, AttemptOutcome.FAILED), final=True)
    join = store.get_join("e1", 2)
    assert (join.ok, join.failed, join.decided) == (1, 1, None), "a retryable failure is not counted"
    records = store.fan_items("e1", 2, SHARDS, 0, 7)
    assert [(r.index, r.status) for r in records] == [(1, StepStatus.FAILED), (4, StepStatus.COMPLETED)]
    assert records[1].result == {"p": 40} and store.get_item("e1", 2, 4, SHARDS).result == {"p": 40}
    assert store.fan_items("e1", 2, SHARDS, 2, 2) == [], "a page holds only its own items"


def test_a_decision_is_recorded_once_and_fences_later_items(store):
    store.open_join(JoinRecord("e2", 0, 3, 1, 3))
    assert store.decide_join("e2", 0, "SUCCEEDED") == "SUCCEEDED"
    assert store.decide_join("e2", 0, "FAILED") == "SUCCEEDED", "the first decision stands"
    with pytest.raises(ConflictError):
        store.commit_item("e2", 0, "price", 0, 1, attempt(1), 1)
    assert not store.fail_item("e2", 0, "price", 1, 1, attempt(1, AttemptOutcome.FAILED), final=True)
    join = store.get_join("e2", 0)
    assert (join.ok, join.failed) == (0, 0) and store.get_item("e2", 0, 0, 1) is None


@pytest.mark.parametrize(("n", "start", "count"), [(201, 1, 1), (201, 199, 2), (401, 400, 1), (401, 398, 3)])
def test_a_page_reads_the_shards_it_spans_not_the_first_ones(store, n, start, count):
    # 201 items spread over 2 shards, 401 over 3: a page narrower than the shard count
    # spans shards by index, not shards 0..count-1 (a 1-item page of item 1 is in shard 1).
    shards = -(-n // 200)
    store.open_join(JoinRecord(f"p{n}", 0, n, shards, n))
    for idx in range(start, start + count):
        store.commit_item(f"p{n}", 0, "price", idx, shards, attempt(1), {"i": idx})
    records = store.fan_items(f"p{n}", 0, shards, start, count)
    assert [(r.index, r.result) for r in records] == [(i, {"i": i}) for i in range(start, start + count)]
