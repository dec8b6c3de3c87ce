"""Standard-queue delivery, pure: shuffled batches, held-back and repeated messages, from a seed."""

from __future__ import annotations

from typing import Any

import pytest

from loom.local.lambdas.standard_queue import DUPLICATE_RECEIPT_PREFIX, StandardQueueChaos, is_duplicate

pytestmark = pytest.mark.unit


def messages(start: int, n: int) -> list[dict[str, Any]]:
    return [{"MessageId": f"m{i}", "ReceiptHandle": f"rh{i}", "Body": f"b{i}"} for i in range(start, start + n)]


def run(chaos: StandardQueueChaos, total: int = 100, size: int = 10) -> list[list[dict[str, Any]]]:
    """What the event source does: receive as much as the batch has room for, then arrange."""
    queue = messages(0, total)
    out = []
    while queue or chaos.pending():
        room = max(0, size - chaos.pending())
        received, queue = queue[:room], queue[room:]
        out.append(chaos.arrange(received, size))
    return out


def test_rate_zero_is_the_emulators_strict_order() -> None:
    chaos = StandardQueueChaos()
    delivered = [m["MessageId"] for batch in run(chaos) for m in batch]
    assert delivered == [f"m{i}" for i in range(100)]
    assert chaos.counts().duplicated == chaos.counts().reordered == chaos.counts().held == 0


def test_reorders_holds_back_and_duplicates_yet_delivers_everything() -> None:
    chaos = StandardQueueChaos(0.2, seed=7)
    batches = run(chaos)
    delivered = [m for batch in batches for m in batch]
    originals = [m["MessageId"] for m in delivered if not is_duplicate(m)]
    copies = [m for m in delivered if is_duplicate(m)]
    assert sorted(originals, key=lambda x: int(x[1:])) == [f"m{i}" for i in range(100)]  # each once
    assert originals != sorted(originals, key=lambda x: int(x[1:]))  # ...but out of order
    counts = chaos.counts()
    assert counts.reordered > 0 and counts.held > 0 and counts.duplicated == len(copies) > 0
    assert all(len(batch) <= 10 for batch in batches)
    assert len(batches) < 20  # held and repeated messages take room; they do not pile up
    by_id = {m["MessageId"]: m for m in delivered if not is_duplicate(m)}
    for copy in copies:
        # The same message again (id, body), with a receipt handle of its own.
        original = by_id[copy["MessageId"]]
        assert copy["Body"] == original["Body"]
        assert copy["ReceiptHandle"].startswith(DUPLICATE_RECEIPT_PREFIX)
        assert copy["ReceiptHandle"] != original["ReceiptHandle"]
    # A duplicate comes in a later batch than its original.
    first_batch = {m["MessageId"]: i for i, b in enumerate(batches) for m in reversed(b) if not is_duplicate(m)}
    for i, batch in enumerate(batches):
        for m in batch:
            if is_duplicate(m):
                assert i > first_batch[m["MessageId"]]


def test_the_same_seed_gives_the_same_deliveries() -> None:
    def ids(seed: int) -> list[list[str]]:
        return [[m["MessageId"] for m in b] for b in run(StandardQueueChaos(0.3, seed=seed))]

    assert ids(3) == ids(3)
    assert ids(3) != ids(4)


def test_lowering_the_rate_releases_what_was_held() -> None:
    chaos = StandardQueueChaos(1.0, seed=1)
    assert chaos.arrange(messages(0, 5), 10) == []  # rate 1: every message held back once
    chaos.set_rate(0.0)
    assert [m["MessageId"] for m in chaos.arrange([], 10)] == [f"m{i}" for i in range(5)]
    assert chaos.pending() == 0


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_a_rate_outside_zero_to_one_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        StandardQueueChaos(rate)
