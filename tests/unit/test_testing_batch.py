"""A fan-out's batch result on loom.testing (issue #22 item 1): the same rule as against moto
(tests/integration/test_fanout_batch.py), on the in-memory store and the virtual clock."""

from __future__ import annotations

from typing import Any

from engine import NonRetryableError, Registry, RetryPolicy, map_items, parallel, step, workflow
from engine.state import StepStatus
from loom.testing import WorkflowTest

ONCE = RetryPolicy(max_attempts=1)


def _registry(runs: list[int]) -> Registry:
    reg = Registry()

    def price(ctx: Any) -> Any:
        runs.append(ctx.item_index)
        if ctx.item < 0:
            raise NonRetryableError(f"line {ctx.item_index} has a negative quantity")
        return ctx.item * 2

    def report(ctx: Any) -> Any:
        batch = ctx.batch("prices")
        return {"reason": batch.reason.value, "bad": [e.index for e in batch.errors], "skipped": batch.not_started}

    def strict(ctx: Any) -> None:
        ctx.batch("prices").raise_if_failed()

    def branch(ctx: Any) -> Any:
        raise NonRetryableError("no stock")

    lines = map_items(items=lambda ctx: ctx.data["lines"], run=price, name="prices", max_concurrency=1, retry=ONCE)

    @workflow("batch_report", registry=reg)
    class Report:
        steps = [lines, step(report)]

    @workflow("batch_strict", registry=reg)
    class Strict:
        steps = [lines, step(strict)]
        retry = ONCE

    @workflow("batch_fail", registry=reg)
    class Fail:
        steps = [parallel(step(branch), name="prices", on_failure="fail")]
        retry = ONCE

    return reg


def test_a_failed_item_stops_new_starts_and_the_next_step_reads_why() -> None:
    runs: list[int] = []
    with WorkflowTest(_registry(runs)) as wt:
        wt.start("batch_report", {"lines": [1, -1, 3, 4]}, execution_id="b1")
        ex = wt.run("b1")
        assert ex.status.value == "COMPLETED"
        assert runs == [0, 1], "no tolerance: the failure stops new starts"
        assert ex.context["reason"] == "FAILURE_TOLERANCE_EXCEEDED" and ex.context["bad"] == [1]
        assert ex.context["skipped"] == 2 and ex.context["prices"] == [2, None, None, None]
        assert wt.store.get_item("b1", 0, 2, 1).status is StepStatus.NOT_STARTED


def test_every_item_ending_is_all_completed_and_raising_fails_the_step() -> None:
    with WorkflowTest(_registry([])) as wt:
        wt.start("batch_report", {"lines": [1, 2]}, execution_id="b2")
        assert wt.run("b2").context["reason"] == "ALL_COMPLETED"
        wt.start("batch_strict", {"lines": [-1]}, execution_id="b3")
        ex = wt.run("b3")
        assert ex.status.value == "FAILED" and ex.error["type"] == "FanoutFailed"
        assert "1 of 1 items of 'prices' failed" in ex.error["message"]


def test_on_failure_fail_keeps_the_strict_rule() -> None:
    with WorkflowTest(_registry([])) as wt:
        wt.start("batch_fail", {}, execution_id="b4")
        ex = wt.run("b4")
        assert ex.status.value == "FAILED" and ex.error["type"] == "FanoutFailed"
        assert ex.error["reason"] == "completion_policy"
