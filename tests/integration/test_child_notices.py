"""A child's end notice to its parent on moto: one that SQS parked in the DLQ, one whose sends
fail. Whatever happens to the notice, the parent wakes once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, step
from engine.adapters.dlq import SqsDeadLetters
from engine.children import child_id
from engine.dead_letters import redrive
from engine.errors import ParentDecides
from engine.workflow import child
from tests.integration.engine_support import add_workflow, dead_letters

pytestmark = pytest.mark.integration


@pytest.fixture
def reg(rec):
    reg = Registry()
    add_workflow(reg, "kid", [step(rec.step("kid_work", lambda ctx: {"kid_out": 42}))])
    add_workflow(reg, "family", [child("kid"), rec.step("after")], retry=RetryPolicy(max_attempts=1))

    def shaky(ctx):
        if broken:
            raise NonRetryableError("the service is down")

    add_workflow(reg, "shaky_kid", [step(rec.step("shaky_work", shaky))], retry=RetryPolicy(max_attempts=1))
    add_workflow(reg, "shaky_family", [child("shaky_kid"), rec.step("after")], retry=RetryPolicy(max_attempts=1))
    return reg


broken = True  # the shaky child's cause; a test that fixes it sets it back (``fixed``)


@pytest.fixture
def fixed():
    global broken
    yield
    broken = True


def notices(rig) -> list[dict[str, Any]]:
    """Take every queued message off the step queue; return those that are child notices."""
    found = []
    for m in rig.driver.receive(10):
        rig.driver.delete(m)
        body = json.loads(m["Body"])
        if body.get("kind") == "child_done":
            found.append(body)
    return found


def start_until_the_childs_end(rig, eid: str) -> None:
    """The parent parks on its child; the child runs to its end and sends its notice."""
    rig.engine.start("family", {}, execution_id=eid)
    rig.driver.deliver(rig.driver.receive(1))  # the parent starts the child and parks WAITING
    assert rig.status(eid) == "WAITING"
    rig.driver.deliver(rig.driver.receive(1))  # the child's step: the child ends, its notice is sent
    assert rig.status(child_id(eid, 0, 1)) == "COMPLETED"


def test_a_parked_child_notice_is_resent_by_the_dlq_redrive_and_wakes_the_parent(rig, rec):
    start_until_the_childs_end(rig, "n1")
    (notice,) = notices(rig)  # as if throttling outlasted maxReceiveCount: SQS parks it
    rig.aws["sqs"].send_message(QueueUrl=rig.aws["DeadLetterQueue"], MessageBody=json.dumps(notice))
    (result,) = redrive(rig.engine, SqsDeadLetters(rig.aws["sqs"], rig.aws["DeadLetterQueue"]), 10)
    assert (result.kind, result.execution_id, result.action) == ("step", "n1", "resent"), result.reason
    rig.driver.pump()  # no sweep: the redrive's message alone wakes the parent
    assert rig.status("n1") == "COMPLETED" and rec.count("n1") == 1


def test_a_child_stays_indexed_until_its_notice_is_sent_and_the_parent_wakes(rig, rec):
    rig.engine.start("family", {}, execution_id="n2")
    rig.driver.deliver(rig.driver.receive(1))  # the parent starts the child and parks WAITING
    rig.queue.fail_sends = 1  # the child's own notice fails
    rig.driver.deliver(rig.driver.receive(1))
    kid = child_id("n2", 0, 1)
    assert rig.status(kid) == "COMPLETED" and not notices(rig)
    rig.clock.advance(rig.engine.config.lease_seconds * 2)
    rig.queue.fail_sends = 1  # and so does the sweeper's first re-send
    report = rig.engine.sweep()
    assert rig.engine.get(kid).next_wake_at is not None, "still indexed: the next sweep sends it"
    assert report.errors == 1, "a notice not sent is the sweep's error"
    rig.clock.advance(rig.engine.config.lease_seconds * 2)
    rig.engine.sweep()
    assert rig.engine.get(kid).next_wake_at is not None, "sent, not yet taken: still indexed"
    rig.driver.pump()
    assert rig.status("n2") == "COMPLETED" and rec.count("n2") == 1
    rig.clock.advance(patience(rig))
    rig.engine.sweep()
    assert rig.engine.get(kid).next_wake_at is None, "un-indexed once its parent took the notice"


def patience(rig) -> float:
    """How long the sweeper leaves an ended child alone while its parent still waits on it."""
    cfg = rig.engine.config
    return cfg.backlog_patience_leases * cfg.lease_seconds + 1


def test_a_notice_lost_after_it_was_sent_is_sent_again_while_the_parent_waits(rig, rec):
    """Sent is not taken: the notice vanishes from the queue after the child's end was swept
    (the hypothesis machine's lost message, found by its long exploration). The child stays
    indexed while its parent waits on it, and each sweep that finds it due sends it again."""
    start_until_the_childs_end(rig, "n5")
    kid = child_id("n5", 0, 1)
    rig.clock.advance(rig.engine.config.lease_seconds * 2)
    rig.engine.sweep()  # the child's end is due: its notice is sent again, the parent still waits
    assert len(notices(rig)) == 2, "the child's notice and the sweep's, both lost here"
    assert rig.status("n5") == "WAITING" and rig.engine.get(kid).next_wake_at is not None
    rig.clock.advance(patience(rig))
    report = rig.engine.sweep()
    assert report.errors == 0 and len(notices_kept(rig)) == 1, "one more notice, kept on the queue"
    rig.driver.pump()
    assert rig.status("n5") == "COMPLETED" and rec.count("n5") == 1
    rig.clock.advance(patience(rig))
    rig.engine.sweep()
    assert rig.engine.get(kid).next_wake_at is None, "the parent took it: the child leaves the index"


def notices_kept(rig) -> list[dict[str, Any]]:
    """The child notices on the step queue, left there for the workers."""
    taken = rig.driver.receive(10)
    for m in taken:
        rig.driver.release(m)
    return [body for body in (json.loads(m["Body"]) for m in taken) if body.get("kind") == "child_done"]


@pytest.mark.parametrize("child_first", [True, False])
def test_one_dlq_redrive_of_a_failed_parent_and_its_failed_child_runs_the_childs_work_once(
    rig, rec, fixed, child_first
):
    global broken
    rig.engine.start("shaky_family", {}, execution_id="n3")
    rig.driver.pump()
    old_kid = child_id("n3", 0, 1)
    assert rig.status("n3") == "FAILED" and rig.status(old_kid) == "FAILED"
    parked = dead_letters(rig.aws)
    assert sorted(p["execution_id"] for p in parked) == ["n3", old_kid]
    parked.sort(key=lambda p: (p["execution_id"] == "n3") == child_first)  # the order a redrive meets them
    for body in parked:
        rig.aws["sqs"].send_message(QueueUrl=rig.aws["DeadLetterQueue"], MessageBody=json.dumps(body))
    broken = False  # the cause is gone
    results = redrive(rig.engine, SqsDeadLetters(rig.aws["sqs"], rig.aws["DeadLetterQueue"]), 10)
    assert {r.action for r in results} <= {"redriven", "dropped"} and len(results) == 2
    rig.driver.pump()
    assert rig.status("n3") == "COMPLETED" and rec.count("n3") == 1
    assert rig.status(old_kid) == "FAILED", "nobody waits on the old child: it is not revived"
    work = [(e, a) for e, i, a in rec.runs if e.startswith("n3--")]
    assert work == [(old_kid, 1), (child_id("n3", 0, 2), 1)], "the child's work ran once after the redrive"


def test_a_failed_child_whose_parent_has_decided_cannot_be_redriven_alone(rig, rec, fixed):
    """Redriving a FAILED child directly (API, CLI) revived it while nobody waited on it: the
    parent had failed (or retried with a fresh child). It is refused, naming the parent, and
    nothing is written or sent; re-driving the parent runs the child's work once, in a new child."""
    global broken
    rig.engine.start("shaky_family", {}, execution_id="d1")
    rig.driver.pump()
    old_kid = child_id("d1", 0, 1)
    assert rig.status("d1") == "FAILED" and rig.status(old_kid) == "FAILED"
    before, sent = rig.engine.get(old_kid), len(rig.queue.sent)
    with pytest.raises(ParentDecides) as refused:
        rig.engine.redrive_failed(old_kid)
    assert "'d1'" in refused.value.message and "FAILED" in refused.value.message
    assert refused.value.details["parent"] == "d1"
    assert rig.engine.get(old_kid) == before and len(rig.queue.sent) == sent, "nothing written or sent"
    broken = False
    rig.engine.redrive_failed("d1")
    rig.driver.pump()
    assert rig.status("d1") == "COMPLETED" and rig.status(old_kid) == "FAILED"
    work = [(e, a) for e, i, a in rec.runs if e.startswith("d1--")]
    assert work == [(old_kid, 1), (child_id("d1", 0, 2), 1)]


def test_a_failed_child_its_parent_still_waits_on_can_be_redriven(rig, rec, fixed):
    """Before its parent took the end notice, the parent still waits on it: reviving it is the
    parent's wait going on, and the parent ends with the revived child's result, once."""
    global broken
    rig.engine.start("shaky_family", {}, execution_id="d2")
    rig.driver.deliver(rig.driver.receive(1))  # the parent starts the child and parks WAITING
    rig.driver.deliver(rig.driver.receive(1))  # the child fails; its notice is queued
    kid = child_id("d2", 0, 1)
    assert rig.status(kid) == "FAILED" and rig.status("d2") == "WAITING"
    broken = False
    assert rig.engine.redrive_failed(kid).status.value == "RUNNING"
    rig.driver.pump()  # the old notice finds the child running and changes nothing
    assert rig.status(kid) == "COMPLETED" and rig.status("d2") == "COMPLETED"
    assert [(e, a) for e, i, a in rec.runs if e.startswith("d2--")] == [(kid, 1), (kid, 2)]
    assert rec.count("d2") == 1, "the parent's next step ran once"
