"""A message that arrives before its time is sent back with the rest of its delay, not dropped."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, sleep, step
from tests.integration.engine_support import add_workflow

pytestmark = pytest.mark.integration

SKEW = 2.0  # the worker's clock is this far behind the one that wrote ready_at


class Flaky(Exception):
    pass


@pytest.fixture
def reg(rec):
    def fail_once(ctx):
        if ctx.attempt == 1:
            raise Flaky("first attempt fails")

    reg = Registry()
    retry10 = RetryPolicy(max_attempts=3, base=10, jitter="none")
    add_workflow(reg, "skewed", [step(rec.step("f", fail_once), retry=retry10)])
    add_workflow(reg, "short_nap", [sleep(seconds=30), rec.step("after")])
    return reg


def test_a_retry_that_arrives_early_under_clock_skew_runs_when_due_not_after_the_lease(rig, rec):
    rig.engine.start("skewed", {}, execution_id="skew")
    (first,) = rig.driver.receive(1)
    rig.driver.deliver([first])
    failed_at = rig.clock.now()
    (retry,) = [s for s in rig.queue.sent if s.message.kind == "retry"]
    assert (retry.message.attempt, retry.delay) == (2, 10)
    # SQS delivers the retry after its 10 s, but this worker's clock reads 2 s less.
    rig.queue.visible_at[retry.message.encode()] -= SKEW
    rig.driver.pump()
    assert rig.status("skew") == "COMPLETED", "the early retry was dropped"
    resent = rig.queue.sent[-1]
    assert (resent.message, resent.delay) == (retry.message, 2)
    (record,) = rig.engine.history("skew")
    second = record.attempts[1]
    assert second.attempt == 2 and second.started_at - failed_at == pytest.approx(10.0)
    assert rig.clock.now() - failed_at < rig.engine.config.lease_seconds
    assert rig.store.calls["due"] == 0, "no sweep was needed"


def test_a_wake_message_that_arrives_early_is_sent_back_and_wakes_on_time(rig, rec):
    rig.engine.start("short_nap", {}, execution_id="early")
    t0 = rig.clock.now()
    rig.queue.visible_at.clear()  # delivered at once, 30 s early
    (message,) = rig.driver.receive(1)
    assert rig.driver.deliver([message]) == {"batchItemFailures": []}
    assert rig.status("early") == "SLEEPING" and [s.delay for s in rig.queue.sent] == [30, 30]
    rig.driver.pump()  # the copy arrives after its 30 s
    assert rig.status("early") == "COMPLETED" and rig.clock.now() - t0 == pytest.approx(30.0)
    assert rig.store.calls["due"] == 0, "no sweep was needed"


def test_an_early_message_is_not_acknowledged_when_sending_it_back_fails(rig):
    rig.engine.start("short_nap", {}, execution_id="unsent")
    rig.queue.visible_at.clear()
    (message,) = rig.driver.receive(1)
    rig.queue.fail_sends = 1
    assert rig.driver.deliver([message]) == {"batchItemFailures": [{"itemIdentifier": message["MessageId"]}]}
