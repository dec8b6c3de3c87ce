"""catch= on every wait kind, on the real table (moto): a callback, a signal, a poll and a child
that fail for good run their handler once, and the workflow goes on with its result.

Each test names the DESIGN.md failure-table row it proves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy
from engine.children import child_id, notify_parent
from engine.errors import AlreadyTerminal, WaitEnded
from engine.ports import FaultPoint
from engine.state import StepStatus
from engine.workflow import NOT_YET, StepContext, build_spec, child, wait_for_callback, wait_for_signal, wait_until
from loom.testing import WorkflowTest
from tests.integration.waits_support import Inbox, Runs

pytestmark = pytest.mark.integration

TWICE = RetryPolicy(max_attempts=2, base=1, jitter="none")
ONCE = RetryPolicy(max_attempts=1)


class Handled:
    """The catch handler: records each run (idempotency key, attempt, error) and falls back."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, dict[str, Any]]] = []

    def __call__(self, ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
        self.runs.append((ctx.idempotency_key, ctx.attempt, dict(error)))
        return {"fallback": error["type"], "from": ctx.step_name}

    @property
    def types(self) -> list[str]:
        return [error["type"] for _, _, error in self.runs]


def never(ctx: StepContext) -> Any:
    return NOT_YET


def broken(ctx: StepContext) -> Any:
    raise NonRetryableError("the status page is gone")


def fails(ctx: StepContext) -> None:
    raise RuntimeError("the child's work failed")


def build(inbox: Inbox, runs: Runs, handled: Handled) -> Registry:
    reg = Registry()
    after = runs.step("after")
    callback = wait_for_callback("approval", submit=inbox.submit, timeout=3600, retry=TWICE, catch=handled)
    reg.add(build_spec("cb", [runs.step("reserve"), callback, after]))
    beat = wait_for_callback("job", submit=inbox.submit, timeout=86_400, heartbeat_timeout=600, catch=handled)
    reg.add(build_spec("hb", [beat, after], ONCE))
    # Two attempts: a worker lost in the handler counts as a failed attempt of it, as in a step's.
    # The signal's timeout is retried only because the wait names a policy (retry.for_wait).
    reg.add(build_spec("sig", [wait_for_signal("shipped", timeout=7200, catch=handled, retry=TWICE), after], TWICE))
    reg.add(build_spec("poll", [wait_until(never, every=60, timeout=300, catch=handled), after], ONCE))
    reg.add(build_spec("poll_broken", [wait_until(broken, every=60, catch=handled), after], ONCE))
    reg.add(build_spec("bad_kid", [fails], ONCE))
    reg.add(build_spec("kin", [child("bad_kid", catch=handled), after], TWICE))
    return reg


@pytest.fixture
def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def handled() -> Handled:
    return Handled()


@pytest.fixture
def t(inbox: Inbox, runs: Runs, handled: Handled) -> Iterator[WorkflowTest]:
    with WorkflowTest(build(inbox, runs, handled), backend="moto") as test:
        yield test


def caught(t: WorkflowTest, eid: str, name: str, runs: Runs, handled: Handled, error: str) -> None:
    """The wait failed for good, its handler ran once, and the workflow went on with its result."""
    ex = t.execution(eid)
    assert ex.status.value == "COMPLETED", ex.error
    assert ex.catching is None and ex.wait is None and ex.context["fallback"] == error
    assert handled.types == [error], "the handler ran once, with the wait's error"
    assert runs.count["after"] == 1
    records = {r.name: r for r in t.history(eid)}
    assert records[name].status is StepStatus.FAILED, "the history keeps the wait's failure"
    catch = records[f"{name}#catch"]
    assert catch.status is StepStatus.COMPLETED and catch.result == {"fallback": error, "from": name}
    assert [a.outcome.value for a in catch.attempts] == ["completed"], "committed once"
    assert [d for d in t.dead_letters if d["execution_id"] == eid] == [], "caught: nothing parked"


def test_a_callback_timeout_is_caught_after_the_retries_and_a_late_completion_is_refused(
    t: WorkflowTest, inbox: Inbox, runs: Runs, handled: Handled
) -> None:
    """Failure table: 'a caught wait fails for good (callback timeout)' and 'a late completion after the catch'."""
    t.start("cb", {}, execution_id="c1")
    t.run("c1", skip_waits=True)
    caught(t, "c1", "approval", runs, handled, "CallbackTimeout")
    assert len(inbox.tokens) == 2, "the policy's retries ran out before the catch"
    key, attempt, error = handled.runs[0]
    assert (key, attempt) == ("c1:1:catch", 3) and error["step_name"] == "approval"
    version = t.execution("c1").version
    for token in inbox.tokens:
        with pytest.raises(WaitEnded):
            t.complete_callback(token, {"late": True})
        with pytest.raises(WaitEnded):
            t.heartbeat(token)
    t.run()
    ex = t.execution("c1")
    assert ex.version == version and "late" not in ex.context and runs.count["after"] == 1


def test_a_late_completion_while_the_handler_is_pending_is_refused_and_loses_nothing(
    t: WorkflowTest, inbox: Inbox, runs: Runs, handled: Handled
) -> None:
    """Failure table: 'a late completion after the catch'. The catch has begun (its message is
    queued, the handler not yet run): the completion is 409 and the handler's result stands."""
    t.start("cb", {}, execution_id="c2")
    t.run("c2")
    t.fail_callback(inbox.last, "Rejected", "first")  # attempt 1 fails: the retry issues a new token
    t.run("c2")
    t.fail_callback(inbox.last, "Rejected", "for good")
    ex = t.execution("c2")
    assert ex.status.value == "RUNNING" and ex.catching is not None and ex.catching["type"] == "CallbackFailed"
    assert t.fail_callback(inbox.last, "Rejected", "for good").repeat, "the same failure again: 200, nothing new"
    with pytest.raises(WaitEnded):
        t.complete_callback(inbox.last, {"late": True})
    with pytest.raises(WaitEnded):
        t.fail_callback(inbox.last, "Other", "different")
    t.run("c2")
    caught(t, "c2", "approval", runs, handled, "CallbackFailed")
    assert "for good" in handled.runs[0][2]["message"]
    assert "late" not in t.execution("c2").context


def test_a_missed_heartbeat_is_caught(t: WorkflowTest, inbox: Inbox, runs: Runs, handled: Handled) -> None:
    """Failure table: 'a caught wait fails for good (heartbeat timeout)'."""
    t.start("hb", {}, execution_id="h1")
    t.run("h1")
    t.advance(601)
    t.run("h1")
    caught(t, "h1", "job", runs, handled, "HeartbeatTimeout")


def test_a_signal_timeout_is_caught_and_a_late_signal_is_refused(t: WorkflowTest, runs: Runs, handled: Handled) -> None:
    """Failure table: 'a caught wait fails for good (signal timeout)'."""
    t.start("sig", {}, execution_id="s1")
    t.run("s1", skip_waits=True)
    caught(t, "s1", "signal_shipped", runs, handled, "SignalTimeout")
    with pytest.raises(AlreadyTerminal):
        t.signal("s1", "shipped", {"late": True})


@pytest.mark.parametrize(("workflow", "error"), [("poll", "PollTimeout"), ("poll_broken", "NonRetryableError")])
def test_a_poll_that_times_out_or_whose_check_fails_is_caught(
    t: WorkflowTest, runs: Runs, handled: Handled, workflow: str, error: str
) -> None:
    """Failure table: 'a caught wait fails for good (poll)'."""
    t.start(workflow, {}, execution_id="p1")
    t.run("p1")
    caught(t, "p1", "never" if workflow == "poll" else "broken", runs, handled, error)


def test_a_failed_child_is_caught_and_its_late_notice_is_ignored(t: WorkflowTest, runs: Runs, handled: Handled) -> None:
    """Failure table: 'a caught wait fails for good (child FAILED)' and 'a child's late end notice'."""
    t.start("kin", {}, execution_id="k1")
    t.run("k1")
    caught(t, "k1", "child_bad_kid", runs, handled, "ChildFailed")
    assert [t.status(child_id("k1", 0, a)) for a in (1, 2)] == ["FAILED", "FAILED"], "retried, then caught"
    before = t.execution("k1")
    for attempt in (1, 2):
        notify_parent(t.engine, t.execution(child_id("k1", 0, attempt)))
    t.run()
    after = t.execution("k1")  # the late notices changed nothing (a sweep may stamp it for retention)
    assert (after.status, after.current_step, after.context) == (before.status, before.current_step, before.context)
    assert len(handled.runs) == 1 and runs.count["after"] == 1


def test_a_notice_of_the_failed_child_racing_the_catch_runs_the_handler_once(
    t: WorkflowTest, runs: Runs, handled: Handled
) -> None:
    """Failure table: 'a child's late end notice'. Duplicate deliveries of every message (the
    child's notice included) while the parent is caught: one handler commit, one advance."""
    t.duplicate_next_deliveries(50)
    t.start("kin", {}, execution_id="k2")
    t.run("k2")
    assert t.status("k2") == "COMPLETED" and runs.count["after"] == 1
    [catch] = [r for r in t.history("k2") if r.name.endswith("#catch")]
    assert [a.outcome.value for a in catch.attempts] == ["completed"]


@pytest.mark.parametrize("point", [FaultPoint.BEFORE_STEP, FaultPoint.AFTER_STEP])
def test_a_crash_in_a_waits_handler_is_recovered_and_commits_once(
    t: WorkflowTest, runs: Runs, handled: Handled, point: FaultPoint
) -> None:
    """Failure table: 'the worker dies in a wait's catch handler'."""
    t.crash(point, step="signal_shipped", phase="catch")
    t.start("sig", {}, execution_id="s2")
    t.run("s2", skip_waits=True)
    assert t.faults.fired and t.deaths == 1
    ex = t.execution("s2")
    assert ex.status.value == "COMPLETED" and ex.context["fallback"] == "SignalTimeout"
    # Killed before it ran: it runs once; killed after it ran, before its commit: it runs again
    # (at least once, as a step), and its result is committed once.
    assert len(handled.runs) == (1 if point is FaultPoint.BEFORE_STEP else 2)
    assert {key for key, _, _ in handled.runs} == {"s2:0:catch"}
    assert [a for _, a, _ in handled.runs][-1] == 4, "the lost attempt 3 counted; attempt 4 ran it"
    [catch] = [r for r in t.history("s2") if r.name == "signal_shipped#catch"]
    assert [a.outcome.value for a in catch.attempts] == ["worker_lost", "completed"], "committed once"
    assert catch.result == {"fallback": "SignalTimeout", "from": "signal_shipped"} and runs.count["after"] == 1
    assert not t.dead_letters
