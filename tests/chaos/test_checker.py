"""The invariant checker must be able to fail: feed it broken histories and see the violations."""

from __future__ import annotations

import pytest

from chaos.invariants import Expect, Snapshot, check_execution, check_versions, minimum_transitions
from engine.state import Attempt, Execution, Status, StepRecord, StepStatus

pytestmark = pytest.mark.chaos

EID = "chaos-unit-1"


def done(i: int, *attempts: Attempt, result: dict | None = None) -> StepRecord:
    return StepRecord(
        EID,
        i,
        f"s{i}",
        StepStatus.COMPLETED,
        tuple(attempts),
        result if result is not None else {f"s{i}_key": f"{EID}:{i}"},
    )


def ok(n: int = 1) -> Attempt:
    return Attempt(n, 1.0, 2.0, "completed")


def completed_execution(steps: int = 3, version: int | None = None) -> Execution:
    context: dict = {"x": 1}
    for i in range(steps):
        context[f"s{i}_key"] = f"{EID}:{i}"
    return Execution(EID, "w", Status.COMPLETED, steps, version or steps + 1, {"x": 1}, context, 0.0, 1.0)


def ledger(steps: int = 3, **override: dict) -> dict:
    rows = {f"{EID}:{i}": {"effect": {"kind": "k"}, "runs": 1, "duplicates": 0} for i in range(steps)}
    rows.update(override)
    return rows


def snap(version: int, step: int, status: str = "RUNNING", t: float = 0.0) -> Snapshot:
    return Snapshot(version, status, step, 1, 0, 100.0, t)


def test_a_clean_run_passes() -> None:
    history = [done(i, ok()) for i in range(3)]
    trail = [snap(1, 0), snap(2, 1), snap(3, 2)]
    report = check_execution(completed_execution(), history, ledger(), trail, Expect())
    assert report.ok, report.violations
    assert report.transitions_accounted == 4 and report.extra_writes == 0


def test_double_commit_is_a_violation() -> None:
    history = [done(0, ok()), done(1, ok(1), Attempt(1, 1.5, 2.5, "completed")), done(2, ok())]
    report = check_execution(completed_execution(), history, ledger(), [], Expect())
    assert any("2 committed results" in v for v in report.violations)


def test_version_gap_that_skips_a_step_is_a_violation() -> None:
    assert any("transition skipped" in v for v in check_versions([snap(2, 0), snap(3, 2)], None))


def test_version_going_backwards_or_naming_two_states_is_a_violation() -> None:
    assert any("backwards" in v for v in check_versions([snap(5, 2), snap(4, 2)], None))
    assert any("two different states" in v for v in check_versions([snap(3, 1), snap(3, 2)], None))


def test_final_version_below_the_accounted_transitions_is_a_violation() -> None:
    history = [done(i, ok()) for i in range(3)]
    report = check_execution(completed_execution(version=2), history, ledger(), [], Expect())
    assert any("below the 4 transitions" in v for v in report.violations)


def test_missing_or_foreign_effect_is_a_violation() -> None:
    history = [done(i, ok()) for i in range(3)]
    rows = ledger()
    del rows[f"{EID}:1"]
    report = check_execution(completed_execution(), history, rows, [], Expect())
    assert any("never landed" in v for v in report.violations)
    rows = ledger(**{f"{EID}:2": {"effect": {"k": 1}, "runs": 1, "duplicates": 1}})
    report = check_execution(completed_execution(), history, rows, [], Expect())
    assert any("applied 2 times in 1 run" in v for v in report.violations)


def test_context_that_disagrees_with_the_committed_results_is_a_violation() -> None:
    history = [done(0, ok()), done(1, ok(), result={"s1_key": "someone-else"}), done(2, ok())]
    report = check_execution(completed_execution(), history, ledger(), [], Expect(effectful=False))
    assert any("context is not its input merged" in v for v in report.violations)


def test_wrong_terminal_state_and_stuck_executions_are_violations() -> None:
    history = [done(0, ok())]
    running = Execution(
        EID, "w", Status.RUNNING, 1, 3, {"x": 1}, {"x": 1, "s0_key": f"{EID}:0"}, 0.0, 1.0, next_wake_at=50.0
    )
    report = check_execution(running, history, ledger(1), [], Expect(), now=100.0, tolerance=5)
    assert any("ended RUNNING, expected COMPLETED" in v for v in report.violations)
    assert any("overdue" in v for v in report.violations)


def test_failed_execution_needs_its_error_recorded() -> None:
    failed = Execution(EID, "w", Status.FAILED, 0, 3, {}, {}, 0.0, 1.0, error=None)
    record = StepRecord(
        EID,
        0,
        "s0",
        StepStatus.FAILED,
        (Attempt(1, 1, 2, "failed", {"type": "X"}, 0.5), Attempt(2, 3, 4, "failed", {"type": "X"})),
        error={"type": "X"},
    )
    report = check_execution(failed, [record], {}, [], Expect(status="FAILED"))
    assert report.violations == ["FAILED without an error on the execution"]
    assert minimum_transitions(failed, [record]) == 3


def test_an_attempt_number_recorded_twice_is_a_violation() -> None:
    # A duplicate that took a live attempt for lost: attempt 1 both WorkerLost and completed.
    lost = Attempt(1, 1.0, 1.5, "worker_lost", {"type": "WorkerLost"}, 0.5)
    history = [done(0, ok()), done(1, lost, ok(1)), done(2, ok())]
    report = check_execution(completed_execution(), history, ledger(), [], Expect())
    assert any("records an attempt number twice: [1, 1]" in v for v in report.violations)
    retried = [done(0, ok()), done(1, Attempt(1, 1, 2, "failed", {"type": "X"}, 0.5), ok(2)), done(2, ok())]
    assert check_execution(completed_execution(version=5), retried, ledger(), [], Expect()).ok


def test_attempts_out_of_order_are_a_violation() -> None:
    history = [done(0, ok()), done(1, Attempt(2, 1, 2, "failed", {"type": "X"}, 0.5), ok(1)), done(2, ok())]
    report = check_execution(completed_execution(version=5), history, ledger(), [], Expect())
    assert any("attempts out of order: [2, 1]" in v for v in report.violations)


def test_a_step_behind_the_execution_must_be_committed() -> None:
    history = [done(0, ok()), StepRecord(EID, 1, "s1", StepStatus.RUNNING, ()), done(2, ok())]
    report = check_execution(completed_execution(), history, ledger(), [], Expect())
    assert any("step 1 is behind the execution" in v for v in report.violations)


def test_completing_when_a_failure_was_expected_is_a_violation() -> None:
    history = [done(i, ok()) for i in range(3)]
    report = check_execution(completed_execution(), history, ledger(), [], Expect(status="FAILED"))
    assert report.violations == ["ended COMPLETED, expected FAILED"]


def test_effects_without_a_run_or_beyond_the_execution_are_violations() -> None:
    history = [done(0, ok())]
    running = Execution(
        EID, "w", Status.RUNNING, 1, 2, {"x": 1}, {"x": 1, "s0_key": f"{EID}:0"}, 0.0, 1.0, next_wake_at=200.0
    )
    rows = {
        f"{EID}:0": {"effect": {"k": 1}, "runs": 0, "duplicates": 0},
        f"{EID}:2": {"effect": {"k": 1}, "runs": 1, "duplicates": 0},
    }
    report = check_execution(running, history, rows, [], Expect(status="RUNNING"), now=100.0)
    assert any("an effect landed without any recorded run" in v for v in report.violations)
    assert any("beyond the execution" in v for v in report.violations)


def test_terminal_in_the_due_index_past_its_last_sweep_or_running_without_a_wake_time_is_stuck() -> None:
    history = [done(i, ok()) for i in range(3)]
    due = Execution(EID, "w", Status.COMPLETED, 3, 4, {"x": 1}, completed_execution().context, 0.0, 1.0, 9.0)
    # Due for its retention stamp: fine until that sweep is overdue.
    assert check_execution(due, history, ledger(), [], Expect(), now=12.0).violations == []
    report = check_execution(due, history, ledger(), [], Expect(), now=20.0)
    assert report.violations == ["terminal COMPLETED but still in the due index 11.0s after its last sweep was due"]
    orphan = Execution(EID, "w", Status.RUNNING, 0, 1, {"x": 1}, {"x": 1}, 0.0, 1.0, next_wake_at=None)
    report = check_execution(orphan, [], {}, [], Expect(status="RUNNING"))
    assert any("nothing would ever drive it again" in v for v in report.violations)


def ended(version: int, wake: float | None, step: int = 2, status: str = "COMPLETED") -> Snapshot:
    return Snapshot(version, status, step, 1, 0, wake, 0.0)


def test_an_ended_child_may_be_deferred_while_its_parent_waits_then_unindexed_and_nothing_else() -> None:
    """The sweeper re-sends an ended child's notice and keeps it due a patience later (the soak's
    v3 -> v4 on a COMPLETED child), then un-indexes it; any other change to an ended one is a violation."""
    assert check_versions([ended(3, 100.0), ended(4, 190.0), ended(5, 280.0), ended(6, None)], None) == []
    assert check_versions([ended(3, 100.0), ended(4, 190.0, step=3)], None) != [], "the step moved"
    assert check_versions([ended(3, 100.0), ended(4, 50.0)], None) != [], "due earlier, not later"
    assert check_versions([ended(3, None), ended(4, 190.0)], None) != [], "indexed again once out"
    assert check_versions([ended(3, 100.0), ended(4, 190.0, status="RUNNING")], None) != []
