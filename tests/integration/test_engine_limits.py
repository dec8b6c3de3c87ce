"""Every write fits its item: stored errors are bounded, and a result that cannot fit fails at once.

moto refuses items over 405,000 bytes (AWS: 409,600), so these sizes are chosen to pass
only when Loom's own bounds hold; an error stored unbounded pushes them over.
"""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, Status, step
from engine.error_report import one_line
from engine.limits import DYNAMODB_ITEM_LIMIT, FULL_DETAIL_ATTEMPTS, utf8_len
from engine.state import StepStatus
from tests.integration.engine_support import add_workflow, dead_letters

pytestmark = pytest.mark.integration

LONG = "€" * 50_000  # 150,000 bytes of message


def user_lookup(ctx):
    return {"name": ctx.data["user"]}  # KeyError: 'user'


@pytest.fixture
def reg(rec):
    reg = Registry()
    once = RetryPolicy(max_attempts=1)
    quick = RetryPolicy(max_attempts=FULL_DETAIL_ATTEMPTS + 2, base=1, jitter="none")

    def explode(ctx):
        raise ValueError(LONG)

    def fail_then_big(ctx):
        if ctx.attempt == 1:
            raise ValueError(LONG)
        return {"blob": "x" * 395_000}

    def fail_many_then_big(ctx):
        if ctx.attempt <= FULL_DETAIL_ATTEMPTS:
            raise ValueError(f"attempt {ctx.attempt}")
        return {"blob": "x" * 380_000}

    add_workflow(reg, "explode", [step(rec.step("f", explode), retry=once)])
    add_workflow(reg, "fail_then_big", [step(rec.step("f", fail_then_big), retry=quick)])
    add_workflow(reg, "fail_many_then_big", [step(rec.step("f", fail_many_then_big), retry=quick)])
    add_workflow(reg, "lookup", [step(user_lookup, retry=once)])
    return reg


def test_a_failure_of_an_execution_near_the_item_limit_ends_failed_with_its_real_error(rig, aws, rec):
    # The input is stored twice (input and context): about 396 KB of item, accepted.
    rig.engine.start("explode", {"blob": "y" * 198_000}, execution_id="near")
    rig.driver.pump()
    ex = rig.engine.get("near")
    assert ex.status is Status.FAILED and rec.count("near") == 1
    assert ex.error["type"] == "ValueError", "the real error, not WorkerLost"
    assert utf8_len(ex.error["message"]) <= 1024 and "bytes, cut to" in ex.error["message"]
    assert ex.error["message"].startswith("€") and ex.error["message"].endswith("€"), "head and tail kept"
    failed = [d for d in dead_letters(aws) if d.get("loom") == "failed"]
    assert len(failed) == 1 and failed[0]["error"]["type"] == "ValueError"


def test_a_long_error_does_not_make_a_later_success_too_large_for_the_history(rig, rec):
    rig.engine.start("fail_then_big", {}, execution_id="later")
    rig.driver.pump()
    ex = rig.engine.get("later")
    assert ex.status is Status.COMPLETED and rec.count("later") == 2
    (record,) = rig.engine.history("later")
    assert record.status is StepStatus.COMPLETED and len(record.result["blob"]) == 395_000
    assert [a.outcome for a in record.attempts] == ["failed", "completed"]
    assert utf8_len(record.attempts[0].error["message"]) <= 1024


def test_the_attempts_in_the_history_count_against_a_result_which_then_fails_at_once(rig, rec):
    rig.engine.start("fail_many_then_big", {}, execution_id="full")
    rig.driver.pump()
    ex = rig.engine.get("full")
    assert ex.status is Status.FAILED and ex.error["type"] == "ResultTooLarge"
    assert ex.error["reason"] == "non_retryable" and rec.count("full") == FULL_DETAIL_ATTEMPTS + 1
    assert f"{DYNAMODB_ITEM_LIMIT:,}" in ex.error["message"]


def test_a_failed_attempt_keeps_its_type_message_and_traceback(rig):
    rig.engine.start("lookup", {}, execution_id="kerr")
    rig.driver.pump()
    (record,) = rig.engine.history("kerr")
    error = record.attempts[0].error
    assert error["type"] == "KeyError" and error["message"] == "'user'"
    last = error["traceback"][-1]
    assert last["function"] == "user_lookup" and last["file"].endswith("test_engine_limits.py")
    assert last["line"] > 0
    assert one_line(error).startswith("KeyError: 'user' (at integration/test_engine_limits.py:")
