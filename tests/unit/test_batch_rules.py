"""The batch result's rules (engine/join.py, engine/batch_result.py), without I/O."""

from __future__ import annotations

import pytest

from engine import map_items, parallel
from engine.batch_result import MAX_ERRORS, BatchResult, ItemError, brief_error, key, read
from engine.errors import FanoutFailed, WorkflowDefinitionError
from engine.fan_results import summary
from engine.join import (
    CompletionPolicy,
    CompletionReason,
    JoinRecord,
    JoinVerdict,
    OnFailure,
    judge_batch,
    to_resend,
)
from engine.state import StepRecord, StepStatus


def _join(n: int, window: int, ok: int = 0, failed: int = 0, ends: int = 0, declined: int = 0) -> JoinRecord:
    return JoinRecord("e", 0, n, 1, window, ok=ok, failed=failed, ends=ends, declined=declined)


@pytest.mark.parametrize(
    ("policy", "ok", "failed", "may"),
    [
        (CompletionPolicy(), 3, 0, True),
        (CompletionPolicy(), 3, 1, False),  # no tolerance: any failure stops new starts
        (CompletionPolicy(tolerated_failures=2), 0, 2, True),
        (CompletionPolicy(tolerated_failures=2), 0, 3, False),
        (CompletionPolicy(tolerated_failure_percentage=20), 0, 2, True),  # 2 of 10 is 20 %
        (CompletionPolicy(tolerated_failure_percentage=20), 0, 3, False),
        (CompletionPolicy(min_successful=3), 2, 0, True),
        (CompletionPolicy(min_successful=3), 3, 0, False),  # the quorum is in
        (CompletionPolicy(min_successful=3), 1, 1, False),  # min_successful alone tolerates nothing
    ],
)
def test_when_an_item_may_start(policy: CompletionPolicy, ok: int, failed: int, may: bool) -> None:
    assert policy.may_start(10, ok, failed) is may


def test_the_reason_is_all_completed_whenever_every_item_ended() -> None:
    policy = CompletionPolicy(min_successful=3)
    assert policy.reason(3, 2, 1) is CompletionReason.ALL_COMPLETED, "the issue's ok/fail/ok"
    assert policy.reason(10, 3, 0) is CompletionReason.MIN_SUCCESSFUL_REACHED
    assert CompletionPolicy().reason(10, 4, 1) is CompletionReason.FAILURE_TOLERANCE_EXCEEDED
    assert CompletionPolicy().reason(0, 0, 0) is CompletionReason.ALL_COMPLETED, "an empty batch"


def test_a_stopped_batch_closes_only_once_every_slot_is_done() -> None:
    policy = CompletionPolicy()
    running = _join(10, 3, ok=2, failed=1, ends=0, declined=1)  # two slots still run an item
    assert judge_batch(running, policy) is JoinVerdict.CONTINUE
    assert judge_batch(_join(10, 3, ok=3, failed=1, declined=3), policy) is JoinVerdict.SUCCEED
    assert judge_batch(_join(5, 3, ok=4, failed=1, ends=3), policy) is JoinVerdict.SUCCEED, "all ended"
    assert judge_batch(_join(10, 3, ok=5), policy) is JoinVerdict.CONTINUE, "nothing stops a healthy batch"


def test_the_chain_end_is_the_last_item_of_its_slot() -> None:
    join = _join(7, 3)
    assert [i for i in range(7) if join.is_chain_end(i)] == [4, 5, 6] and join.slots == 3
    assert _join(2, 10).slots == 2


def test_a_recovery_never_resends_a_declined_item_or_what_its_slot_would_have_run() -> None:
    # window 2 over 6: 0 and 1 final; 2 (slot 0's next) was declined; 3 runs.
    assert to_resend(6, 2, final=[0, 1], declined=[2]) == [3]
    assert to_resend(6, 2, final=[0, 1]) == [2, 3]


def test_the_summary_keeps_the_first_errors_and_says_when_it_cut_the_rest() -> None:
    st = map_items(items=lambda ctx: [], run=lambda ctx: None, name="work")
    failed = [
        StepRecord("e", i, "work", StepStatus.FAILED, error={"type": "E", "message": "x" * 500}) for i in range(30)
    ]
    done = [StepRecord("e", 30 + i, "work", StepStatus.COMPLETED, result=i) for i in range(5)]
    batch = summary(st, _join(40, 40, ok=5, failed=30), failed + done)
    assert (batch.failed, batch.succeeded, batch.not_started) == (30, 5, 5)
    assert len(batch.errors) == MAX_ERRORS and batch.errors_truncated
    assert len(batch.errors[0].message) == 300 and batch.errors[0].message.endswith("…")
    assert batch.reason is CompletionReason.FAILURE_TOLERANCE_EXCEEDED


def test_a_batch_round_trips_through_the_context_and_raises_on_request() -> None:
    batch = BatchResult("work", CompletionReason.ALL_COMPLETED, 3, 2, 1, (ItemError(1, "ValueError", "bad"),))
    data = {key("work"): batch.to_dict()}
    assert read(data, "work") == batch and batch.not_started == 0 and batch.has_failure
    with pytest.raises(FanoutFailed, match=r"1 of 3 items of 'work' failed .*item 1 ValueError: bad"):
        batch.raise_if_failed()
    BatchResult("ok", CompletionReason.ALL_COMPLETED, 2, 2, 0).raise_if_failed()  # nothing failed: no raise
    with pytest.raises(KeyError, match="'other' has no batch result"):
        read(data, "other")
    assert brief_error(4, None) == ItemError(4, "Error", "")


def test_on_failure_is_checked_at_the_definition() -> None:
    with pytest.raises(WorkflowDefinitionError, match="on_failure must be 'batch' or 'fail', not 'ignore'"):
        parallel(lambda ctx: None, on_failure="ignore")
    with pytest.raises(WorkflowDefinitionError, match="on_failure must be"):
        map_items(items=lambda ctx: [], run=lambda ctx: None, on_failure=None)  # type: ignore[arg-type]
    assert parallel(lambda ctx: None).on_failure is OnFailure.BATCH, "the reference's default"
