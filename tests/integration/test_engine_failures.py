"""Retries, final failure and the DLQ, limits, bad messages and transient infrastructure errors."""

from __future__ import annotations

import json

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, Status, sleep, step
from engine.errors import NotFailed
from engine.messages import StepMessage
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow, build_rig, dead_letters, sqs_record

pytestmark = pytest.mark.integration


class Flaky(Exception):
    pass


def fail_first(n: int):
    def behave(ctx):
        if ctx.attempt <= n:
            raise Flaky(f"attempt {ctx.attempt} fails")

    return behave


@pytest.fixture
def reg(rec):
    reg = Registry()
    quick = RetryPolicy(max_attempts=4, base=10, rate=2, jitter="none")
    add_workflow(reg, "flaky2", [step(rec.step("f", fail_first(2)), retry=quick)])
    add_workflow(reg, "always", [step(rec.step("f", fail_first(99)), retry=quick)])
    slow = RetryPolicy(max_attempts=3, base=1000, max_delay=5000, jitter="none")
    add_workflow(reg, "far", [step(rec.step("f", fail_first(1)), retry=slow)])

    def refuse(ctx):
        raise NonRetryableError("card declined")

    add_workflow(reg, "refuse", [step(rec.step("f", refuse), retry=quick)])
    add_workflow(reg, "fat", [step(rec.step("f", lambda ctx: {"blob": "x" * 420_000}), retry=quick)])
    add_workflow(reg, "notdict", [step(rec.step("f", lambda ctx: ["a", "list"]), retry=quick)])
    add_workflow(
        reg, "picky", [step(rec.step("f", fail_first(9)), retry=RetryPolicy(max_attempts=5, no_retry_on=Flaky))]
    )
    add_workflow(reg, "napper", [sleep(seconds=60), rec.step("after")])
    return reg


def test_retries_travel_as_sqs_delays_and_the_step_completes(rig, rec):
    rig.engine.start("flaky2", {}, execution_id="r")
    t0 = rig.clock.now()
    rig.driver.pump()
    assert rig.status("r") == "COMPLETED"
    retries = [(s.message.attempt, s.message.kind, s.delay) for s in rig.queue.sent if s.message.kind == "retry"]
    assert retries == [(2, "retry", 10), (3, "retry", 20)]
    assert rig.clock.now() - t0 >= 30, "each retry ran no earlier than its delay"
    (record,) = rig.engine.history("r")
    assert [(a.attempt, a.outcome, a.retry_delay) for a in record.attempts] == [
        (1, "failed", 10.0),
        (2, "failed", 20.0),
        (3, "completed", None),
    ]
    first = record.attempts[0].error
    assert (first["type"], first["message"]) == ("Flaky", "attempt 1 fails")
    assert first["traceback"][-1]["function"] == "behave", "where it was raised"


def test_retry_state_keeps_a_lease_that_covers_a_lost_retry_message(rig):
    rig.engine.start("flaky2", {}, execution_id="lost")
    rig.driver.deliver(rig.driver.receive())
    ex = rig.engine.get("lost")
    assert ex.attempt == 2 and ex.ready_at == pytest.approx(rig.clock.now() + 10)
    assert ex.next_wake_at > ex.ready_at
    # The retry message is lost; the sweeper finds the execution once the lease has passed.
    rig.driver.delete(rig.driver.receive()[0])
    rig.clock.set(ex.next_wake_at)
    assert rig.engine.sweep().redriven == 1
    rig.driver.pump()
    assert rig.status("lost") == "COMPLETED"


def test_a_retry_over_fifteen_minutes_waits_for_the_sweeper(rig, rec):
    rig.engine.start("far", {}, execution_id="far")
    rig.driver.pump()
    ex = rig.engine.get("far")
    assert ex.status is Status.RUNNING and ex.attempt == 2
    assert ex.next_wake_at == pytest.approx(rig.clock.now() + 1000) == ex.ready_at
    assert rig.driver.backlog() == 0, "no SQS message can wait 1000 s"
    rig.clock.advance(999)
    assert rig.engine.sweep().redriven == 0
    rig.clock.advance(1)
    assert rig.engine.sweep().redriven == 1
    rig.driver.pump()
    assert rig.status("far") == "COMPLETED" and rec.count("far") == 2


def test_giving_up_fails_the_execution_and_parks_it_in_the_dlq(rig, aws):
    rig.engine.start("always", {}, execution_id="bad")
    rig.driver.pump()
    ex = rig.engine.get("bad")
    assert ex.status is Status.FAILED and ex.next_wake_at == ex.updated_at + rig.engine.config.end_grace_seconds
    assert ex.error["type"] == "Flaky" and ex.error["reason"] == "max_attempts" and ex.error["attempt"] == 4
    (record,) = rig.engine.history("bad")
    assert record.status is StepStatus.FAILED and [a.attempt for a in record.attempts] == [1, 2, 3, 4]
    parked = dead_letters(aws)
    assert [(d["loom"], d["execution_id"], d["error"]["step_name"]) for d in parked] == [("failed", "bad", "f")]
    assert rig.engine.sweep().due == 0, "a failed execution leaves the due index"


def test_redrive_failed_gives_a_fresh_round_of_attempts(rig, rec):
    rig.engine.start("always", {}, execution_id="again")
    rig.driver.pump()
    failed = rig.engine.get("again")
    assert failed.attempt == 4
    with pytest.raises(NotFailed):
        rig.engine.redrive_failed(rig.engine.start("flaky2", {}, execution_id="fine")[0].id)
    new = rig.engine.redrive_failed("again")
    assert new.status is Status.RUNNING and new.attempt == 5 and new.attempt_base == 4 and new.round_attempt == 1
    assert new.error is None and new.next_wake_at is not None
    rig.driver.pump()
    ex = rig.engine.get("again")
    # fail_first(99) never passes, so the new round fails again after its own four attempts.
    assert ex.status is Status.FAILED and ex.attempt == 8
    (record,) = rig.engine.history("again")
    assert [a.attempt for a in record.attempts] == list(range(1, 9))


def test_redrive_failed_completes_when_the_cause_is_gone(aws, make_engine, clock):
    reg, state = Registry(), {"broken": True}

    def sometimes(ctx):
        if state["broken"]:
            raise NonRetryableError("downstream is down")
        return {"ok": True}

    add_workflow(reg, "fixable", [sometimes])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("fixable", {}, execution_id="fx")
    rig.driver.pump()
    assert rig.status("fx") == "FAILED"
    state["broken"] = False
    rig.engine.redrive_failed("fx")
    rig.driver.pump()
    ex = rig.engine.get("fx")
    assert ex.status is Status.COMPLETED and ex.context == {"ok": True}
    assert rig.engine.history("fx")[0].status is StepStatus.COMPLETED


def test_non_retryable_error_fails_at_once(rig, rec):
    rig.engine.start("refuse", {}, execution_id="nr")
    rig.driver.pump()
    ex = rig.engine.get("nr")
    assert ex.status is Status.FAILED and ex.error["reason"] == "non_retryable"
    assert ex.error["message"] == "card declined" and rec.count("nr") == 1


def test_no_retry_on_fails_at_once(rig, rec):
    rig.engine.start("picky", {}, execution_id="pk")
    rig.driver.pump()
    assert rig.engine.get("pk").error["reason"] == "no_retry_on" and rec.count("pk") == 1


def test_a_result_over_400_kb_fails_the_step_without_retries(rig, rec):
    rig.engine.start("fat", {}, execution_id="fat")
    rig.driver.pump()
    ex = rig.engine.get("fat")
    assert ex.status is Status.FAILED and rec.count("fat") == 1
    assert ex.error["type"] == "ResultTooLarge" and ex.error["reason"] == "non_retryable"
    assert "400 KB" in ex.error["message"] and "step's result" in ex.error["message"]
    (record,) = rig.engine.history("fat")
    assert record.result is None and record.status is StepStatus.FAILED


def test_a_result_that_is_not_a_dict_fails_the_step(rig):
    rig.engine.start("notdict", {}, execution_id="nd")
    rig.driver.pump()
    ex = rig.engine.get("nd")
    assert ex.status is Status.FAILED and ex.error["type"] == "InvalidResult" and "list" in ex.error["message"]


def test_unknown_workflow_in_a_message_blocks_the_execution_not_the_worker(aws, make_engine, clock, reg):
    """A worker without the module (a deploy or a `loom up` without it) stops the execution
    where it is, BLOCKED, instead of failing work the same code can finish; registered again,
    the recheck resumes it (issue #25, friction 2)."""
    ghost_reg = Registry()
    add_workflow(ghost_reg, "ghost", [lambda ctx: None])
    starter = build_rig(aws, make_engine, clock, ghost_reg)
    starter.engine.start("ghost", {}, execution_id="ghost")
    worker = build_rig(aws, make_engine, clock, reg)  # this worker does not know "ghost"
    worker.driver.pump()
    assert all(r["batchItemFailures"] == [] for r in worker.driver.responses)
    ex = worker.engine.get("ghost")
    assert ex.status is Status.BLOCKED and ex.blocked["reason"] == "workflow_not_registered" and ex.error is None
    assert not dead_letters(aws)
    clock.advance(worker.engine.config.blocked_recheck_seconds + 1)
    worker.engine.sweep()
    assert worker.engine.get("ghost").status is Status.BLOCKED, "still not registered: still blocked"
    back = build_rig(aws, make_engine, clock, ghost_reg)  # functions with the module again
    clock.advance(back.engine.config.blocked_recheck_seconds + 1)
    back.engine.sweep()
    back.driver.pump()
    assert back.engine.get("ghost").status is Status.COMPLETED


def test_unknown_workflow_at_a_wake_blocks_the_execution(aws, make_engine, clock, reg):
    ghost_reg = Registry()
    add_workflow(ghost_reg, "ghost_nap", [sleep(seconds=60), lambda ctx: None])
    starter = build_rig(aws, make_engine, clock, ghost_reg)
    starter.engine.start("ghost_nap", {}, execution_id="gw")
    worker = build_rig(aws, make_engine, clock, reg)
    worker.queue.visible_at.update(starter.queue.visible_at)
    worker.driver.pump()
    assert all(r["batchItemFailures"] == [] for r in worker.driver.responses)
    assert worker.engine.get("gw").status is Status.BLOCKED


def test_unknown_workflow_found_by_the_sweeper_blocks_the_execution(aws, make_engine, clock, reg):
    ghost_reg = Registry()
    add_workflow(ghost_reg, "ghost_nap", [sleep(hours=1), lambda ctx: None])
    starter = build_rig(aws, make_engine, clock, ghost_reg)
    starter.engine.start("ghost_nap", {}, execution_id="gs")
    worker = build_rig(aws, make_engine, clock, reg)
    clock.advance(3600)
    worker.engine.sweep()
    ex = worker.engine.get("gs")
    assert ex.status is Status.BLOCKED and ex.blocked == {
        "reason": "workflow_not_registered",
        "from": "SLEEPING",
        "since": ex.updated_at,
    }


@pytest.mark.parametrize(
    "body",
    [
        "not json at all",
        "[1, 2]",
        json.dumps({"step": 0}),
        json.dumps({"execution_id": "bad id!", "step": 0}),
        json.dumps({"execution_id": "ok", "step": -1}),
        json.dumps({"execution_id": "ok", "step": 0, "kind": "explode"}),
    ],
)
def test_a_malformed_message_goes_to_the_dlq_with_its_reason_and_is_acknowledged(rig, aws, body):
    aws["sqs"].send_message(QueueUrl=aws["StepQueue"], MessageBody=body)
    rig.driver.pump()
    assert rig.driver.responses == [{"batchItemFailures": []}]
    assert rig.driver.backlog() == 0
    (parked,) = dead_letters(aws)
    assert parked["loom"] == "malformed" and parked["body"] == body
    assert parked["error"]["type"] == "MalformedMessage" and parked["error"]["message"]


def test_a_transient_store_error_fails_only_that_message(rig, aws):
    rig.engine.start("flaky2", {}, execution_id="ok1")
    rig.engine.start("napper", {}, execution_id="hurt")
    rig.store.fail_get = lambda execution_id: execution_id == "hurt"
    rig.queue.visible_at.clear()
    messages = rig.driver.receive(10)
    assert len(messages) == 2
    response = rig.driver.deliver(messages)
    hurt = next(m["MessageId"] for m in messages if json.loads(m["Body"])["execution_id"] == "hurt")
    assert response == {"batchItemFailures": [{"itemIdentifier": hurt}]}
    assert rig.engine.get("ok1").attempt == 2, "the other message was handled"


def test_an_unexpected_engine_error_for_one_record_fails_only_that_record(rig, aws):
    from engine.batch import process_batch

    rig.engine.start("flaky2", {}, execution_id="fine")
    good = rig.driver.receive(1)[0]
    records = [
        sqs_record(good, aws["StepQueue.Arn"]),
        {
            **sqs_record(good, aws["StepQueue.Arn"]),
            "messageId": "weird",
            "attributes": {"ApproximateReceiveCount": "x"},
        },
    ]
    response = process_batch(rig.engine, {"Records": records})
    assert response == {"batchItemFailures": [{"itemIdentifier": "weird"}]}


def test_an_early_retry_message_is_acknowledged_and_does_not_run(rig, rec):
    rig.engine.start("far", {}, execution_id="early")
    rig.driver.pump()
    rig.engine.queue.inner.send(StepMessage("early", 0, 2, "retry"))
    rig.driver.pump()
    assert rec.count("early") == 1 and rig.engine.get("early").attempt == 2
