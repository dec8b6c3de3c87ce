"""The waits' pure parts: tokens, the completion verdict, the wait's wake time, the workflow
API's checks, and the chaos invariants for waits (each fails when it should)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chaos.invariants import check_waits
from engine.callbacks import CompletionVerdict, Token, check_completion, ended_reason, issue, parse
from engine.errors import MalformedToken, WorkflowDefinitionError
from engine.signals import SendVerdict, check_send
from engine.state import Attempt, AttemptOutcome, Execution, Signal, Status, StepRecord, StepStatus, Wait, WaitKind
from engine.workflow import NOT_YET, wait_for_callback, wait_for_signal, wait_until

pytestmark = pytest.mark.unit


def execution(**changes) -> Execution:
    base = Execution("e", "w", Status.WAITING, 1, 5, {}, {}, 0.0, 0.0, attempt=2)
    return replace(base, **changes)


def test_a_token_is_bound_and_has_at_least_128_random_bits() -> None:
    token, digest = issue("order-1", 3, 2)
    tok = parse(token)
    assert (tok.execution_id, tok.step, tok.attempt) == ("order-1", 3, 2)
    assert tok.hash == digest and digest not in token
    assert len(tok.secret) * 6 >= 128  # url-safe base64: 6 bits a character
    assert issue("order-1", 3, 2)[0] != token
    for bad in ("", "lcb1.x", token + "!", token.replace("lcb1", "lcb2"), "lcb1.a b.1.1." + "A" * 24):
        with pytest.raises(MalformedToken):
            parse(bad)


def test_the_completion_verdict() -> None:
    token, digest = issue("e", 1, 2)
    tok = parse(token)
    wait = Wait(WaitKind.CALLBACK, 1, 2, token_hash=digest)
    assert check_completion(execution(wait=wait), tok) is CompletionVerdict.ACCEPT
    assert check_completion(execution(wait=wait, status=Status.RUNNING), tok) is CompletionVerdict.ACCEPT
    wrong = Token("e", 1, 2, "B" * 24)
    assert check_completion(execution(wait=wait), wrong) is CompletionVerdict.UNKNOWN
    assert check_completion(execution(wait=None, attempt=3), tok) is CompletionVerdict.ENDED  # superseded
    assert check_completion(execution(wait=None, current_step=2, attempt=1), tok) is CompletionVerdict.ENDED
    assert check_completion(execution(wait=wait, status=Status.CANCELLED), tok) is CompletionVerdict.ENDED
    assert check_completion(execution(wait=None, status=Status.RUNNING, attempt=2), tok) is CompletionVerdict.UNKNOWN
    future = Token("e", 4, 1, tok.secret)
    assert check_completion(execution(wait=wait), future) is CompletionVerdict.UNKNOWN


def test_an_ended_wait_says_what_ended_it() -> None:
    """The line a 410 ``wait_ended`` carries: the token's attempt as recorded, then where the
    execution is (ended, retrying with a new token, or further on)."""
    tok = parse(issue("e", 1, 2)[0])
    done = Attempt(2, 0.0, 1.0, AttemptOutcome.COMPLETED)
    failed = Attempt(2, 0.0, 1.0, AttemptOutcome.FAILED, error={"type": "Declined", "message": "card"})
    late = Attempt(2, 0.0, 1.0, AttemptOutcome.FAILED, error={"type": "CallbackTimeout", "message": "too late"})
    cancelled = execution(status=Status.CANCELLED)
    assert ended_reason(cancelled, tok, None) == "the wait has already ended: execution 'e' is CANCELLED"
    assert ended_reason(execution(current_step=2, attempt=1), tok, done) == (
        "the wait has already ended: its attempt 2 was completed already; execution 'e' has moved on to step 2"
    )
    assert ended_reason(execution(attempt=3), tok, failed).endswith(
        "its attempt 2 failed (Declined: card); attempt 3 is the current one, with a token of its own"
    )
    assert "its attempt 2 timed out (CallbackTimeout: too late)" in ended_reason(execution(attempt=3), tok, late)
    lost = Attempt(2, 0.0, 1.0, AttemptOutcome.WORKER_LOST)
    assert "lost with the worker" in ended_reason(execution(status=Status.FAILED), tok, lost)
    assert ended_reason(execution(), tok, None).endswith("completed, timed out or superseded by a retry")


def test_a_signal_is_kept_unless_its_execution_ended_or_its_workflow_is_not_registered() -> None:
    """Refused before it is written (signals.check_send): a 409 means nothing was kept, so a
    caller who sends it again feeds one wait, not two."""
    assert check_send(execution(), registered=True) is SendVerdict.KEEP
    assert check_send(execution(status=Status.BLOCKED), registered=True) is SendVerdict.KEEP  # delivered on resume
    assert check_send(execution(), registered=False) is SendVerdict.NOT_REGISTERED
    assert check_send(execution(status=Status.BLOCKED), registered=False) is SendVerdict.NOT_REGISTERED
    for ended in (Status.COMPLETED, Status.FAILED, Status.CANCELLED):
        assert check_send(execution(status=ended), registered=False) is SendVerdict.TERMINAL


def test_a_wait_wakes_at_its_earliest_deadline_and_round_trips() -> None:
    w = Wait(WaitKind.CALLBACK, 1, 1, name="a", token_hash="h", deadline=100.0, heartbeat_deadline=40.0)
    assert w.wake_at() == 40.0 and Wait(WaitKind.SIGNAL, 0, 1).wake_at() is None
    assert Wait.from_dict(w.to_dict()) == w


def test_the_workflow_api_checks_its_arguments() -> None:
    with pytest.raises(WorkflowDefinitionError):
        wait_for_callback("bad name")
    with pytest.raises(WorkflowDefinitionError):
        wait_for_signal("s", timeout=0)
    with pytest.raises(WorkflowDefinitionError):
        wait_until(lambda ctx: NOT_YET, every=None)  # type: ignore[arg-type]
    assert wait_until(lambda ctx: NOT_YET, every=60, name="check").every == 60.0
    assert repr(NOT_YET) == "NOT_YET"


def _record(detail: dict, attempt: int = 1) -> StepRecord:
    a = Attempt(attempt, 0.0, 1.0, AttemptOutcome.COMPLETED, detail=detail)
    return StepRecord("e", 0, "signal_go", StepStatus.COMPLETED, (a,), {})


def test_wait_invariants_hold_for_a_clean_run_and_fail_when_broken() -> None:
    done = execution(status=Status.COMPLETED, current_step=1, wait=None)
    sig = Signal("e", "go", "k1", {}, 0.0, consumed_by="0:1")
    assert check_waits(done, [_record({"signal": "k1"})], [sig]) == []
    assert check_waits(execution(wait=None), [], [])  # WAITING without its wait
    assert check_waits(replace(done, wait=Wait(WaitKind.SIGNAL, 0, 1)), [], [])  # terminal holding a wait
    stray = Signal("e", "go", "k2", {}, 0.0, consumed_by="0:1")
    assert check_waits(done, [_record({"signal": "k1"})], [sig, stray])  # consumed with no commit naming it
    unconsumed = replace(sig, consumed_by=None)
    assert check_waits(done, [_record({"signal": "k1"})], [unconsumed])  # moved on without consuming


def test_child_ids_are_deterministic_and_fit_the_id_limit() -> None:
    from engine.children import child_id
    from engine.limits import check_execution_id

    assert child_id("order-1", 2, 3) == "order-1--2-3"
    long_parent = "p" * 128
    cid = child_id(long_parent, 999, 12)
    assert check_execution_id(cid) == cid and len(cid) <= 128 and cid.endswith("--999-12")
    assert child_id(long_parent, 999, 12) == cid and child_id("q" * 128, 999, 12) != cid
