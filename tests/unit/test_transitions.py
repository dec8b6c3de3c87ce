"""Pure transitions: an execution in, the next execution and its effects out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import Status, sleep
from engine import transitions as tr
from engine.config import EngineConfig
from engine.errors import InvalidInput
from engine.messages import StepMessage
from engine.state import Execution
from engine.verdicts import run_is_covered
from engine.workflow import build_spec

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
CFG = EngineConfig(lease_seconds=100)


def a(ctx):
    return None


SPEC = build_spec("w", [a, a, sleep(minutes=10), a, sleep(hours=2), a])


def execution(**changes) -> Execution:
    base = dict(
        id="e1",
        workflow="w",
        status=Status.RUNNING,
        current_step=0,
        version=3,
        input={"i": 1},
        context={"i": 1},
        created_at=NOW - 50,
        updated_at=NOW - 10,
        next_wake_at=NOW + 160,
    )
    base.update(changes)
    return Execution(**base)


def test_start_state_runs_the_first_step_under_a_lease():
    draft = execution(version=1, created_at=NOW, next_wake_at=None)
    new, effects = tr.start_state(draft, SPEC, CFG)
    assert new.version == 1 and new.status is Status.RUNNING and new.next_wake_at == NOW + 200
    assert effects.run_next == StepMessage("e1", 0, 1, "step") and effects.delayed is None


def test_start_state_with_a_sleep_first():
    spec = build_spec("s", [sleep(seconds=60), a])
    new, effects = tr.start_state(execution(version=1, created_at=NOW), spec, CFG)
    assert new.status is Status.SLEEPING and new.next_wake_at == NOW + 60
    assert effects.delayed == (StepMessage("e1", 0, 1, "wake"), 60) and effects.run_next is None


def test_after_step_moves_to_the_next_step_and_merges_the_result():
    ex = execution(attempt=3, attempt_base=1, started_attempt=3, ready_at=NOW - 1)
    new, effects = tr.after_step(ex, SPEC, {"r": 2, "i": 9}, NOW, CFG)
    assert new.version == 4 and new.updated_at == NOW and new.current_step == 1
    assert new.context == {"i": 9, "r": 2} and new.input == {"i": 1}
    assert (new.attempt, new.attempt_base, new.started_attempt, new.ready_at) == (1, 0, 0, None)
    assert effects.run_next == StepMessage("e1", 1, 1, "step")


def test_after_step_keeps_an_unexpired_lease_and_refreshes_a_short_one():
    keep, _ = tr.after_step(execution(next_wake_at=NOW + 160), SPEC, None, NOW, CFG)
    assert keep.next_wake_at == NOW + 160, "more than 1.5 leases left: no write to the due index"
    refresh, _ = tr.after_step(execution(next_wake_at=NOW + 99), SPEC, None, NOW, CFG)
    assert refresh.next_wake_at == NOW + 200
    # Between one and one and a half leases left: renewed, so that the next step's message
    # may wait half a lease in the queue and still find a whole lease (no start mark).
    renewed, _ = tr.after_step(execution(next_wake_at=NOW + 140), SPEC, None, NOW, CFG)
    assert renewed.next_wake_at == NOW + 200
    assert run_is_covered(keep, NOW + 49, CFG) and run_is_covered(renewed, NOW + 99, CFG)


def test_lease_is_always_fresh_for_a_non_running_execution():
    assert tr.lease(execution(status=Status.SLEEPING, next_wake_at=NOW + 500), NOW, CFG) == NOW + 200
    assert tr.lease(None, NOW, CFG) == NOW + 200
    assert tr.lease(execution(next_wake_at=NOW + 500), NOW, CFG, base=NOW + 30) == NOW + 230


def test_after_step_into_a_short_sleep_sends_a_delayed_wake():
    new, effects = tr.after_step(execution(current_step=1), SPEC, None, NOW, CFG)
    assert new.status is Status.SLEEPING and new.current_step == 2 and new.next_wake_at == NOW + 600
    assert effects.delayed == (StepMessage("e1", 2, 1, "wake"), 600) and effects.run_next is None


def test_after_step_into_a_long_sleep_leaves_it_to_the_sweeper():
    new, effects = tr.after_step(execution(current_step=3), SPEC, None, NOW, CFG)
    assert new.status is Status.SLEEPING and new.next_wake_at == NOW + 7200
    assert effects == tr.Effects()


def test_after_the_last_step_the_execution_completes_with_its_expiry_and_a_last_sweep_due():
    new, effects = tr.after_step(execution(current_step=5), SPEC, {"done": 1}, NOW, CFG)
    assert new.status is Status.COMPLETED and new.current_step == 6
    assert (new.next_wake_at, new.expires_at) == (NOW + 200, NOW + 30 * 86400)
    assert effects == tr.Effects()


def test_retry_within_sqs_delay_goes_by_message_with_a_lease_past_ready_time():
    ex = execution(attempt=2, started_attempt=2)
    new, effects = tr.retry_state(ex, 12.3, NOW, CFG)
    assert (new.attempt, new.started_attempt, new.ready_at, new.version) == (3, 0, NOW + 12.3, 4)
    assert new.next_wake_at == NOW + 12.3 + 200
    assert effects.delayed == (StepMessage("e1", 0, 3, "retry"), 13)


def test_retry_at_exactly_900_seconds_still_uses_sqs():
    _, effects = tr.retry_state(execution(), 900, NOW, CFG)
    assert effects.delayed is not None and effects.delayed[1] == 900


def test_retry_over_900_seconds_waits_for_the_sweeper():
    new, effects = tr.retry_state(execution(), 900.5, NOW, CFG)
    assert new.next_wake_at == new.ready_at == NOW + 900.5
    assert effects == tr.Effects()


def test_failed_and_cancelled_are_terminal_and_stay_indexed_for_the_retention_stamp():
    failed = tr.failed_state(execution(started_attempt=1, ready_at=NOW), {"type": "Boom"}, NOW, CFG)
    assert failed.status is Status.FAILED and failed.terminal and failed.error == {"type": "Boom"}
    assert (failed.ready_at, failed.started_attempt, failed.version) == (None, 0, 4)
    assert failed.next_wake_at == NOW + CFG.end_grace_seconds
    assert failed.expires_at == NOW + CFG.retention_seconds
    cancelled = tr.cancelled_state(execution(status=Status.SLEEPING), NOW, CFG)
    assert cancelled.status is Status.CANCELLED and cancelled.version == 4
    assert (cancelled.next_wake_at, cancelled.expires_at) == (NOW + 200, NOW + 30 * 86400)


def test_with_retention_off_an_ended_execution_leaves_the_due_index_and_never_expires():
    keep = EngineConfig(lease_seconds=100, retention_seconds=0)
    failed = tr.failed_state(execution(), {"type": "Boom"}, NOW, keep)
    assert (failed.next_wake_at, failed.expires_at) == (None, None)
    child = tr.cancelled_state(execution(parent={"id": "p", "step": 0, "attempt": 1}), NOW, keep)
    assert (child.next_wake_at, child.expires_at) == (NOW + 200, None)  # its notice's backstop only


def test_a_redrive_clears_the_expiry_of_an_ended_execution():
    failed = tr.failed_state(execution(), {"type": "Boom"}, NOW, CFG)
    again = tr.redriven_state(failed, NOW + 5, CFG)
    assert again.status is Status.RUNNING and again.expires_at is None and not again.expired(NOW + 10**9)


def test_started_state_marks_the_attempt_and_keeps_or_refreshes_the_lease():
    marked = tr.started_state(execution(attempt=2), NOW, CFG)
    assert marked.started_attempt == 2 and marked.version == 4 and marked.next_wake_at == NOW + 160
    assert tr.started_state(execution(next_wake_at=NOW + 5), NOW, CFG).next_wake_at == NOW + 200


def test_reclaimed_state_takes_exactly_one_lease_so_every_later_message_runs_guarded():
    new = tr.reclaimed_state(execution(next_wake_at=NOW - 1, started_attempt=1), NOW, CFG)
    assert new.next_wake_at == NOW + 100 and new.version == 4 and new.started_attempt == 1
    assert not run_is_covered(new, NOW, CFG)


def test_postponed_state_takes_a_fresh_lease():
    new = tr.postponed_state(execution(next_wake_at=NOW - 1), NOW, CFG)
    assert new.next_wake_at == NOW + 200 and new.version == 4
    assert run_is_covered(new, NOW + 99, CFG) and not run_is_covered(new, NOW + 100, CFG)


def test_a_postponement_waits_as_long_as_the_message_has_waited_until_the_patience_ends():
    sent = execution(next_wake_at=NOW - 1, updated_at=NOW - 500)
    assert tr.postponed_state(sent, NOW, CFG).next_wake_at == NOW + 500  # waited 5 leases: 5 more
    assert tr.postponed_state(sent, NOW, CFG, patience=800).next_wake_at == NOW + 300  # the patience ends
    assert tr.postponed_state(sent, NOW, CFG, patience=550).next_wake_at == NOW + 200  # at least two leases
    fresh = execution(next_wake_at=NOW - 1, updated_at=NOW - 150)
    assert tr.postponed_state(fresh, NOW, CFG, patience=1500).next_wake_at == NOW + 200
    assert tr.postponed_state(sent, NOW, CFG).updated_at == NOW - 500


def test_redriven_state_starts_a_new_round_without_reusing_attempt_numbers():
    failed = execution(status=Status.FAILED, attempt=4, attempt_base=0, error={"x": 1}, next_wake_at=None)
    new = tr.redriven_state(failed, NOW, CFG)
    assert new.status is Status.RUNNING and new.error is None and new.next_wake_at == NOW + 200
    assert (new.attempt, new.attempt_base, new.round_attempt) == (5, 4, 1)


def test_evolve_bumps_the_version_by_exactly_one():
    ex = execution()
    assert ex.evolve(NOW).version == ex.version + 1
    assert ex.evolve(NOW, status=Status.FAILED).updated_at == NOW


def test_a_lease_starts_after_the_wait_the_queue_showed_the_message_being_handled():
    waited = replace(CFG, queue_wait=300)
    new, _ = tr.after_step(execution(next_wake_at=NOW + 99), SPEC, None, NOW, waited)
    assert new.next_wake_at == NOW + 300 + 200
    # The next message, if it waits as long, still finds a whole lease: it runs with no start mark.
    assert run_is_covered(new, NOW + 300 + 99, waited)
    assert tr.lease(None, NOW, waited, base=NOW + 30) == NOW + 30 + 300 + 200, "a retry's backoff, then the wait"


def test_a_lease_kept_must_also_cover_the_queues_wait():
    # 160 s left is more than one and a half leases, but not with 300 s of queue ahead.
    renewed, _ = tr.after_step(execution(next_wake_at=NOW + 160), SPEC, None, NOW, replace(CFG, queue_wait=300))
    assert renewed.next_wake_at == NOW + 500
    kept, _ = tr.after_step(execution(next_wake_at=NOW + 600), SPEC, None, NOW, replace(CFG, queue_wait=300))
    assert kept.next_wake_at == NOW + 600


def test_no_wait_seen_in_the_queue_moves_a_lease_past_the_backlogs_patience():
    cfg = replace(CFG, queue_wait=86400)
    patience = cfg.backlog_patience_leases * cfg.lease_seconds
    assert tr.lease(None, NOW, cfg) == NOW + patience
    assert tr.queue_ahead(replace(CFG, backlog_patience_leases=1.0, queue_wait=50)) == 0.0


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_queue_wait_that_is_not_a_duration_is_refused(bad):
    with pytest.raises(InvalidInput, match="queue_wait"):
        EngineConfig(queue_wait=bad)


def test_a_start_mark_covers_its_own_run_not_the_queues_wait():
    waited = replace(CFG, queue_wait=300)
    marked = tr.started_state(execution(next_wake_at=NOW + 99), NOW, waited)
    assert marked.next_wake_at == NOW + 200, "a dead runner would be looked at 300 s later"
