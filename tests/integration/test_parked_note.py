"""The sweepers' note of the dead-letter queue's count, on both stores: the DynamoDB adapter
(moto) and loom.testing's in-memory store remember the same instant of the same change."""

from __future__ import annotations

from typing import Any

import pytest

from engine.adapters.dynamodb import PARKED_KEY, DynamoStore
from loom.testing.memory import InMemoryStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest, aws: dict[str, Any]) -> Any:
    if request.param == "memory":
        return InMemoryStore()
    return DynamoStore(aws["dynamodb"], aws["Table"], 4)


def test_the_note_keeps_when_the_count_last_changed(store) -> None:
    assert store.note_parked(0, 100.0) == 100.0, "the first sweep to look starts the note"
    assert store.note_parked(0, 160.0) == 100.0
    assert store.note_parked(3, 220.0) == 220.0, "a parking"
    assert store.note_parked(3, 280.0) == 220.0, "the same three, seen again"
    assert store.note_parked(2, 340.0) == 340.0, "one redriven by hand: also a change"
    assert store.note_parked(0, 400.0) == 400.0
    assert store.note_parked(2, 460.0) == 460.0, "emptied, then two new ones: not the old two"


def test_a_sweep_that_lost_the_race_to_note_a_change_answers_its_own_time(aws) -> None:
    store = DynamoStore(aws["dynamodb"], aws["Table"], 4)
    store.note_parked(1, 100.0)
    real_get = aws["dynamodb"].get_item

    def stale_get(**kwargs: Any) -> Any:
        answer = real_get(**kwargs)
        if kwargs["Key"] == PARKED_KEY:  # another sweep writes between this read and the put
            aws["dynamodb"].put_item(
                TableName=aws["Table"], Item={**PARKED_KEY, "count": {"N": "5"}, "changed_at": {"N": "150"}}
            )
        return answer

    store._db = type("Racing", (), {"get_item": staticmethod(stale_get), "put_item": aws["dynamodb"].put_item})()
    assert store.note_parked(4, 160.0) == 160.0, "its condition failed; its own instant is as late as the winner's"
    stored = real_get(TableName=aws["Table"], Key=PARKED_KEY)["Item"]
    assert (stored["count"]["N"], stored["changed_at"]["N"]) == ("5", "150"), "the winner's note stands"
