"""The reference's fan-out edges on loom.testing (issue #22 item 6): an empty parallel is over as
it opens and the workflow goes on; a map without a window completes (its window is
counted against moto in tests/integration/test_fanout.py)."""

from __future__ import annotations

from typing import Any

from engine import Registry, map_items, parallel, step, workflow
from loom.testing import WorkflowTest


def _registry(seen: list[int]) -> Registry:
    reg = Registry()

    def after(ctx: Any) -> Any:
        return {"after": sorted(k for k in ctx.data if k != "after")}

    def price(ctx: Any) -> Any:
        seen.append(ctx.item_index)
        return ctx.item * 2

    def lines(ctx: Any) -> Any:
        return ctx.data["lines"]

    @workflow("fan_empty", registry=reg)
    class Empty:
        steps = [parallel(name="nothing"), step(after)]

    @workflow("fan_wide", registry=reg)
    class Wide:
        steps = [map_items(items=lines, run=price, name="prices", max_concurrency=0)]

    return reg


def test_an_empty_parallel_completes_and_the_next_step_runs() -> None:
    with WorkflowTest(_registry([])) as wt:
        wt.start("fan_empty", {"order": 1}, execution_id="e1")
        ex = wt.run("e1")
        assert ex.status.value == "COMPLETED"
        assert ex.context["after"] == ["nothing:batch", "order"], "only the empty batch merged"
        assert ex.context["nothing:batch"]["reason"] == "ALL_COMPLETED"
        steps = [(r.name, r.status.value) for r in wt.history("e1")]
        assert steps == [("nothing", "COMPLETED"), ("after", "COMPLETED")]


def test_a_map_without_a_window_runs_every_item_once_in_order() -> None:
    seen: list[int] = []
    with WorkflowTest(_registry(seen)) as wt:
        wt.start("fan_wide", {"lines": list(range(40))}, execution_id="w1")
        ex = wt.run("w1")
        assert ex.status.value == "COMPLETED"
        assert ex.context["prices"] == [i * 2 for i in range(40)]
        assert sorted(seen) == list(range(40)), "each item once"
