"""Lost write answers: DynamoDB applied a conditional write, its answer was lost, and
botocore's retry sent it again. The retry fails its own condition; the engine must
take that for its own write, not for another writer's (DESIGN.md, "Write tokens").
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, Status, step
from engine.config import EngineConfig
from engine.log import configure
from engine.messages import MessageKind, StepMessage
from engine.state import AttemptOutcome
from tests.integration.engine_support import (
    LostAnswers,
    Recorder,
    Rig,
    WriteKind,
    add_workflow,
    build_rig,
    dead_letters,
)
from tests.logs import json_lines

pytestmark = pytest.mark.integration


class Flaky(Exception):
    pass


def fail_first(ctx: Any) -> None:
    if ctx.attempt == 1:
        raise Flaky("attempt 1 fails")


def refuse(ctx: Any) -> None:
    raise NonRetryableError("card declined")


@pytest.fixture
def reg(rec: Recorder) -> Registry:
    reg = Registry()
    add_workflow(reg, "two", [rec.step("a"), rec.step("b")])
    add_workflow(
        reg, "once", [step(rec.step("pay"), semantics="at_most_once", retry=RetryPolicy(max_attempts=1)), rec.step("b")]
    )
    add_workflow(
        reg, "flaky", [step(rec.step("f", fail_first), retry=RetryPolicy(base=5, jitter="none")), rec.step("g")]
    )
    add_workflow(reg, "doomed", [step(rec.step("d", refuse))])
    return reg


@pytest.fixture
def lost(rig: Rig) -> LostAnswers:
    return LostAnswers(rig.aws["dynamodb"])


@pytest.fixture
def logs() -> io.StringIO:
    """The engine's log lines at INFO (the autouse fixture sets the level back for the next test)."""
    stream = io.StringIO()
    configure("INFO", stream)
    return stream


@pytest.fixture
def rig(aws, make_engine, clock, reg) -> Rig:
    # Retention off: the calm and the lossy run share the table and the clock, and a sweep in the
    # second would stamp the first for retention (test_retention.py and test_write_sites.py own that).
    return build_rig(aws, make_engine, clock, reg, config=EngineConfig(retention_seconds=0))


def settle(rig: Rig, execution_id: str) -> None:
    """Deliver everything; when the queue is empty, let time run to the next wake and sweep."""
    for _ in range(10):
        rig.driver.pump()
        ex = rig.engine.get(execution_id)
        if ex.terminal:
            return
        assert ex.next_wake_at is not None
        rig.clock.set(max(rig.clock.now(), ex.next_wake_at))
        rig.engine.sweep()
    raise AssertionError(f"{execution_id} never ended: {rig.engine.get(execution_id)}")


def plain(rig: Rig, workflow: str, execution_id: str) -> None:
    rig.engine.start(workflow, {}, execution_id=execution_id)
    settle(rig, execution_id)


def cancelled(rig: Rig, workflow: str, execution_id: str) -> None:
    rig.engine.start(workflow, {}, execution_id=execution_id)
    rig.engine.cancel(execution_id)
    settle(rig, execution_id)


def message_lost(rig: Rig, workflow: str, execution_id: str) -> None:
    """The first message never reaches the queue: the sweeper claims the execution after the lease."""
    rig.queue.fail_sends = 1
    rig.engine.start(workflow, {}, execution_id=execution_id)
    settle(rig, execution_id)


@dataclass(frozen=True)
class Case:
    workflow: str
    drive: Callable[[Rig, str, str], None]


CASES = {
    WriteKind.START: Case("two", plain),
    WriteKind.START_MARK: Case("once", plain),
    WriteKind.COMMIT: Case("two", plain),
    WriteKind.FAILURE: Case("flaky", plain),
    WriteKind.ADVANCE: Case("two", plain),
    WriteKind.RETRY: Case("flaky", plain),
    WriteKind.FAIL: Case("doomed", plain),
    WriteKind.CANCEL: Case("two", cancelled),
    WriteKind.CLAIM: Case("two", message_lost),
}


def run(rig: Rig, rec: Recorder, logs: io.StringIO, case: Case, execution_id: str) -> dict[str, Any]:
    """Drive one execution; everything about how it ended that a lost answer must not change,
    down to the store calls it cost and what the engine logged (no "lost race" path taken)."""
    began, calls = rig.clock.now(), Counter(rig.store.calls)
    case.drive(rig, case.workflow, execution_id)
    ex = rig.engine.get(execution_id)
    return {
        "status": ex.status,
        "context": ex.context,
        "error": None if ex.error is None else (ex.error["type"], ex.error["reason"]),
        "version": ex.version,
        "elapsed": rig.clock.now() - began,
        "store_calls": rig.store.calls - calls,
        "events": [line["event"] for line in json_lines(logs.getvalue()) if line.get("execution_id") == execution_id],
        "runs": [(i, a) for e, i, a in rec.runs if e == execution_id],
        "history": [
            (r.index, r.status, [(a.attempt, a.outcome) for a in r.attempts]) for r in rig.engine.history(execution_id)
        ],
        "dead_letters": sum(1 for d in rig.queue.dead_letters if d.get("execution_id") == execution_id),
    }


def test_the_cases_cover_every_write_kind() -> None:
    assert set(CASES) == set(WriteKind)


@pytest.mark.parametrize("kind", list(WriteKind), ids=str)
def test_an_execution_ends_the_same_when_a_write_answer_is_lost(rig: Rig, rec: Recorder, lost: LostAnswers, logs, kind):
    expected = run(rig, rec, logs, CASES[kind], "calm")
    lost.arm(kind)
    got = run(rig, rec, logs, CASES[kind], "lossy")
    assert lost.lost == [kind], "the fault was not injected: the scenario never made that write"
    assert got == expected
    rig.store.assert_versions_contiguous()


def test_a_lost_start_mark_answer_does_not_fail_an_at_most_once_step_that_never_ran(rig, rec, lost):
    """Symptom (a): max_attempts=1, and the worker took its own mark for another's."""
    lost.arm(WriteKind.START_MARK)
    rig.engine.start("once", {}, execution_id="mark")
    settle(rig, "mark")
    assert rig.status("mark") == "COMPLETED"
    assert rec.count("mark", 0) == 1
    outcomes = [a.outcome for r in rig.engine.history("mark") for a in r.attempts]
    assert AttemptOutcome.WORKER_LOST not in outcomes
    assert dead_letters(rig.aws) == []


def test_a_lost_advance_answer_still_sends_the_next_step_at_once(rig, lost):
    """Symptom (b): the next message was never sent and the run waited for the lease."""
    lost.arm(WriteKind.ADVANCE)
    began = rig.clock.now()
    rig.engine.start("two", {}, execution_id="adv")
    rig.driver.pump()
    assert rig.status("adv") == "COMPLETED", "finished without the sweeper"
    assert rig.clock.now() == began, "no engine time spent waiting for a lease"
    assert StepMessage("adv", 1, 1, MessageKind.STEP) in [s.message for s in rig.queue.sent]


def test_a_lost_create_answer_still_reports_created_and_sends_the_first_message(rig, lost):
    """Symptom (c): start said created=False and sent nothing."""
    lost.arm(WriteKind.START)
    ex, created = rig.engine.start("two", {}, execution_id="new")
    assert created is True and ex.status is Status.RUNNING
    assert [s.message for s in rig.queue.sent] == [StepMessage("new", 0, 1, MessageKind.STEP)]
    again, created_again = rig.engine.start("two", {}, execution_id="new")
    assert created_again is False and again.version == 1, "a real second start is still not a creation"


def test_a_lost_cancel_answer_is_a_successful_cancel(rig, lost):
    """Symptom (d): the cancel landed, then answered AlreadyTerminal (409)."""
    rig.engine.start("two", {}, execution_id="stop")
    lost.arm(WriteKind.CANCEL)
    ex = rig.engine.cancel("stop")
    assert ex.status is Status.CANCELLED and ex.version == 2
    assert rig.engine.get("stop") == ex
