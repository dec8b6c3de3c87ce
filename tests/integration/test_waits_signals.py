"""wait_for_signal on the real table (moto): kept before the wait, one signal per wait,
refused when terminal, races with the timeout and between deliverers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.errors import AlreadyTerminal, ExecutionNotFound, InvalidInput, PayloadTooLarge
from loom.testing import WorkerDied, WorkflowTest
from tests.integration.waits_support import Inbox, Racing, Runs, registry

pytestmark = pytest.mark.integration


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def t(runs: Runs) -> Iterator[WorkflowTest]:
    with WorkflowTest(registry(Inbox(), runs), backend="moto") as test:
        yield test


def consumed(t: WorkflowTest, eid: str, name: str) -> list[tuple[str | None, dict]]:
    """Every signal of ``name`` kept for ``eid``: (consumed_by, payload), oldest first."""
    store = t.store
    out = []
    while True:
        found = store.next_signal(eid, name)
        if found is None:
            break
        out.append(found)
        store.consume_signal(eid, name, found.key, "probe")  # mark to move on; the test is over after this
    return [(s.consumed_by, s.payload) for s in out]


def test_a_signal_to_a_waiting_execution_is_consumed_and_merged(t: WorkflowTest, runs: Runs) -> None:
    t.start("shipping", {}, execution_id="s1")
    assert t.run("s1").status.value == "WAITING"
    sent = t.signal("s1", "shipped", {"tracking": "T1"})
    assert sent.delivered
    ex = t.run("s1")
    assert ex.status.value == "COMPLETED" and ex.context["tracking"] == "T1" and runs.count["after"] == 1
    [record] = [r for r in t.history("s1") if r.name == "signal_shipped"]
    assert record.attempts[0].detail == {"signal": sent.key}
    assert t.store.get_signal("s1", "shipped", sent.key).consumed_by == "1:1"


def test_a_signal_sent_before_the_wait_is_kept_and_consumed_by_it(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'signal before the wait'."""
    t.start("shipping", {}, execution_id="s2")  # not run yet: still at step 0
    sent = t.signal("s2", "shipped", {"tracking": "early"})
    assert not sent.delivered
    ex = t.run("s2")
    assert ex.status.value == "COMPLETED" and ex.context["tracking"] == "early" and runs.count["after"] == 1


def test_two_signals_feed_two_waits_in_order_and_an_extra_one_is_kept(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'a signal sent twice': one wait consumes one; the other is kept for the next wait."""
    t.start("two_signals", {}, execution_id="s3")
    t.signal("s3", "go", {"n": 1})
    t.signal("s3", "go", {"n": 2})
    t.signal("s3", "go", {"n": 3})
    ex = t.run("s3")
    assert ex.status.value == "COMPLETED" and ex.context["n"] == 2 and runs.count["middle"] == 1
    left = t.store.next_signal("s3", "go")
    assert left is not None and left.payload == {"n": 3} and left.consumed_by is None
    history = {r.index: r for r in t.history("s3")}
    assert history[0].result == {"n": 1} and history[2].result == {"n": 2}


def test_a_signal_to_a_terminal_or_missing_execution_is_refused_and_nothing_written(t: WorkflowTest) -> None:
    """Failure table: 'a signal to a terminal execution': 409, nothing kept."""
    t.start("shipping", {}, execution_id="s4")
    t.run("s4")
    t.engine.cancel("s4")
    with pytest.raises(AlreadyTerminal):
        t.signal("s4", "shipped", {"late": True})
    assert t.store.next_signal("s4", "shipped") is None
    with pytest.raises(ExecutionNotFound):
        t.signal("nobody", "shipped", {})
    with pytest.raises(InvalidInput):
        t.signal("s4", "bad name!", {})
    t.start("shipping", {}, execution_id="s5")
    with pytest.raises(PayloadTooLarge):
        t.signal("s5", "shipped", {"blob": "x" * 420_000})
    assert t.store.next_signal("s5", "shipped") is None


def test_a_signal_racing_the_runners_park_is_delivered_once(t: WorkflowTest, runs: Runs) -> None:
    """Both sides write, then check: the signal lands between the runner's first look and its park."""
    t.start("shipping", {}, execution_id="s6")
    racing = Racing(t.engine.store)
    t.engine.store = racing
    calls = {"n": 0}
    original = racing.inner.next_signal

    def look(eid: str, name: str):
        calls["n"] += 1
        found = original(eid, name)
        if calls["n"] == 1:  # the runner's first look: nothing yet; the signal arrives right after
            t.signal("s6", "shipped", {"raced": True})
        return found

    racing.inner.next_signal = look  # type: ignore[method-assign]
    ex = t.run("s6")
    assert ex.status.value == "COMPLETED" and ex.context["raced"] is True and runs.count["after"] == 1


def test_two_deliverers_of_one_wait_consume_one_signal(t: WorkflowTest, runs: Runs) -> None:
    """The API and a redriven runner deliver at once: one commit, one consumed signal, one advance."""
    t.start("shipping", {}, execution_id="s7")
    t.run("s7")
    racing = Racing(t.engine.store)
    t.engine.store = racing
    t.store.put_signal(_signal("s7", "a", {"first": True}, t.clock.now()))
    # While the API's delivery commits, a second signal's delivery runs to the end first.
    racing.before("commit_step", lambda: t.signal("s7", "shipped", {"second": True}))
    t.signal("s7", "shipped", {"third": True})
    ex = t.run("s7")
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1
    taken = [s for s in _all(t, "s7") if s.consumed_by is not None]
    assert len(taken) == 1 and taken[0].payload == {"first": True} and ex.context["first"] is True


def _signal(eid: str, key: str, payload: dict, now: float):
    from engine.state import Signal

    return Signal(eid, "shipped", f"{now - 1:020.6f}#{key}", payload, now - 1)


def _all(t: WorkflowTest, eid: str) -> list:
    inner = t.store
    out = []
    for key in [k for (e, n, k) in getattr(inner, "_signals", {})] or []:
        out.append(inner.get_signal(eid, "shipped", key))
    if out:
        return out
    answer = inner._db.query(  # type: ignore[attr-defined]
        TableName=inner._table,  # type: ignore[attr-defined]
        KeyConditionExpression="PK = :pk AND begins_with(SK, :p)",
        ExpressionAttributeValues={":pk": {"S": f"EXEC#{eid}"}, ":p": {"S": "SIGNAL#shipped#"}},
        ConsistentRead=True,
    )
    return [inner._signal(eid, item) for item in answer["Items"]]  # type: ignore[attr-defined]


def test_a_signal_racing_the_timeout(t: WorkflowTest, runs: Runs) -> None:
    """Failure table: 'signal vs timeout'. The timeout is recorded first: the signal is not
    consumed (it stays kept) and the retry's wait takes it."""
    t.start("shipping", {}, execution_id="s8")
    t.run("s8")
    racing = Racing(t.engine.store)
    t.engine.store = racing
    t.clock.advance(7200)
    racing.before("commit_step", lambda: t.engine.sweep())
    sent = t.signal("s8", "shipped", {"late": True})
    assert not sent.delivered
    [record] = [r for r in t.history("s8") if r.name == "signal_shipped"]
    assert record.attempts[0].error["type"] == "SignalTimeout"
    ex = t.run("s8")  # attempt 2 waits again, and finds the kept signal
    assert ex.status.value == "COMPLETED" and ex.context["late"] is True and runs.count["after"] == 1


def test_a_delivery_that_dies_after_its_commit_is_rolled_forward(t: WorkflowTest, runs: Runs) -> None:
    t.start("shipping", {}, execution_id="s9")
    t.run("s9")
    racing = Racing(t.engine.store)
    t.engine.store = racing

    def die() -> None:
        raise WorkerDied("after the commit")

    racing.before("consume_signal", die)
    with pytest.raises(WorkerDied):
        t.signal("s9", "shipped", {"ok": True})
    assert t.status("s9") == "WAITING"
    ex = t.run("s9", skip_waits=True)  # the timeout finds the commit: consume, then advance
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1
    assert t.store.next_signal("s9", "shipped") is None
