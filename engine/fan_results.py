"""A fan-out step's results: what merges into the context at the join, and the paged reader.

map:      ``context[name] = [result_0, ..., result_n-1]`` (None for a failed or unstarted item)
          when it fits the execution item; otherwise ``context[name]`` is the marker
          ``{"$loom": "results", "step": i, "count": n, "stored": true}`` and the results
          stay in the item records, read by ``ctx.results(name)`` a page at a time.
parallel: each branch's dict merges into the context in branch order, as consecutive
          steps would. Branch results cannot be paged: too big fails the step (ResultTooLarge).
both:     ``context["<name>:batch"]``, the batch result (engine/batch_result.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import batch_result
from engine.batch_result import BatchResult, brief_error
from engine.errors import ResultTooLarge
from engine.fanout_spec import FanKind, FanoutSpec
from engine.join import JoinRecord
from engine.parts import Parts
from engine.state import Execution, StepRecord, StepStatus

MARKER = "$loom"


def in_order(records: list[StepRecord], n: int) -> list[Any]:
    """Results by item index; None where an item failed or never ran."""
    out: list[Any] = [None] * n
    for r in records:
        if r.status is StepStatus.COMPLETED and 0 <= r.index < n:
            out[r.index] = r.result
    return out


def stored_marker(step: int, n: int) -> dict[str, Any]:
    return {MARKER: "results", "step": step, "count": n, "stored": True}


def step_result(
    ex: Execution, st: FanoutSpec, join: JoinRecord, records: list[StepRecord], fits: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """What the fan-out step commits and merges; ``fits`` raises ResultTooLarge (attempts.check_result)."""
    results = in_order(records, join.n)
    batch = {batch_result.key(st.name): summary(st, join, records).to_dict()}
    if st.kind is FanKind.PARALLEL:
        merged: dict[str, Any] = {}
        for r in results:
            merged.update(r or {})
        merged.update(batch)
        fits(merged)
        return merged
    try:
        fits({st.name: results, **batch})
        return {st.name: results, **batch}
    except ResultTooLarge:
        # Never silent: the marker says where the results are, and the history says why.
        return {st.name: stored_marker(ex.current_step, join.n), **batch}


def summary(st: FanoutSpec, join: JoinRecord, records: list[StepRecord]) -> BatchResult:
    """The batch as the item records have it (the join's counters can run ahead of a page)."""
    ok = sum(1 for r in records if r.status is StepStatus.COMPLETED)
    failed = sorted((r for r in records if r.status is StepStatus.FAILED), key=lambda r: r.index)
    errors = tuple(brief_error(r.index, r.error) for r in failed[: batch_result.MAX_ERRORS])
    return BatchResult(
        step=st.name,
        reason=st.policy.reason(join.n, ok, len(failed)),
        total=join.n,
        succeeded=ok,
        failed=len(failed),
        errors=errors,
        errors_truncated=len(failed) > len(errors),
    )


def reader(parts: Parts, execution_id: str) -> Callable[[int, int, int], list[Any]]:
    """``ctx.results``' page reader: (step, start, count) -> results of those items, in order."""

    def page(step: int, start: int, count: int) -> list[Any]:
        join = parts.store.get_join(execution_id, step)
        if join is None:
            return [None] * count
        records = parts.store.fan_items(execution_id, step, join.shards, start, count)
        out: list[Any] = [None] * count
        for r in records:
            if r.status is StepStatus.COMPLETED:
                out[r.index - start] = r.result
        return out

    return page
