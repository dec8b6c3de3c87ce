"""Bug 5: a queue backlog is not mistaken for lost messages.

The lease counts from the last write. A message that waits in a backlog longer than
the lease must not be re-driven (that doubles the queue), and if a redrive happens
anyway (SQS's backlog figure is approximate) the late original and the redrive must
not run the step at the same time.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from engine import Registry, Status, sleep
from engine.config import shard_of
from engine.errors import TransientError
from engine.messages import MessageKind
from engine.state import Execution
from engine.sweeper import backlog_patience
from tests.integration.engine_support import add_workflow

pytestmark = pytest.mark.integration

EXECUTIONS = 20


class Overlaps:
    """Step bodies that notice when the same step of the same execution is already running."""

    def __init__(self) -> None:
        self.running: set[tuple[str, int]] = set()
        self.overlaps: list[tuple[str, int]] = []
        self.during: object = None  # called inside the next step body: a second worker

    def __call__(self, ctx) -> None:
        key = (ctx.execution_id, ctx.step_index)
        if key in self.running:
            self.overlaps.append(key)
            return
        self.running.add(key)
        try:
            hook, self.during = self.during, None
            if hook is not None:
                hook()
        finally:
            self.running.discard(key)


@pytest.fixture
def probe() -> Overlaps:
    return Overlaps()


@pytest.fixture
def reg(rec, probe):
    reg = Registry()
    add_workflow(reg, "two", [rec.step("a", probe), rec.step("b", probe)])
    add_workflow(reg, "nap", [sleep(days=1), rec.step("after")])
    return reg


def test_a_backlog_of_ten_leases_is_not_redriven_and_every_step_runs_once(rig, rec, probe):
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"b{i}")
    lease = rig.engine.config.lease_seconds
    redriven = postponed = 0
    # The workers fall behind: nothing is received while ten leases pass, a tick a minute.
    for _ in range(int(10 * lease / 60)):
        rig.clock.advance(60)
        report = rig.engine.sweep()
        redriven += report.redriven
        postponed += report.postponed
    assert redriven == 0, "a message waiting in the queue was taken for a lost one"
    assert postponed >= EXECUTIONS and rig.driver.backlog() == EXECUTIONS, "the queue was not doubled"
    # Each postponement waits as long as the message has waited: 2, 4, 8 leases, not every 2.
    assert postponed <= 3 * EXECUTIONS, "the sweeper kept rewriting executions that only wait"
    rig.driver.pump(batch_size=10)
    assert [rig.status(f"b{i}") for i in range(EXECUTIONS)] == ["COMPLETED"] * EXECUTIONS
    for i in range(EXECUTIONS):
        assert rec.count(f"b{i}", 0) == 1 and rec.count(f"b{i}", 1) == 1, "a step ran twice"
    assert probe.overlaps == []


@pytest.mark.parametrize("first", [MessageKind.STEP, MessageKind.REDRIVE])
def test_a_late_original_and_a_redrive_never_run_the_step_together(rig, rec, probe, first):
    """SQS's backlog figure lags: the sweeper believes the queue empty and re-drives an
    execution whose first message is still waiting. The two copies then reach two workers
    at once, in either order: one runs the step, the other leaves it alone."""
    rig.engine.start("two", {}, execution_id="x")
    rig.queue.backlog_says = 0
    rig.clock.advance(3 * rig.engine.config.lease_seconds)
    assert rig.engine.sweep().redriven == 1
    received = rig.driver.receive(10)
    kinds = {json.loads(m["Body"])["kind"]: m for m in received}
    assert set(kinds) == {"step", "redrive"}
    second = MessageKind.REDRIVE if first is MessageKind.STEP else MessageKind.STEP
    probe.during = lambda: rig.driver.deliver([kinds[second.value]])
    rig.driver.deliver([kinds[first.value]])
    assert rec.count("x", 0) == 1 and probe.overlaps == []
    rig.driver.pump()
    assert rig.status("x") == "COMPLETED" and rec.count("x", 0) == 1 and rec.count("x", 1) == 1


def test_the_sweeps_own_messages_are_not_a_backlog(rig):
    """Ten sleepers woken earlier in the same sweep put ten messages in the queue; a lost
    message judged after them is still re-driven, not postponed behind the sweep's own."""
    shards = rig.engine.config.shards
    lost = next(f"lost{i}" for i in range(1000) if shard_of(f"lost{i}", shards) == 0)
    rig.queue.fail_sends = 1
    rig.engine.start("two", {}, execution_id=lost)  # its first message is lost
    lapse = rig.engine.get(lost).next_wake_at
    now = rig.clock.now()
    sleepers = [f"nap{i}" for i in range(1000) if shard_of(f"nap{i}", shards) == 0][:10]
    for i, execution_id in enumerate(sleepers):  # due before the lost one: read first
        rig.store.inner.create_execution(
            Execution(execution_id, "nap", Status.SLEEPING, 0, 1, {}, {}, now, now, next_wake_at=now + i)
        )
    rig.clock.set(lapse + 1)
    report = rig.engine.sweep()
    assert (report.woken, report.redriven, report.postponed) == (10, 1, 0)


def test_a_message_parked_in_the_dead_letter_queue_is_redriven_after_the_short_patience(rig, rec, probe, aws):
    """SQS moved one execution's message to the DLQ after maxReceiveCount deliveries while
    the others wait in a backlog. No backlog will deliver it, and the sweeper cannot tell
    which execution it belongs to: with the DLQ holding messages it believes the backlog for
    ``parked_patience_leases`` (not the 15 of a plain backlog), then re-drives."""
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"p{i}")
    messages = rig.driver.receive(10)
    parked = messages[0]
    aws["sqs"].send_message(QueueUrl=aws["DeadLetterQueue"], MessageBody=parked["Body"])
    rig.driver.delete(parked)
    for m in messages[1:]:
        rig.driver.release(m)
    victim = json.loads(parked["Body"])["execution_id"]
    cfg = rig.engine.config
    assert cfg.parked_patience_leases < cfg.backlog_patience_leases
    started = rig.clock.now()
    redriven_after = None
    while redriven_after is None and rig.clock.now() - started < cfg.backlog_patience_leases * cfg.lease_seconds:
        rig.clock.advance(60)
        rig.engine.sweep()
        if any(s.message.execution_id == victim and s.message.kind is MessageKind.REDRIVE for s in rig.queue.sent):
            redriven_after = rig.clock.now() - started
    assert redriven_after is not None, "the parked execution waited out the whole backlog patience"
    assert redriven_after <= cfg.parked_patience_leases * cfg.lease_seconds + 60
    rig.driver.pump(batch_size=10)
    assert [rig.status(f"p{i}") for i in range(EXECUTIONS)] == ["COMPLETED"] * EXECUTIONS
    assert all(rec.count(f"p{i}", k) == 1 for i in range(EXECUTIONS) for k in (0, 1)), "a step ran twice"
    assert probe.overlaps == []


def test_a_parking_costs_each_waiting_execution_one_redrive_not_one_every_short_patience(rig, rec, probe, aws):
    """The loop the 1,000-execution soak fell into: the DLQ held messages parked during its
    fault window, and every execution waiting behind the backlog was re-driven every
    ``parked_patience_leases``, each redrive one more message to wait behind. A parking can
    only hold messages sent before it; a redrive is a transition after it, so the redriven
    execution gets the plain backlog patience, and the DLQ's unchanged count is remembered
    across sweeps (the store's note), not taken as new each time."""
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"w{i}")
    aws["sqs"].send_message(QueueUrl=aws["DeadLetterQueue"], MessageBody='{"parked": "during a fault"}')
    cfg = rig.engine.config
    window = 10 * cfg.lease_seconds  # well inside the plain patience counted from a redrive
    assert window < cfg.backlog_patience_leases * cfg.lease_seconds
    started = rig.clock.now()
    while rig.clock.now() - started < window:
        rig.clock.advance(cfg.lease_seconds / 2)
        rig.engine.sweep()
    redrives = [s.message.execution_id for s in rig.queue.sent if s.message.kind is MessageKind.REDRIVE]
    assert sorted(redrives) == sorted(f"w{i}" for i in range(EXECUTIONS)), "one redrive each, for the one parking"
    # A second parking may hold any of them again: one more redrive each, then quiet.
    aws["sqs"].send_message(QueueUrl=aws["DeadLetterQueue"], MessageBody='{"parked": "later"}')
    while rig.clock.now() - started < 2 * window:
        rig.clock.advance(cfg.lease_seconds / 2)
        rig.engine.sweep()
    redrives = [s.message.execution_id for s in rig.queue.sent if s.message.kind is MessageKind.REDRIVE]
    assert len(redrives) == 2 * EXECUTIONS and set(redrives) == {f"w{i}" for i in range(EXECUTIONS)}
    rig.driver.pump(batch_size=10)
    assert [rig.status(f"w{i}") for i in range(EXECUTIONS)] == ["COMPLETED"] * EXECUTIONS
    assert all(rec.count(f"w{i}", k) == 1 for i in range(EXECUTIONS) for k in (0, 1)), "a step ran twice"
    assert probe.overlaps == []


def test_an_unanswered_dead_letter_count_is_taken_as_a_parking_just_now(rig):
    """The DLQ's count cannot be read (throttled, or a role without the grant): its messages
    may be new, so the note of an old count is not believed and the short patience holds."""
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"u{i}")
    cfg = rig.engine.config
    rig.store.inner.note_parked(1, rig.clock.now() - 1000)  # an old parking, before these messages
    rig.queue.parked_says = TransientError("DLQ count throttled")
    rig.clock.advance(cfg.parked_patience_leases * cfg.lease_seconds + 1)
    assert rig.engine.sweep().redriven == EXECUTIONS
    rig.queue.parked_says = 1  # answered again, and unchanged since that old note: the long patience
    rig.clock.advance(cfg.parked_patience_leases * cfg.lease_seconds + 1)
    assert rig.engine.sweep().redriven == 0


def test_an_empty_dead_letter_queue_keeps_the_long_patience(rig):
    """The short patience is the DLQ's doing: with it empty, a backlog is believed as before."""
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"e{i}")
    rig.queue.parked_says = 0
    rig.clock.advance(3 * rig.engine.config.parked_patience_leases * rig.engine.config.lease_seconds)
    report = rig.engine.sweep()
    assert (report.redriven, report.postponed) == (0, EXECUTIONS)
    rig.queue.parked_says = 1
    rig.clock.set(max(rig.engine.get(f"e{i}").next_wake_at for i in range(EXECUTIONS)) + 1)
    assert rig.engine.sweep().redriven == EXECUTIONS


def _deliver_waiting(rig) -> None:
    """Deliver what the queue holds now, ten to a batch (not what those batches send)."""
    waiting = [m for _ in range(EXECUTIONS) for m in rig.driver.receive(10)]
    for start in range(0, len(waiting), 10):
        rig.driver.deliver(waiting[start : start + 10])


def test_after_a_backlog_the_next_lease_allows_for_the_same_wait_so_nothing_is_postponed_or_marked(rig, rec, probe):
    """The workers fell five leases behind: every first message waited that long (SQS's own
    timestamps say so). The step each runs sends the next message under a lease five leases
    longer, so when that message waits as long again the sweeper finds no lease lapsed (no read,
    no postponement, no redrive) and the message runs with no start mark: two writes a step."""
    for i in range(EXECUTIONS):
        rig.engine.start("two", {}, execution_id=f"q{i}")
    lease = rig.engine.config.lease_seconds
    rig.clock.advance(5 * lease)
    _deliver_waiting(rig)  # the first steps: late, so each ran guarded (a start mark)
    sent_at = rig.clock.now()
    for i in range(EXECUTIONS):
        ex = rig.engine.get(f"q{i}")
        assert ex.current_step == 1 and ex.next_wake_at == pytest.approx(sent_at + 7 * lease, abs=1)
    before = Counter(rig.store.calls)
    for _ in range(5):  # behind again by as much: a tick a lease
        rig.clock.advance(lease)
        report = rig.engine.sweep()
        assert (report.due, report.postponed, report.redriven) == (0, 0, 0)
    _deliver_waiting(rig)
    assert [rig.status(f"q{i}") for i in range(EXECUTIONS)] == ["COMPLETED"] * EXECUTIONS
    writes = Counter(rig.store.calls) - before
    assert writes["put_execution"] == EXECUTIONS, "a step behind the backlog paid a start mark"
    for i in range(EXECUTIONS):
        assert rec.count(f"q{i}", 0) == 1 and rec.count(f"q{i}", 1) == 1
    assert probe.overlaps == []


def test_a_message_lost_after_a_backlog_is_still_redriven_within_the_backlogs_patience(rig, rec):
    """The longer lease is the price: a message lost after a long wait is found when that lease
    lapses, never later than the backlog's patience (15 leases) after it was sent."""
    rig.engine.start("two", {}, execution_id="gone")
    cfg = rig.engine.config
    rig.clock.advance(40 * cfg.lease_seconds)  # a wait far past the patience: the lease is capped
    rig.driver.deliver(rig.driver.receive(1))
    sent_at = rig.clock.now()
    assert rig.engine.get("gone").next_wake_at == sent_at + backlog_patience(cfg, parked=False)
    rig.driver.delete(rig.driver.receive(1)[0])  # step b's message is lost
    redriven_at = None
    while redriven_at is None:
        rig.clock.advance(60)
        if rig.engine.sweep().redriven:
            redriven_at = rig.clock.now()
    assert redriven_at - sent_at <= backlog_patience(cfg, parked=False) + 60
    rig.driver.pump()
    assert rig.status("gone") == "COMPLETED" and rec.count("gone", 1) == 1
