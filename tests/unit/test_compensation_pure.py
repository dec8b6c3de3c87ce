"""The pure parts of compensation and catch: positions, transitions, verdicts, message rules."""

from __future__ import annotations

from engine import Status, step
from engine import transitions as tr
from engine.compensation import is_compensation, ordered_history, record_name
from engine.config import EngineConfig
from engine.messages import MessageKind, StepMessage
from engine.state import Attempt, AttemptOutcome, Execution, StepRecord, StepStatus
from engine.verdicts import CompensationVerdict, MessageVerdict, check_compensation, check_message
from engine.workflow import Phase, StepContext, build_spec

CFG = EngineConfig(lease_seconds=60)


def f(ctx):
    return None


def undo(ctx):
    return None


SPEC = build_spec("s", [step(f, name="a", compensate=undo), step(f, name="b"), step(f, name="c", compensate=undo), f])


def ex(**kw) -> Execution:
    base = dict(
        id="e",
        workflow="s",
        status=Status.RUNNING,
        current_step=3,
        version=5,
        input={},
        context={"k": 1},
        created_at=0.0,
        updated_at=0.0,
        next_wake_at=200.0,
    )
    return Execution(**{**base, **kw})


def record(name: str, status: StepStatus, *attempts: int) -> StepRecord:
    outcome = AttemptOutcome.COMPLETED if status is StepStatus.COMPLETED else AttemptOutcome.FAILED
    return StepRecord("e", 0, name, status, tuple(Attempt(a, 0.0, 1.0, outcome) for a in attempts))


def test_compensable_steps_are_found_downwards_and_skip_steps_without_one():
    assert tr.compensable_below(SPEC, 3) == 2
    assert tr.compensable_below(SPEC, 2) == 0
    assert tr.compensable_below(SPEC, 0) is None
    assert tr.compensable_below(SPEC, 99) == 2
    assert SPEC.has_compensation and not build_spec("p", [f]).has_compensation


def test_compensating_then_next_then_compensated():
    cause = {"type": "Boom"}
    new, effects = tr.compensating_state(ex(attempt=3, attempt_base=1), 2, cause, 100.0, CFG)
    assert (new.status, new.current_step, new.attempt, new.attempt_base, new.error) == (
        Status.COMPENSATING,
        2,
        1,
        0,
        cause,
    )
    assert new.version == 6 and new.next_wake_at is not None
    assert effects.run_next == StepMessage("e", 2, 1, MessageKind.COMPENSATE)
    nxt, effects = tr.after_compensation(new, SPEC, 101.0, CFG)
    assert (nxt.status, nxt.current_step, nxt.error) == (Status.COMPENSATING, 0, cause)
    done, effects = tr.after_compensation(nxt, SPEC, 102.0, CFG)
    assert done.status is Status.COMPENSATED and done.terminal
    assert (done.next_wake_at, done.expires_at) == (102.0 + CFG.end_grace_seconds, 102.0 + CFG.retention_seconds)
    assert effects.run_next is None


def test_a_compensation_retry_stays_compensating_and_sends_a_compensate_message():
    new, _ = tr.compensating_state(ex(), 2, {}, 100.0, CFG)
    retried, effects = tr.compensation_retry_state(new, 5.0, 100.0, CFG)
    assert retried.status is Status.COMPENSATING and retried.attempt == 2
    assert effects.delayed == (StepMessage("e", 2, 2, MessageKind.COMPENSATE), 5)
    failed = tr.compensation_failed_state(retried, {"type": "X"}, 110.0, CFG)
    assert failed.status is Status.COMPENSATION_FAILED and failed.terminal


def test_only_compensation_messages_run_a_compensating_execution():
    undoing = ex(status=Status.COMPENSATING, current_step=2, attempt=1)
    for kind in (MessageKind.COMPENSATE, MessageKind.RETRY, MessageKind.REDRIVE):
        assert check_message(StepMessage("e", 2, 1, kind), undoing, 0.0, CFG).verdict is MessageVerdict.RUN
    assert check_message(StepMessage("e", 2, 1, MessageKind.STEP), undoing, 0.0, CFG).verdict is MessageVerdict.STALE
    running = ex(current_step=2, attempt=1)
    stale = check_message(StepMessage("e", 2, 1, MessageKind.COMPENSATE), running, 0.0, CFG)
    assert stale.verdict is MessageVerdict.STALE
    assert StepMessage("e", 2, 1, MessageKind.COMPENSATE).needs_guard


def test_the_compensation_verdicts():
    undoing = ex(status=Status.COMPENSATING, current_step=0, attempt=2)
    done_fwd = record("a", StepStatus.COMPLETED, 1)
    check = check_compensation
    assert check(undoing, None, None, 0.0, CFG)[0] is CompensationVerdict.NOT_COMMITTED
    assert check(undoing, record("a", StepStatus.FAILED, 1), None, 0.0, CFG)[0] is CompensationVerdict.NOT_COMMITTED
    assert check(undoing, done_fwd, record("a#compensate", StepStatus.COMPLETED, 1), 0.0, CFG)[0] is (
        CompensationVerdict.DONE
    )
    assert check(undoing, done_fwd, record("a#compensate", StepStatus.FAILED, 1, 2), 0.0, CFG)[0] is (
        CompensationVerdict.GIVE_UP
    )
    assert check(undoing, done_fwd, record("a#compensate", StepStatus.RETRYING, 2), 0.0, CFG)[0] is (
        CompensationVerdict.FOLLOW_RETRY
    )
    assert check(undoing, done_fwd, record("a#compensate", StepStatus.RETRYING, 1), 0.0, CFG)[0] is (
        CompensationVerdict.MARK_AND_RUN
    )
    marked = ex(status=Status.COMPENSATING, current_step=0, attempt=2, started_attempt=2, attempt_started_at=10.0)
    assert check(marked, done_fwd, None, 20.0, CFG) == (CompensationVerdict.IN_FLIGHT, 10.0)
    assert check(marked, done_fwd, None, 100.0, CFG) == (CompensationVerdict.WORKER_LOST, 10.0)


def test_history_order_and_names():
    recs = [
        StepRecord("e", 2, "c#compensate", StepStatus.COMPLETED),
        StepRecord("e", 0, "a#compensate", StepStatus.COMPLETED),
        StepRecord("e", 2, "c", StepStatus.COMPLETED),
        StepRecord("e", 0, "a", StepStatus.COMPLETED),
        StepRecord("e", 3, "d", StepStatus.FAILED),
        StepRecord("e", 3, "d#catch", StepStatus.COMPLETED),
    ]
    assert [r.name for r in ordered_history(recs)] == ["a", "c", "d", "d#catch", "c#compensate", "a#compensate"]
    assert record_name("a") == "a#compensate" and is_compensation(recs[0]) and not is_compensation(recs[2])


def test_each_phase_has_its_own_idempotency_key():
    def ctx(phase: Phase) -> StepContext:
        return StepContext("e", "s", 4, "d", 1, {}, None, phase=phase)

    assert [ctx(p).idempotency_key for p in Phase] == ["e:4", "e:4:compensate", "e:4:catch"]


def test_catching_state_starts_a_new_round_of_the_same_step():
    new, effects = tr.catching_state(ex(current_step=1, attempt=3), {"type": "X"}, 50.0, CFG)
    assert (new.status, new.current_step, new.attempt, new.attempt_base, new.catching) == (
        Status.RUNNING,
        1,
        4,
        3,
        {"type": "X"},
    )
    assert new.round_attempt == 1
    assert effects.run_next == StepMessage("e", 1, 4, MessageKind.STEP)
    moved, _ = tr.after_step(new, SPEC, {"r": 1}, 60.0, CFG)
    assert moved.catching is None and moved.current_step == 2
