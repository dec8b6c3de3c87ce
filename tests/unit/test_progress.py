"""engine/progress.py: the state line, the pending steps and the execution-level events."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import progress
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, StepStatus, Wait, WaitKind
from engine.workflow import build_spec, sleep, step, wait_for_callback

pytestmark = pytest.mark.unit

T0 = 1_796_083_200.0  # 2026-12-01 00:00:00Z


def reserve(ctx):  # type: ignore[no-untyped-def]
    return {}


def charge(ctx):  # type: ignore[no-untyped-def]
    return {}


SPEC = build_spec("shop", [step(reserve), step(charge), sleep(hours=1), wait_for_callback("approve")])


def ex(**changes: object) -> Execution:
    base = Execution("e1", "shop", Status.RUNNING, 0, 1, {}, {}, T0, T0)
    return replace(base, **changes)  # type: ignore[arg-type]


def record(index: int, name: str, status: StepStatus = StepStatus.COMPLETED, **changes: object) -> StepRecord:
    return replace(StepRecord("e1", index, name, status, started_at=T0, finished_at=T0 + 2), **changes)  # type: ignore[arg-type]


def test_step_kinds_come_from_the_workflow() -> None:
    assert progress.step_kinds(SPEC) == ["step", "step", "sleep", "callback"]
    assert progress.step_kinds(None) == []


def test_sleeping_says_until_when() -> None:
    found = progress.state(ex(status=Status.SLEEPING, current_step=2, next_wake_at=T0 + 3600), SPEC, T0)
    assert found == progress.State(progress.StateKind.SLEEPING, "sleeping until 2026-12-01 01:00:00Z", T0 + 3600, 2)


def test_retrying_names_the_step_the_attempt_and_the_time() -> None:
    found = progress.state(ex(current_step=1, attempt=3, ready_at=T0 + 10), SPEC, T0)
    assert found.kind is progress.StateKind.RETRYING and found.until == T0 + 10
    assert found.reason == "retrying step charge (attempt 3) at 2026-12-01 00:00:10Z"
    # Once the retry time has passed, the attempt is (about to be) running.
    later = progress.state(ex(current_step=1, attempt=3, ready_at=T0 + 10), SPEC, T0 + 11)
    assert later == progress.State(progress.StateKind.RUNNING, "running step charge (attempt 3)", step=1)


def test_waiting_for_a_callback_shows_its_timeout() -> None:
    wait = Wait(WaitKind.CALLBACK, 3, 1, name="approve", deadline=T0 + 600)
    found = progress.state(ex(status=Status.WAITING, current_step=3, wait=wait), SPEC, T0)
    assert found.reason == "waiting for callback approve (timeout 2026-12-01 00:10:00Z)"
    assert found.until == T0 + 600
    child = Wait(WaitKind.CHILD, 3, 1, child_id="kid-1")
    assert progress.state(ex(status=Status.WAITING, current_step=3, wait=child), SPEC, T0).reason == (
        "waiting for child kid-1"
    )


def test_terminal_states_carry_the_one_line_cause() -> None:
    error = {"type": "KeyError", "message": "'user'", "traceback": [{"file": "f.py", "line": 3, "function": "g"}]}
    failed = progress.state(ex(status=Status.FAILED, current_step=1, error=error), SPEC, T0)
    assert failed.reason == "failed at step charge: KeyError: 'user' (at f.py:3 in g)"
    assert failed.step is None, "no current step once terminal"
    assert progress.state(ex(status=Status.CANCELLED, current_step=1), SPEC, T0).reason == "cancelled at step charge"
    done = progress.state(ex(status=Status.COMPENSATED, error={"type": "Boom", "message": "x"}), SPEC, T0)
    assert done.kind is progress.StateKind.COMPENSATED and done.reason == "compensated after: Boom: x"


def test_an_unknown_workflow_still_reads() -> None:
    assert progress.state(ex(current_step=4), None, T0).reason == "running step #4 (attempt 1)"
    assert progress.pending(ex(), [], None) == []


def test_pending_lists_the_steps_without_a_record_in_order() -> None:
    records = [record(0, "reserve"), record(1, "charge", StepStatus.RUNNING, finished_at=None)]
    assert progress.pending(ex(current_step=1), records, SPEC) == [
        progress.Pending(2, "sleep_1h", "sleep"),
        progress.Pending(3, "approve", "callback"),
    ]
    # The current step with no record yet is pending too; nothing once terminal.
    assert [p.index for p in progress.pending(ex(current_step=1), records[:1], SPEC)] == [1, 2, 3]
    assert progress.pending(ex(status=Status.COMPLETED, current_step=4), records, SPEC) == []
    assert progress.pending(ex(status=Status.COMPENSATING), records, SPEC) == []


def test_events_have_the_cancel_entry() -> None:
    cancelled = progress.events(ex(status=Status.CANCELLED, updated_at=T0 + 5), [])
    assert [(e.kind, e.at, e.detail) for e in cancelled] == [
        ("started", T0, {}),
        ("cancelled", T0 + 5, {"compensate": False}),
    ]
    cause = {"type": "Cancelled", "message": "cancelled with compensate", "reason": "cancelled", "at": T0 + 3}
    undone = progress.events(ex(status=Status.COMPENSATED, error=cause, updated_at=T0 + 9), [])
    assert [(e.kind, e.at) for e in undone] == [("started", T0), ("cancelled", T0 + 3), ("compensated", T0 + 9)]
    assert undone[1].detail == {"compensate": True}


def test_events_of_a_failure_carry_its_cause() -> None:
    attempt = Attempt(1, T0, T0 + 1, AttemptOutcome.FAILED, {"type": "Boom", "message": "no"})
    failed = ex(status=Status.FAILED, error={"type": "Boom", "message": "no"}, updated_at=T0 + 1)
    found = progress.events(failed, [record(0, "reserve", StepStatus.FAILED, attempts=(attempt,))])
    assert found[-1] == progress.Event("failed", T0 + 1, {"error": "Boom: no"})
