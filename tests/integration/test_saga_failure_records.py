"""A compensation's or a catch's recorded failure: too full a record, a lost state write.

A record written before the bounds existed (engine/limits.py) may have no room left for a
full error (message and traceback): DynamoDB refuses that update as too large. The failure
is then recorded briefly, as a forward step's is (``attempts.record_failure``), the attempt
still counts, and the execution goes on as its policy says.

The store refuses here at the port (the wrapped adapter raises ``PayloadTooLarge`` for a
full error once the record holds an attempt, as the real one does for DynamoDB's ValidationException):
moto cannot hold such a record, as it counts an attribute's old and new value together
when an update replaces it, so an update of an ``attempts`` list over ~200 KB always fails.

A failure recorded whose state write (the retry, or the end) was then lost is followed from
its record on the redelivery (``attempts.follow_failure``): the body does not run again.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, Status, step
from engine.errors import PayloadTooLarge
from engine.state import Attempt, Execution, StepStatus
from tests.integration.engine_support import add_workflow, dead_letters

pytestmark = pytest.mark.integration

TWICE = RetryPolicy(max_attempts=2, base=1, jitter="none")
LONG = "undo went wrong: " + "€" * 2_000


class Body:
    """A compensation or a catch handler that always fails, with a long message."""

    def __init__(self) -> None:
        self.attempts: list[int] = []

    def __call__(self, ctx: Any, *_: Any) -> None:
        self.attempts.append(ctx.attempt)
        raise RuntimeError(LONG)


class Flaky(Body):
    """Fails its first attempt only."""

    def __call__(self, ctx: Any, *_: Any) -> dict[str, Any]:
        if not self.attempts:
            super().__call__(ctx)
        self.attempts.append(ctx.attempt)
        return {"done": ctx.attempt}


def refuse(ctx):
    raise NonRetryableError("no courier")


def reserve(ctx):
    return {"reserved": True}


@pytest.fixture
def bodies():
    return {"undo": Body(), "catch": Body(), "flaky_undo": Flaky(), "flaky_catch": Flaky()}


@pytest.fixture
def reg(bodies):
    reg = Registry()
    saga = [step(reserve, compensate=bodies["undo"], compensate_retry=TWICE), step(refuse, name="ship")]
    add_workflow(reg, "saga", saga, retry=TWICE)
    add_workflow(reg, "caught", [step(refuse, name="ship", catch=bodies["catch"])], retry=TWICE)
    flaky = [step(reserve, compensate=bodies["flaky_undo"], compensate_retry=TWICE), step(refuse, name="ship")]
    add_workflow(reg, "saga_flaky", flaky, retry=TWICE)
    add_workflow(reg, "caught_flaky", [step(refuse, name="ship", catch=bodies["flaky_catch"])], retry=TWICE)
    return reg


def too_full_after_one(rig, monkeypatch, record: str) -> list[int]:
    """Once it holds one attempt, history record ``record`` has no room for a full error."""
    real = rig.store.inner.record_failure
    first: list[int] = []
    refused: list[int] = []

    def record_failure(execution_id: str, index: int, name: str, attempt: Attempt, *, final: bool) -> bool:
        first.extend([] if first or name != record else [attempt.attempt])
        if name == record and attempt.attempt > first[0] and "traceback" in (attempt.error or {}):
            refused.append(attempt.attempt)
            raise PayloadTooLarge("table: Item size to update has exceeded the maximum allowed size")
        return real(execution_id, index, name, attempt, final=final)

    monkeypatch.setattr(rig.store.inner, "record_failure", record_failure)
    return refused


def assert_brief_second_attempt(rig, execution_id: str, index: int, name: str, attempts: list[int]) -> None:
    record = rig.engine.store.get_step(execution_id, index, name)
    assert record.status is StepStatus.FAILED
    assert [a.attempt for a in record.attempts] == attempts, "the brief attempt is still counted"
    full, brief = record.attempts[0].error, record.attempts[1].error
    assert "traceback" in full, "the first failure had room for its full error"
    assert set(brief) == {"type", "message"} and brief["type"] == "RuntimeError"
    assert brief["message"].startswith("undo went wrong") and len(brief["message"].encode()) <= 200
    assert record.error == brief


def test_a_compensations_failure_too_large_for_its_record_is_recorded_briefly(rig, bodies, monkeypatch):
    refused = too_full_after_one(rig, monkeypatch, "reserve#compensate")
    rig.engine.start("saga", {}, execution_id="undo-full")
    rig.driver.pump()
    assert bodies["undo"].attempts == [1, 2] and refused == [2]
    assert_brief_second_attempt(rig, "undo-full", 0, "reserve#compensate", [1, 2])
    ex = rig.engine.get("undo-full")
    assert ex.status.value == "COMPENSATION_FAILED", "the execution still ends as its policy says"
    assert ex.error["compensation"]["type"] == "RuntimeError"
    (letter,) = dead_letters(rig.aws)
    assert letter["loom"] == "compensation_failed" and letter["execution_id"] == "undo-full"


def test_a_catch_handlers_failure_too_large_for_its_record_is_recorded_briefly(rig, bodies, monkeypatch):
    refused = too_full_after_one(rig, monkeypatch, "ship#catch")
    rig.engine.start("caught", {}, execution_id="catch-full")
    rig.driver.pump()
    # The handler's attempts go on from the step's: attempt 1 was the step's own.
    assert bodies["catch"].attempts == [2, 3] and refused == [3]
    assert_brief_second_attempt(rig, "catch-full", 0, "ship#catch", [2, 3])
    ex = rig.engine.get("catch-full")
    assert ex.status.value == "FAILED" and ex.error["type"] == "RuntimeError"
    (letter,) = dead_letters(rig.aws)
    assert letter["loom"] == "failed" and letter["execution_id"] == "catch-full"


def lose_one_write(rig, which) -> list[Execution]:
    """The first state write ``which`` picks fails (throttled) after its failure was recorded."""
    lost: list[Execution] = []

    def fail(ex: Execution) -> bool:
        if not lost and which(ex):
            lost.append(ex)
            return True
        return False

    rig.store.fail_put = fail
    return lost


def test_a_compensation_retry_whose_state_write_was_lost_is_followed_from_its_record(rig, bodies):
    lost = lose_one_write(rig, lambda ex: ex.status is Status.COMPENSATING and ex.attempt == 2)
    rig.engine.start("saga_flaky", {}, execution_id="undo-follow")
    rig.driver.pump()
    assert len(lost) == 1 and bodies["flaky_undo"].attempts == [1, 2], "attempt 1 is not run again"
    assert rig.status("undo-follow") == "COMPENSATED"
    record = rig.engine.store.get_step("undo-follow", 0, "reserve#compensate")
    assert [(a.attempt, a.outcome.value) for a in record.attempts] == [(1, "failed"), (2, "completed")]


def test_a_compensations_end_whose_state_write_was_lost_is_followed_from_its_record(rig, bodies):
    lost = lose_one_write(rig, lambda ex: ex.status is Status.COMPENSATION_FAILED)
    rig.engine.start("saga", {}, execution_id="undo-gave-up")
    rig.driver.pump()
    assert len(lost) == 1 and bodies["undo"].attempts == [1, 2], "no attempt runs after the final one"
    ex = rig.engine.get("undo-gave-up")
    assert ex.status is Status.COMPENSATION_FAILED and ex.error["compensation"]["type"] == "RuntimeError"
    # Dead-lettered before each try of the lost write: twice at worst, as the design says.
    assert [d["loom"] for d in dead_letters(rig.aws)] == ["compensation_failed"] * 2


def test_a_catch_retry_whose_state_write_was_lost_is_followed_from_its_record(rig, bodies):
    lost = lose_one_write(rig, lambda ex: ex.catching is not None and ex.attempt == 3)
    rig.engine.start("caught_flaky", {}, execution_id="catch-follow")
    rig.driver.pump()
    assert len(lost) == 1 and bodies["flaky_catch"].attempts == [2, 3], "attempt 2 is not run again"
    ex = rig.engine.get("catch-follow")
    assert ex.status is Status.COMPLETED and ex.context["done"] == 3
