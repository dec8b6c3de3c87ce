"""The watcher reads a thousand executions a hundred a request, and the soak waits on what it saw."""

from __future__ import annotations

import threading

import pytest

from chaos.observe import Timeout, Watcher
from engine.adapters.dynamodb import DynamoStore
from engine.state import Execution, Status

pytestmark = pytest.mark.chaos


def execution(eid: str, status: Status = Status.RUNNING, version: int = 1) -> Execution:
    return Execution(eid, "wf", status, 0, version, {}, {}, 0.0, 0.0)


class Batched:
    """A target answering ``get_many``; ``get`` must not be called when ``get_many`` exists."""

    def __init__(self, ids: list[str]) -> None:
        self.state = {eid: execution(eid) for eid in ids}
        self.requests: list[int] = []
        self.lock = threading.Lock()

    def get(self, execution_id: str) -> Execution | None:
        raise AssertionError("polled one by one")

    def get_many(self, execution_ids: list[str]) -> list[Execution]:
        with self.lock:
            self.requests.append(len(execution_ids))
            return [self.state[e] for e in execution_ids if e in self.state]


def test_a_pass_over_250_executions_is_three_requests_and_wait_seen_polls_nothing() -> None:
    ids = [f"e{i}" for i in range(250)]
    target = Batched(ids)
    with Watcher(target, interval=0.01) as w:
        w.add(*ids)
        with pytest.raises(Timeout, match="250 execution"):
            w.wait_seen(ids, timeout=0.3)
        assert target.requests[:3] == [100, 100, 50]
        with target.lock:
            target.state = {e: execution(e, Status.COMPLETED, 2) for e in ids}
        done = w.wait_seen(ids, timeout=10)
    assert set(done) == set(ids) and all(ex.version == 2 for ex in done.values())
    assert [s.version for s in w.trail("e7")] == [1, 2], "the trail keeps every version seen"


@pytest.mark.integration
def test_the_store_reads_executions_in_batches_of_a_hundred(aws) -> None:
    store = DynamoStore(aws["dynamodb"], aws["Table"], 4)
    for i in range(150):
        store.create_execution(execution(f"x{i}"))
    found = store.get_executions([f"x{i}" for i in range(150)] + ["missing"])
    assert sorted(ex.id for ex in found) == sorted(f"x{i}" for i in range(150))


class SlowFirstRead:
    """The first ``get`` reads the item, then stalls until told to answer: a read that began
    earlier answers after a later one, as two pollers on one emulator can."""

    def __init__(self) -> None:
        self.item = execution("e", version=1)
        self.first_read_taken = threading.Event()
        self.answer_first = threading.Event()
        self.calls = 0

    def get(self, execution_id: str) -> Execution | None:
        self.calls += 1
        seen = self.item
        if self.calls == 1:
            self.first_read_taken.set()
            assert self.answer_first.wait(10)
        return seen


def test_a_read_overtaken_by_a_later_one_is_not_recorded_as_newer() -> None:
    target = SlowFirstRead()
    w = Watcher(target)  # not started: the two readers are this test's threads
    w.add("e")
    slow = threading.Thread(target=w.poll, args=("e",))
    slow.start()
    assert target.first_read_taken.wait(10)
    target.item = execution("e", Status.RUNNING, version=2)
    w.poll("e")  # begins after the stalled read and answers first
    target.answer_first.set()
    slow.join(10)
    assert [s.version for s in w.trail("e")] == [2], "the stalled read of version 1 came back after version 2"
    latest = w.latest("e")
    assert latest is not None and latest.version == 2
