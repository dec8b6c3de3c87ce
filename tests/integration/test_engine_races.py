"""Duplicates, races and worker deaths: one committed result per step, whoever loses no-ops."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, Status, step
from engine.messages import StepMessage
from engine.state import StepStatus
from tests.integration.engine_support import Crash, Recorder, add_workflow, build_rig

pytestmark = pytest.mark.integration


@pytest.fixture
def reg(rec):
    reg = Registry()
    add_workflow(reg, "two", [rec.step("a"), rec.step("b")])
    add_workflow(
        reg,
        "careful",
        [step(rec.step("pay"), semantics="at_most_once", retry=RetryPolicy(max_attempts=3, base=1, jitter="none"))],
    )
    return reg


def test_same_message_delivered_twice_runs_once_and_the_duplicate_is_acknowledged(rig, rec):
    rig.engine.start("two", {}, execution_id="dup")
    first = rig.queue.sent[0].message
    rig.queue.inner.send(first)  # SQS at-least-once: a second copy of the same message
    rig.driver.pump()
    ex = rig.engine.get("dup")
    assert ex.status is Status.COMPLETED
    assert rec.count("dup", 0) == 1, "the stale copy must not run the step again"
    assert rig.store.commits[("dup", 0)] == 1
    assert all(r["batchItemFailures"] == [] for r in rig.driver.responses)
    rig.store.assert_versions_contiguous()


def test_two_runners_racing_at_the_same_version_commit_exactly_one_result(aws, make_engine, clock):
    reg, box = Registry(), {}

    def a(ctx):
        runner = box.setdefault("depth", 0)
        if runner == 0:
            # While this runner is inside the step, a second runner handles the same message.
            box["depth"] = 1
            box["inner"] = box["engine"].handle(StepMessage(ctx.execution_id, 0, 1, "step"))
        return {"a": f"runner{runner}"}

    add_workflow(reg, "race", [a, lambda ctx: {"b": 1}])
    rig = build_rig(aws, make_engine, clock, reg)
    box["engine"] = rig.engine
    rig.engine.start("race", {}, execution_id="race")
    outer = rig.engine.handle(StepMessage("race", 0, 1, "step"))
    assert box["inner"].status == "completed_step"
    assert outer.status == "stale", "the loser no-ops"
    records = rig.engine.history("race")
    assert len(records) == 1 and records[0].status is StepStatus.COMPLETED
    assert records[0].result == {"a": "runner1"} and len(records[0].attempts) == 1
    ex = rig.engine.get("race")
    assert ex.context["a"] == "runner1", "the context holds the committed result, not the loser's"
    assert ex.current_step == 1 and ex.version == 2
    assert rig.store.commits[("race", 0)] == 1
    rig.store.assert_versions_contiguous()


def test_crash_between_history_commit_and_meta_write_rolls_forward_with_recorded_result(rig, rec):
    rig.engine.start("two", {}, execution_id="cm")
    rig.store.crash_after_commit = 1
    rig.driver.pump()
    assert rig.driver.crashes == ["after_commit"]
    assert rig.status("cm") == "COMPLETED"
    assert rec.count("cm", 0) == 1, "the redelivery (guarded) rolls forward without re-running the step"
    assert rig.engine.get("cm").context["a"] == "a@1"
    assert rig.store.commits[("cm", 0)] == 1


def test_crash_after_checkpoint_before_enqueue_is_redriven_by_the_sweeper_after_the_lease(rig, rec):
    rig.driver.crash_visibility = 0  # the engine clock stays inside the lease after the crash
    ex, _ = rig.engine.start("two", {}, execution_id="ck")
    rig.faults.arm("after_checkpoint", step=0)
    rig.driver.pump()
    assert rig.driver.crashes == ["after_checkpoint"]
    ex = rig.engine.get("ck")
    assert ex.status is Status.RUNNING and ex.current_step == 1
    assert rig.driver.backlog() == 0, "the message for step 1 was never sent"
    assert rig.engine.sweep().redriven == 0, "nothing is due while the lease runs"
    rig.clock.set(ex.next_wake_at)
    report = rig.engine.sweep()
    assert report.redriven == 1
    assert rig.engine.sweep().redriven == 0, "a reclaimed execution has a fresh lease"
    rig.driver.pump()
    assert rig.status("ck") == "COMPLETED"
    assert (rec.count("ck", 0), rec.count("ck", 1)) == (1, 1)


def test_crash_after_enqueue_loses_nothing(rig, rec):
    rig.engine.start("two", {}, execution_id="ce")
    rig.faults.arm("after_enqueue", step=1)
    rig.driver.pump()
    assert rig.driver.crashes == ["after_enqueue"]
    assert rig.status("ce") == "COMPLETED"
    assert (rec.count("ce", 0), rec.count("ce", 1)) == (1, 1)


def test_at_most_once_worker_death_counts_as_a_failed_attempt_and_is_not_rerun(rig, rec):
    rig.engine.start("careful", {}, execution_id="amo")
    rig.faults.arm("after_step", step=0)  # the step ran (its effect happened), then the worker died
    rig.driver.pump()
    assert rig.status("amo") == "COMPLETED"
    attempts = [r[2] for r in rec.runs if r[0] == "amo"]
    assert attempts == [1, 2], "attempt 1 is never run twice; attempt 2 is a fresh one"
    (record,) = rig.engine.history("amo")
    assert [(a.attempt, a.outcome) for a in record.attempts] == [(1, "worker_lost"), (2, "completed")]
    assert record.attempts[0].error["type"] == "WorkerLost"


@pytest.mark.parametrize("point", ["before_step", "after_step", "in_step"])
def test_a_step_that_kills_its_worker_every_time_ends_failed_within_max_attempts(aws, make_engine, clock, point):
    rec, reg = Recorder(), Registry()

    def die(ctx):
        raise Crash("in_step")

    policy = RetryPolicy(max_attempts=3, base=1, jitter="none")
    add_workflow(reg, "poison", [step(rec.step("boom", die if point == "in_step" else None), retry=policy)])
    rig = build_rig(aws, make_engine, clock, reg)
    if point != "in_step":
        rig.faults.arm(point, times=-1)
    rig.engine.start("poison", {}, execution_id="poison")
    rig.driver.pump()
    ex = rig.engine.get("poison")
    assert ex.status is Status.FAILED and ex.error["type"] == "WorkerLost" and ex.error["reason"] == "max_attempts"
    (record,) = rig.engine.history("poison")
    assert record.status is StepStatus.FAILED
    assert [(a.attempt, a.outcome) for a in record.attempts] == [(n, "worker_lost") for n in (1, 2, 3)]
    # Each attempt costs at most two deaths: the unguarded/guarded run, then the guarded one.
    assert len(rig.driver.crashes) <= 2 * 3
    failed = [d for d in rig.queue.dead_letters if d.get("loom") == "failed"]
    assert [d["execution_id"] for d in failed] == ["poison"]


def test_at_most_once_step_is_marked_started_before_it_runs(aws, make_engine, clock):
    reg, box = Registry(), {}

    def pay(ctx):
        box["seen"] = box["engine"].get(ctx.execution_id).started_attempt

    add_workflow(reg, "mark", [step(pay, semantics="at_most_once")])
    rig = build_rig(aws, make_engine, clock, reg)
    box["engine"] = rig.engine
    rig.engine.start("mark", {}, execution_id="mark")
    rig.driver.pump()
    assert box["seen"] == 1
    assert rig.engine.get("mark").started_attempt == 0, "the mark is cleared once the step is past"


def test_two_sweepers_at_once_redrive_once(aws, make_engine, clock, reg):
    rig = build_rig(aws, make_engine, clock, reg)
    other = build_rig(aws, make_engine, clock, reg)
    rig.queue.fail_sends = 1  # the start message is lost
    ex, _ = rig.engine.start("two", {}, execution_id="sw")
    clock.set(ex.next_wake_at + 1)
    # The second sweeper runs to completion between the first one's read and its write.
    rig.store.before_get = lambda _id: other.engine.sweep()
    first = rig.engine.sweep()
    assert first.redriven == 0 and first.skipped == 1
    sent = [s.message for s in rig.queue.sent + other.queue.sent]
    assert sent == [StepMessage("sw", 0, 1, "redrive")]
    assert rig.engine.get("sw").version == 2


def test_two_sweepers_waking_the_same_sleep_wake_it_once(aws, make_engine, clock):
    from engine import sleep

    reg = Registry()
    add_workflow(reg, "nap", [sleep(hours=1), lambda ctx: {"done": True}])
    rig = build_rig(aws, make_engine, clock, reg)
    other = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("nap", {}, execution_id="nap")
    clock.advance(3600)
    rig.store.before_get = lambda _id: other.engine.sweep()
    first = rig.engine.sweep()
    assert first.woken == 0 and first.skipped == 1
    woken = [s.message for s in rig.queue.sent + other.queue.sent]
    assert woken == [StepMessage("nap", 1, 1, "step")]
    (record,) = rig.engine.history("nap")
    assert record.status is StepStatus.COMPLETED and len(record.attempts) == 1
    assert rig.engine.get("nap").version == 2


def test_sweeper_reclaiming_a_running_step_does_not_make_it_commit_twice(aws, make_engine, clock):
    rec, reg, box = Recorder(), Registry(), {}

    def slow(ctx):
        # The step outlives its lease; the sweeper re-drives the execution meanwhile.
        ex = box["engine"].get(ctx.execution_id)
        box["clock"].set(ex.next_wake_at + 1)
        box["report"] = box["engine"].sweep()

    add_workflow(reg, "slow", [rec.step("slow", slow), rec.step("next")])
    rig = build_rig(aws, make_engine, clock, reg)
    box.update(engine=rig.engine, clock=clock)
    rig.engine.start("slow", {}, execution_id="sl")
    rig.driver.pump()
    assert box["report"].redriven == 1
    assert rig.status("sl") == "COMPLETED"
    assert rec.count("sl", 0) == 1, "the redrive message arrives after the advance and is stale"
    assert rig.store.commits[("sl", 0)] == 1
    rig.store.assert_versions_contiguous()


# ------------------------------------------------ recovery in seconds (DESIGN.md)


def test_a_crash_between_checkpoint_and_enqueue_is_adopted_by_the_redelivery_without_the_sweeper(rig, rec):
    rig.driver.crash_visibility = 20  # the template's: the heartbeat's extension
    rig.engine.start("two", {}, execution_id="adopt")
    rig.faults.arm("after_checkpoint", step=0)
    crashed_at = rig.clock.now()
    rig.driver.pump()
    assert rig.driver.crashes == ["after_checkpoint"]
    assert rig.status("adopt") == "COMPLETED", "the redelivered step-0 message ran step 1"
    assert (rec.count("adopt", 0), rec.count("adopt", 1)) == (1, 1)
    (_, b) = rig.engine.history("adopt")
    assert b.finished_at - crashed_at <= 21 < rig.engine.config.lease_seconds
    rig.store.assert_versions_contiguous()


def test_a_chain_killed_mid_step_is_adopted_by_its_first_message(rig, rec):
    rig.driver.crash_visibility = 20
    rig.driver.remaining = lambda: 60.0  # a Lambda context: the worker chains step 1 after step 0
    rig.engine.start("two", {}, execution_id="chain")
    rig.faults.arm("before_step", step=1)
    rig.driver.pump()
    assert rig.driver.crashes == ["before_step"]
    assert rig.status("chain") == "COMPLETED"
    assert (rec.count("chain", 0), rec.count("chain", 1)) == (1, 1), "step 0 is not run again"
    # One message was ever sent (the start's); the chain's link was adopted, not re-driven.
    assert [s.message.kind.value for s in rig.queue.sent] == ["step"]


def test_a_live_chain_s_stale_redelivery_is_acknowledged_not_adopted(rig, rec):
    # Redelivered (its heartbeat failed, say) while the execution was written 3 s ago: a live chain.
    rig.engine.start("two", {}, execution_id="live")
    rig.driver.deliver(rig.driver.receive(1))
    assert rig.engine.get("live").current_step == 1
    rig.clock.advance(3)
    outcome = rig.engine.handle(StepMessage("live", 0, 1, "step"), redelivered=True)
    assert outcome.status == "stale" and rec.count("live", 1) == 0, "step 1's own message runs it"
    rig.driver.pump()
    assert rig.status("live") == "COMPLETED" and rec.count("live", 1) == 1


def test_an_at_most_once_attempt_in_flight_is_judged_lost_when_its_lease_is_out(rig, rec):
    rig.driver.crash_visibility = 20
    rig.engine.start("careful", {}, execution_id="amo20")
    rig.faults.arm("after_step", step=0)
    started = rig.clock.now()
    rig.driver.pump()
    assert rig.status("amo20") == "COMPLETED"
    (record,) = rig.engine.history("amo20")
    assert [(a.attempt, a.outcome) for a in record.attempts] == [(1, "worker_lost"), (2, "completed")]
    # The redelivery 20 s on found the mark in flight and sent a copy for the lease's end: no sweep.
    kinds = [s.message.kind.value for s in rig.queue.sent]
    assert "redrive" in kinds
    lease = rig.engine.config.lease_seconds
    assert lease <= record.attempts[1].started_at - started <= lease + 2 + 2  # + tolerance + retry backoff
