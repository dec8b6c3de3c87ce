"""escalation_for (pure): a wait of any kind with ``catch`` is caught as a step is, once."""

from __future__ import annotations

from typing import Any

import pytest

from engine.errors import WorkflowDefinitionError
from engine.escalation import Escalation, escalation_for
from engine.state import Execution, Status
from engine.workflow import (
    StepContext,
    StepSpec,
    build_spec,
    child,
    step,
    wait_for_callback,
    wait_for_signal,
    wait_until,
)


def handler(ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
    return {"handled": error["type"]}


def undo(ctx: StepContext) -> None:
    return None


def check(ctx: StepContext) -> None:
    return None


def work(ctx: StepContext) -> None:
    return None


WAITS = {
    "callback": lambda **kw: wait_for_callback("approval", timeout=60, **kw),
    "signal": lambda **kw: wait_for_signal("go", timeout=60, **kw),
    "poll": lambda **kw: wait_until(check, every=10, timeout=60, **kw),
    "child": lambda **kw: child("kid", **kw),
}


def execution(status: Status, **kw: Any) -> Execution:
    base: dict[str, Any] = dict(
        id="e", workflow="w", status=status, current_step=1, version=3, input={}, context={}, created_at=0, updated_at=0
    )
    return Execution(**{**base, **kw})


def spec_with(wait: StepSpec, *, saga: bool = False):
    first = step(work, name="first", compensate=undo if saga else None)
    return build_spec("w", [first, wait, step(work, name="last")])


@pytest.mark.parametrize("kind", sorted(WAITS))
@pytest.mark.parametrize("status", [Status.RUNNING, Status.WAITING])
def test_a_wait_with_catch_that_fails_for_good_is_caught(kind: str, status: Status) -> None:
    wait = WAITS[kind](catch=handler)
    assert wait.catch is handler
    nxt = escalation_for(spec_with(wait, saga=True), execution(status), wait.name)
    assert nxt.to is Escalation.CATCH, "caught before the saga's undo is considered"


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_wait_without_catch_fails_or_compensates_as_before(kind: str) -> None:
    wait = WAITS[kind]()
    assert escalation_for(spec_with(wait), execution(Status.WAITING), wait.name).to is Escalation.FAIL
    nxt = escalation_for(spec_with(wait, saga=True), execution(Status.WAITING), wait.name)
    assert (nxt.to, nxt.first) == (Escalation.COMPENSATE, 0)


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_wait_whose_handler_failed_for_good_is_not_caught_twice(kind: str) -> None:
    wait = WAITS[kind](catch=handler)
    caught = execution(Status.RUNNING, catching={"type": "CallbackTimeout"})
    assert escalation_for(spec_with(wait), caught, wait.name).to is Escalation.FAIL
    nxt = escalation_for(spec_with(wait, saga=True), caught, wait.name)
    assert (nxt.to, nxt.first) == (Escalation.COMPENSATE, 0)


@pytest.mark.parametrize("status", [Status.COMPENSATING, Status.CANCELLED, Status.FAILED, Status.SLEEPING])
def test_only_a_running_or_waiting_execution_is_caught(status: Status) -> None:
    wait = WAITS["callback"](catch=handler)
    assert escalation_for(spec_with(wait), execution(status), wait.name).to is not Escalation.CATCH


def test_a_failure_of_another_step_name_is_not_caught() -> None:
    wait = WAITS["signal"](catch=handler)
    assert escalation_for(spec_with(wait), execution(Status.WAITING), "other").to is Escalation.FAIL


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_catch_that_is_not_callable_is_refused_at_the_definition(kind: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match="catch"):
        WAITS[kind](catch="not a function")


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_a_waits_catch_is_described(kind: str) -> None:
    described = spec_with(WAITS[kind](catch=handler)).describe()["steps"][1]
    assert described["kind"] == kind and described["catch"] == "handler"
    assert "catch" not in spec_with(WAITS[kind]()).describe()["steps"][1]
