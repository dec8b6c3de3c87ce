"""Every branch of the message protocol, decided without I/O (engine/verdicts.py)."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.messages import MessageKind, StepMessage
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, StepStatus
from engine.sweeper import SweepAction, judge_lapsed, may_be_parked
from engine.verdicts import (
    GuardVerdict,
    MessageVerdict,
    RecordVerdict,
    check_guard,
    check_message,
    check_record,
    has_time,
    needs_guard,
    record_reserve,
    requeued,
    run_is_covered,
)

pytestmark = pytest.mark.unit

CFG = EngineConfig(lease_seconds=100, early_tolerance=1.0)
NOW = 1000.0


def ex(**changes: object) -> Execution:
    base = Execution("e", "wf", Status.RUNNING, 2, 5, {}, {}, 0.0, 900.0, attempt=1)
    from dataclasses import replace

    return replace(base, **changes)  # type: ignore[arg-type]


def test_no_execution_is_an_orphan() -> None:
    assert check_message(StepMessage("e", 2), None, NOW, CFG).verdict is MessageVerdict.ORPHAN


@pytest.mark.parametrize(
    ("message", "execution"),
    [
        (StepMessage("e", 1), ex()),  # an older step
        (StepMessage("e", 2, 2, MessageKind.RETRY), ex()),  # a later attempt than the current one
        (StepMessage("e", 2), ex(attempt=2)),  # an earlier attempt
        (StepMessage("e", 2), ex(status=Status.CANCELLED)),
        (StepMessage("e", 2, 1, MessageKind.WAKE), ex()),  # a wake for an execution that is not asleep
        (StepMessage("e", 1, 1, MessageKind.WAKE), ex(status=Status.SLEEPING)),
    ],
)
def test_a_message_that_no_longer_points_at_the_execution_is_stale(message: StepMessage, execution: Execution) -> None:
    assert check_message(message, execution, NOW, CFG).verdict is MessageVerdict.STALE


def test_a_retry_before_its_ready_time_is_early_and_says_when_it_is_due() -> None:
    check = check_message(StepMessage("e", 2, 1, MessageKind.RETRY), ex(ready_at=NOW + 5), NOW, CFG)
    assert check.verdict is MessageVerdict.EARLY and check.due_at == NOW + 5


def test_the_early_tolerance_lets_a_message_just_before_its_time_run() -> None:
    check = check_message(StepMessage("e", 2, 1, MessageKind.RETRY), ex(ready_at=NOW + 0.5), NOW, CFG)
    assert check.verdict is MessageVerdict.RUN


def test_a_wake_at_its_time_wakes_and_before_it_is_early() -> None:
    asleep = ex(status=Status.SLEEPING, next_wake_at=NOW)
    assert check_message(StepMessage("e", 2, 1, MessageKind.WAKE), asleep, NOW, CFG).verdict is MessageVerdict.WAKE
    later = ex(status=Status.SLEEPING, next_wake_at=NOW + 60)
    assert check_message(StepMessage("e", 2, 1, MessageKind.WAKE), later, NOW, CFG).verdict is MessageVerdict.EARLY


def test_guarding() -> None:
    assert not needs_guard(StepMessage("e", 0), redelivered=False, at_most_once=False)
    assert needs_guard(StepMessage("e", 0), redelivered=True, at_most_once=False)
    assert needs_guard(StepMessage("e", 0), redelivered=False, at_most_once=True)
    assert needs_guard(StepMessage("e", 0, 2, MessageKind.RETRY), redelivered=False, at_most_once=False)
    assert needs_guard(StepMessage("e", 0, 1, MessageKind.REDRIVE), redelivered=False, at_most_once=False)


def test_a_committed_step_rolls_forward() -> None:
    record = StepRecord("e", 2, "s", StepStatus.COMPLETED, (Attempt(1, 0, 1, AttemptOutcome.COMPLETED),))
    assert check_guard(ex(), record, NOW, CFG).verdict is GuardVerdict.ROLL_FORWARD


def test_an_unmarked_attempt_is_marked_and_run() -> None:
    assert check_guard(ex(started_attempt=0), None, NOW, CFG).verdict is GuardVerdict.MARK_AND_RUN


def test_a_mark_younger_than_a_lease_is_in_flight_and_an_older_one_is_a_lost_worker() -> None:
    young = check_guard(ex(started_attempt=1, attempt_started_at=NOW - 99), None, NOW, CFG)
    assert young.verdict is GuardVerdict.IN_FLIGHT and young.marked_at == NOW - 99
    old = check_guard(ex(started_attempt=1, attempt_started_at=NOW - 100), None, NOW, CFG)
    assert old.verdict is GuardVerdict.WORKER_LOST and old.marked_at == NOW - 100


def test_an_early_message_is_sent_back_with_the_rest_of_its_delay_rounded_up() -> None:
    # Two seconds of skew: the retry is due at NOW + 2.2; sending it back in 3 s runs it then.
    check = check_message(StepMessage("e", 2, 2, MessageKind.RETRY), ex(attempt=2, ready_at=NOW + 2.2), NOW, CFG)
    assert check.verdict is MessageVerdict.EARLY and check.resend_in == 3
    asleep = ex(status=Status.SLEEPING, next_wake_at=NOW + 30)
    assert check_message(StepMessage("e", 2, 1, MessageKind.WAKE), asleep, NOW, CFG).resend_in == 30


def test_an_early_message_due_past_sqs_longest_delay_is_left_to_the_sweeper() -> None:
    check = check_message(StepMessage("e", 2, 1, MessageKind.RETRY), ex(ready_at=NOW + 900.5), NOW, CFG)
    assert check.verdict is MessageVerdict.EARLY and check.resend_in is None
    at_limit = check_message(StepMessage("e", 2, 1, MessageKind.RETRY), ex(ready_at=NOW + 900), NOW, CFG)
    assert at_limit.resend_in == 900


@pytest.mark.parametrize(
    ("remaining", "timeout", "starts"),
    [
        (15.0, 20.0, False),  # the case: 60 s invocation, 45 s spent, a 20 s step next
        (29.9, 20.0, False),  # the timeout fits, the reserve does not
        (30.0, 20.0, True),
        (60.0, 20.0, True),
        (None, 20.0, True),  # no deadline known (no Lambda context): nothing to hold back
        (10.5, 0.5, True),
        (10.4, 0.5, False),
    ],
)
def test_a_step_starts_only_with_its_timeout_plus_the_reserve_left(
    remaining: float | None, timeout: float, starts: bool
) -> None:
    assert has_time(remaining, timeout, reserve=10.0) is starts


def test_a_run_is_covered_only_while_a_whole_lease_is_left_and_nobody_marked_the_attempt() -> None:
    assert run_is_covered(ex(next_wake_at=NOW + 150), NOW, CFG)
    # A message that waited in a backlog until less than a lease was left may have been
    # re-driven already: it runs guarded.
    assert not run_is_covered(ex(next_wake_at=NOW + 100), NOW, CFG)
    assert not run_is_covered(ex(next_wake_at=NOW - 5), NOW, CFG)
    # Another runner marked this attempt started: go through the guard (in flight or lost).
    assert not run_is_covered(ex(next_wake_at=NOW + 150, started_attempt=1), NOW, CFG)
    assert needs_guard(StepMessage("e", 0), redelivered=False, at_most_once=False, covered=False)


def test_a_lapsed_lease_waits_for_the_backlog_unless_its_attempt_was_marked() -> None:
    lapsed = ex(next_wake_at=NOW - 1)
    assert judge_lapsed(lapsed, waiting=0, now=NOW, cfg=CFG) is SweepAction.REDRIVE
    assert judge_lapsed(lapsed, waiting=25, now=NOW, cfg=CFG) is SweepAction.POSTPONED
    # A guarded runner's mark renewed the lease; that lease lapsing means the runner is gone.
    marked = ex(next_wake_at=NOW - 1, started_attempt=1)
    assert judge_lapsed(marked, waiting=25, now=NOW, cfg=CFG) is SweepAction.REDRIVE


def test_a_backlog_is_believed_only_for_so_many_leases_after_the_message_was_sent() -> None:
    # A queue that never drains must not keep a lost message waiting forever.
    patience = CFG.backlog_patience_leases * CFG.lease_seconds
    sent_at = NOW - patience
    assert judge_lapsed(ex(next_wake_at=NOW - 1, updated_at=sent_at + 1), 25, NOW, CFG) is SweepAction.POSTPONED
    assert judge_lapsed(ex(next_wake_at=NOW - 1, updated_at=sent_at), 25, NOW, CFG) is SweepAction.REDRIVE


def test_a_backlog_is_believed_only_briefly_while_the_dead_letter_queue_holds_messages() -> None:
    # SQS may have parked this execution's message: no backlog delivers it.
    short = CFG.parked_patience_leases * CFG.lease_seconds
    assert short < CFG.backlog_patience_leases * CFG.lease_seconds
    waited = ex(next_wake_at=NOW - 1, updated_at=NOW - short)
    assert judge_lapsed(waited, 25, NOW, CFG, parked_since=NOW - 5) is SweepAction.REDRIVE
    assert judge_lapsed(waited, 25, NOW, CFG, parked_since=None) is SweepAction.POSTPONED
    fresh = ex(next_wake_at=NOW - 1, updated_at=NOW - short + 1)
    assert judge_lapsed(fresh, 25, NOW, CFG, parked_since=NOW - 5) is SweepAction.POSTPONED
    # With no backlog the lapsed lease is a lost message whatever the DLQ holds.
    assert judge_lapsed(fresh, 0, NOW, CFG, parked_since=NOW - 5) is SweepAction.REDRIVE


def test_only_a_parking_after_the_message_was_sent_shortens_the_patience() -> None:
    # The DLQ last changed before this execution's message was sent (its last transition, a
    # redrive included): the message cannot be among the parked ones, the backlog holds it.
    short = CFG.parked_patience_leases * CFG.lease_seconds
    sent_at = NOW - short
    waited = ex(next_wake_at=NOW - 1, updated_at=sent_at)
    assert judge_lapsed(waited, 25, NOW, CFG, parked_since=sent_at) is SweepAction.POSTPONED
    assert judge_lapsed(waited, 25, NOW, CFG, parked_since=sent_at + 0.001) is SweepAction.REDRIVE
    assert may_be_parked(waited, sent_at + 1) and not may_be_parked(waited, sent_at - 1)
    assert not may_be_parked(waited, None)


@pytest.mark.parametrize(
    ("remaining", "first", "slowest", "verdict"),
    [
        (1.0, True, 9.0, RecordVerdict.START),  # the first record had the whole invocation
        (60.0, False, 0.0, RecordVerdict.START),
        (10.0, False, 0.0, RecordVerdict.START),  # exactly the reserve left (10 s of a 60 s budget)
        (9.9, False, 0.0, RecordVerdict.HOLD_BACK),
        (20.0, False, 10.0, RecordVerdict.START),  # the reserve plus the longest record so far
        (19.9, False, 10.0, RecordVerdict.HOLD_BACK),
        (None, False, 50.0, RecordVerdict.START),  # no deadline known: nothing to hold back
    ],
)
def test_a_batch_record_starts_only_with_the_reserve_plus_the_slowest_record_left(
    remaining: float | None, first: bool, slowest: float, verdict: RecordVerdict
) -> None:
    cfg = EngineConfig(chain_reserve_seconds=10.0, record_reserve_fraction=0.25)
    assert check_record(remaining, first=first, budget=60.0, slowest=slowest, cfg=cfg) is verdict


def test_the_record_reserve_is_a_share_of_a_short_invocation() -> None:
    cfg = EngineConfig(chain_reserve_seconds=10.0, record_reserve_fraction=0.25)
    assert record_reserve(60.0, cfg) == 10.0  # the chain reserve
    assert record_reserve(10.0, cfg) == 2.5  # the chaos kit's 10 s worker: a quarter of it
    assert check_record(3.0, first=False, budget=10.0, slowest=0.4, cfg=cfg) is RecordVerdict.START
    assert check_record(2.8, first=False, budget=10.0, slowest=0.4, cfg=cfg) is RecordVerdict.HOLD_BACK
    with pytest.raises(Exception, match="record_reserve_fraction"):
        EngineConfig(record_reserve_fraction=1.0)


def test_a_held_back_redelivery_keeps_its_guard_in_its_copy() -> None:
    plain = StepMessage("e", 2, 1, MessageKind.STEP)
    assert requeued(plain, redelivered=False) == plain
    assert requeued(plain, redelivered=True) == StepMessage("e", 2, 1, MessageKind.REDRIVE)
    assert requeued(plain, redelivered=True).needs_guard
    wake = StepMessage("e", 2, 1, MessageKind.WAKE)
    assert requeued(wake, redelivered=True) == wake
