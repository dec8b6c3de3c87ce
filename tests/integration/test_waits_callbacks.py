"""wait_for_callback on the real table (moto): one winner, timeouts, heartbeats, crashes.

Each test names the DESIGN.md failure-table row it proves.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.errors import CallbackNotFound, MalformedToken, PayloadTooLarge, WaitEnded
from engine.ports import FaultPoint
from loom.testing import WorkerDied, WorkflowTest
from tests.integration.waits_support import Inbox, Racing, Runs, registry

pytestmark = pytest.mark.integration


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def t(inbox: Inbox, runs: Runs) -> Iterator[WorkflowTest]:
    with WorkflowTest(registry(inbox, runs), backend="moto") as test:
        yield test


def waiting(t: WorkflowTest, workflow: str = "approve", eid: str = "e1") -> str:
    t.start(workflow, {}, execution_id=eid)
    ex = t.run(eid)
    assert ex is not None and ex.status.value == "WAITING", ex
    return eid


def test_run_stops_at_a_wait_and_the_completion_moves_it_on(t: WorkflowTest, inbox: Inbox, runs: Runs) -> None:
    waiting(t)
    ex = t.execution("e1")
    assert ex.wait is not None and ex.wait.kind.value == "callback" and ex.next_wake_at == ex.wait.deadline
    assert inbox.last.split(".")[1:4] == ["e1", "1", "1"]  # bound to execution, step, attempt
    assert ex.wait.token_hash not in inbox.last  # only the hash is stored
    done = t.complete_callback(inbox.last, {"approved": True})
    assert not done.repeat
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and ex.context["approved"] is True
    assert runs.count["after"] == 1


def test_same_completion_twice_is_one_winner_and_one_advance(t: WorkflowTest, inbox: Inbox, runs: Runs) -> None:
    """Failure table: 'the same completion delivered twice'."""
    waiting(t)
    assert not t.complete_callback(inbox.last, {"ok": 1}).repeat
    assert t.complete_callback(inbox.last, {"ok": 1}).repeat  # 200, nothing changes
    t.run("e1")
    assert t.complete_callback(inbox.last, {"ok": 1}).repeat  # still 200 after the execution moved on
    with pytest.raises(WaitEnded):
        t.complete_callback(inbox.last, {"ok": 2})  # a different body: 409
    assert runs.count["after"] == 1
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert [a.outcome.value for a in record.attempts] == ["completed"] and record.result == {"ok": 1}


@pytest.mark.parametrize("same_body", [True, False])
def test_racing_completions_give_one_winner(t: WorkflowTest, inbox: Inbox, runs: Runs, same_body: bool) -> None:
    """Failure table: 'two completions race'. B commits while A is between its read and its commit."""
    waiting(t)
    racing = Racing(t.engine.store)
    t.engine.store = racing
    token = inbox.last
    racing.before("commit_step", lambda: t.complete_callback(token, {"who": "B"}))
    if same_body:
        assert t.complete_callback(token, {"who": "B"}).repeat
    else:
        with pytest.raises(WaitEnded):
            t.complete_callback(token, {"who": "A"})
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and ex.context["who"] == "B"
    assert runs.count["after"] == 1


def test_completion_racing_the_timeout_timeout_first(t: WorkflowTest, inbox: Inbox, runs: Runs) -> None:
    """Failure table: 'completion vs timeout'. The timeout records attempt 1 failed between the
    completion's read and its commit: the commit loses (ONE_RECORD_PER_ATTEMPT), 409, history shows the timeout."""
    waiting(t)
    first = inbox.last
    racing = Racing(t.engine.store)
    t.engine.store = racing
    t.clock.advance(3600)

    racing.before("commit_step", lambda: t.engine.sweep())
    with pytest.raises(WaitEnded):
        t.complete_callback(first, {"late": True})
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert record.attempts[0].outcome.value == "failed" and record.attempts[0].error["type"] == "CallbackTimeout"
    t.run("e1")  # the retry runs submit again with a new token
    assert len(inbox.tokens) == 2 and inbox.last != first
    with pytest.raises(WaitEnded):
        t.complete_callback(first, {"late": True})  # superseded by the retry: 409
    t.complete_callback(inbox.last, {"on_time": True})
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and "late" not in ex.context and runs.count["after"] == 1


def test_completion_racing_the_timeout_completion_first(t: WorkflowTest, inbox: Inbox, runs: Runs) -> None:
    """The completion commits between the sweeper's read and its failure record: the failure is
    refused (NO_FAILURE_AFTER_COMMIT) and the sweeper rolls the completion forward."""
    waiting(t)
    token = inbox.last
    racing = Racing(t.engine.store)
    t.engine.store = racing
    t.clock.advance(3600)
    racing.before("record_failure", lambda: t.engine.store.inner.commit_step(*_commit_args(t, token)))
    t.engine.sweep()
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and ex.context["raced"] is True
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert [a.outcome.value for a in record.attempts] == ["completed"]
    assert runs.count["after"] == 1 and len(inbox.tokens) == 1


def _commit_args(t: WorkflowTest, token: str) -> tuple:
    from engine.callbacks import Action, body_hash, parse
    from engine.state import Attempt, AttemptOutcome

    tok = parse(token)
    digest = body_hash(Action.SUCCEED, {"result": {"raced": True}})
    now = t.clock.now()
    attempt = Attempt(1, now, now, AttemptOutcome.COMPLETED, detail={"token": tok.hash, "body": digest})
    return ("e1", 1, "approval", attempt, {"raced": True})


def test_a_timeout_fails_the_attempt_and_the_policy_gives_up(t: WorkflowTest, inbox: Inbox) -> None:
    waiting(t)
    ex = t.run("e1", skip_waits=True)  # two attempts of an hour each, then FAILED
    assert ex.status.value == "FAILED" and ex.error["type"] == "CallbackTimeout"
    assert len(inbox.tokens) == 2
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert [a.error["type"] for a in record.attempts] == ["CallbackTimeout", "CallbackTimeout"]


def test_a_failure_retries_with_a_new_token(t: WorkflowTest, inbox: Inbox, runs: Runs) -> None:
    waiting(t)
    first = inbox.last
    t.fail_callback(first, "Rejected", "not today")
    assert t.fail_callback(first, "Rejected", "not today").repeat  # the same failure again: 200
    with pytest.raises(WaitEnded):
        t.fail_callback(first, "Other", "different")
    t.run("e1")
    assert len(inbox.tokens) == 2
    t.complete_callback(inbox.last, {"second": True})
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert [a.outcome.value for a in record.attempts] == ["failed", "completed"]
    assert record.attempts[0].error["message"].startswith("Rejected: not today")


def test_heartbeats_push_the_heartbeat_timeout_back(t: WorkflowTest, inbox: Inbox) -> None:
    waiting(t, "beat", "hb")
    token = inbox.last
    for _ in range(5):  # 50 minutes of heartbeats every 10 minutes minus a little
        t.advance(590)
        assert not t.heartbeat(token).repeat
    assert t.status("hb") == "WAITING"
    t.advance(601)  # a missed heartbeat: the attempt fails, the retry issues a new token
    [record] = [r for r in t.history("hb") if r.name == "job"]
    assert record.attempts[0].error["type"] == "HeartbeatTimeout"
    with pytest.raises(WaitEnded):
        t.heartbeat(token)


@pytest.mark.parametrize("during", ["put_execution", "record_failure"])  # the sweeper's first write, its history write
def test_a_heartbeat_racing_the_heartbeat_timeout_gets_the_answer_the_history_gives(
    t: WorkflowTest, inbox: Inbox, runs: Runs, during: str
) -> None:
    """Failure table: 'a heartbeat races the heartbeat timeout'. The heartbeat was taken just
    before the deadline and writes while the sweeper carries the timeout out."""
    waiting(t, "beat", "hb2")
    token = inbox.last
    due = t.execution("hb2").wait.heartbeat_deadline
    racing = Racing(t.engine.store)
    t.engine.store = racing
    answers: list[object] = []

    def heartbeat_just_before_the_deadline() -> None:
        t.clock.set(due - 1)
        try:
            answers.append(t.heartbeat(token))
        except WaitEnded as exc:
            answers.append(exc)
        t.clock.set(due + 1)

    racing.before(during, heartbeat_just_before_the_deadline)
    t.clock.set(due + 1)
    t.engine.sweep()
    assert len(answers) == 1
    attempts = [a for r in t.history("hb2") if r.name == "job" for a in r.attempts if a.attempt == 1]
    timed_out = [a.error["type"] for a in attempts] == ["HeartbeatTimeout"]
    assert timed_out == (during == "record_failure") and (timed_out or not attempts)
    ex = t.execution("hb2")
    if timed_out:  # the timeout won: the heartbeat was refused and the retry is on
        assert isinstance(answers[0], WaitEnded) and ex.attempt == 2, (answers, ex)
    else:  # the heartbeat won: the wait goes on with its new deadline
        assert not isinstance(answers[0], WaitEnded) and ex.attempt == 1 and ex.wait.heartbeat_deadline > due
        assert not t.complete_callback(token, {"ok": True}).repeat


def test_a_heartbeat_after_its_deadline_is_refused_and_the_timeout_stands(t: WorkflowTest, inbox: Inbox) -> None:
    waiting(t, "beat", "hb3")
    token = inbox.last
    t.clock.set(t.execution("hb3").wait.heartbeat_deadline + 1)  # the sweeper has not run yet
    with pytest.raises(WaitEnded):
        t.heartbeat(token)
    t.engine.sweep()
    [record] = [r for r in t.history("hb3") if r.name == "job"]
    assert record.attempts[0].error["type"] == "HeartbeatTimeout" and t.execution("hb3").attempt == 2


def test_a_crash_after_the_completions_write_is_recovered_by_the_lease(
    t: WorkflowTest, inbox: Inbox, runs: Runs
) -> None:
    """Failure table: 'completion's worker dies after the advance, before the next message'."""
    waiting(t)
    t.crash(FaultPoint.AFTER_CHECKPOINT, step=1)
    with pytest.raises(WorkerDied):
        t.complete_callback(inbox.last, {"ok": True})
    assert t.status("e1") == "RUNNING" and t.queue.next_visible() is None  # advanced, no message
    ex = t.run("e1")  # the lease runs out; the sweeper re-drives step 2
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1


def test_a_crash_between_commit_and_advance_is_finished_by_the_repeat(
    t: WorkflowTest, inbox: Inbox, runs: Runs
) -> None:
    waiting(t)
    racing = Racing(t.engine.store)
    t.engine.store = racing
    token = inbox.last

    def die() -> None:
        raise WorkerDied("after the commit")

    racing.before("put_execution", die)
    with pytest.raises(WorkerDied):
        t.complete_callback(token, {"ok": True})
    assert t.status("e1") == "WAITING"  # committed in history, not advanced
    assert t.complete_callback(token, {"ok": True}).repeat  # the caller's retry finishes it
    ex = t.run("e1")
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1


def test_a_crash_between_commit_and_advance_is_finished_by_the_timeout(
    t: WorkflowTest, inbox: Inbox, runs: Runs
) -> None:
    waiting(t)
    racing = Racing(t.engine.store)
    t.engine.store = racing

    def die() -> None:
        raise WorkerDied("after the commit")

    racing.before("put_execution", die)
    with pytest.raises(WorkerDied):
        t.complete_callback(inbox.last, {"ok": True})
    ex = t.run("e1", skip_waits=True)  # the sweeper finds the committed record: roll forward, not a timeout
    assert ex.status.value == "COMPLETED" and runs.count["after"] == 1
    [record] = [r for r in t.history("e1") if r.name == "approval"]
    assert [a.outcome.value for a in record.attempts] == ["completed"]


def test_bad_tokens_are_400_or_404_and_write_nothing(t: WorkflowTest, inbox: Inbox) -> None:
    waiting(t)
    token = inbox.last
    before = t.execution("e1")
    with pytest.raises(MalformedToken):
        t.complete_callback("not-a-token", {})
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(CallbackNotFound):
        t.complete_callback(forged, {})
    with pytest.raises(CallbackNotFound):
        t.complete_callback(token.replace(".e1.", ".nobody."), {})
    with pytest.raises(CallbackNotFound):
        t.complete_callback(token.replace(".1.1.", ".1.7."), {})  # an attempt never issued
    with pytest.raises(PayloadTooLarge):
        t.complete_callback(token, {"blob": "x" * 420_000})
    assert t.execution("e1") == before and [r.name for r in t.history("e1")] == ["reserve"]


def test_submit_failing_retries_through_the_policy(inbox: Inbox, runs: Runs) -> None:
    from engine import Registry
    from engine.workflow import build_spec, wait_for_callback

    calls: list[str] = []

    def flaky_submit(ctx, token: str) -> None:
        calls.append(token)
        if len(calls) == 1:
            raise ConnectionError("the approval service is down")

    reg = Registry()
    reg.add(build_spec("flaky", [wait_for_callback("a", submit=flaky_submit)]))
    with WorkflowTest(reg, backend="moto") as test:
        test.start("flaky", {}, execution_id="f")
        test.run("f")
        assert len(calls) == 2 and calls[0] != calls[1] and test.status("f") == "WAITING"
        with pytest.raises(WaitEnded):
            test.complete_callback(calls[0], {})
        test.complete_callback(calls[1], {"fine": 1})
        assert test.run("f").status.value == "COMPLETED"


def test_two_equal_failures_racing_report_one_winner(t: WorkflowTest, inbox: Inbox) -> None:
    """Found by chaos callback_race: both equal failures saw their body recorded and both said 'won'."""
    waiting(t)
    token = inbox.last
    racing = Racing(t.engine.store)
    t.engine.store = racing
    answers = []
    racing.before("record_failure", lambda: answers.append(t.fail_callback(token, "Declined", "card")))
    answers.append(t.fail_callback(token, "Declined", "card"))
    assert sorted(a.repeat for a in answers) == [False, True]
