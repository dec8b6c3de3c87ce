"""How a fan-out step describes itself (GET /workflows, the console's Workflows page), its
kind in the history (engine/progress.py), the item pages' bounds and the row of a fan-out
with no record of its own (engine/fan_view.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine import map_items, parallel, progress
from engine.errors import InvalidInput
from engine.fan_view import open_status, page_bounds, unrecorded
from engine.join import JoinRecord, JoinVerdict
from engine.retry import RetryPolicy
from engine.state import Execution, Status, StepRecord, StepStatus
from engine.workflow import build_spec, child, step

UNDO = RetryPolicy(max_attempts=5, base=1, max_delay=30)
ITEM = RetryPolicy(max_attempts=2, base=1)


def reserve(ctx: Any) -> dict[str, Any]:
    return {}


def release(ctx: Any) -> dict[str, Any]:
    return {}


def authorize(ctx: Any) -> dict[str, Any]:
    return {}


def lines(ctx: Any) -> list[Any]:
    return []


def price(ctx: Any) -> dict[str, Any]:
    return {}


def handler(ctx: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {}


def test_a_parallel_step_shows_its_branches_window_policy_and_compensations() -> None:
    spec = build_spec(
        "order",
        [
            parallel(
                step(reserve, compensate=release, compensate_retry=UNDO),
                step(authorize, retry=ITEM),
                child("shipping"),
                name="reserve",
                max_concurrency=2,
                min_successful=2,
            ),
            price,
        ],
    )
    fan = spec.describe()["steps"][0]
    assert (fan["index"], fan["name"], fan["kind"], fan["max_concurrency"]) == (0, "reserve", "parallel", 2)
    assert fan["completion"] == {
        "min_successful": 2,
        "tolerated_failures": None,
        "tolerated_failure_percentage": None,
        "all": False,
    }
    assert fan["compensate"] == "each committed item's own compensation"
    branches = fan["branches"]
    assert [(b["index"], b["name"], b["kind"]) for b in branches] == [
        (0, "reserve", "step"),
        (1, "authorize", "step"),
        (2, "child_shipping", "child"),
    ]
    assert branches[0]["compensate"] == "release" and branches[0]["compensate_retry"]["max_attempts"] == 5
    assert branches[1]["retry"]["max_attempts"] == 2 and "compensate" not in branches[1]
    assert branches[2]["workflow"] == "shipping"
    assert progress.step_kinds(spec) == ["parallel", "step"]


def test_a_map_shows_its_items_run_policy_and_catch() -> None:
    spec = build_spec(
        "prices",
        [
            map_items(
                items=lines, run=price, name="prices", max_concurrency=5, tolerated_failure_percentage=10, catch=handler
            )
        ],
    )
    fan = spec.describe()["steps"][0]
    assert (fan["kind"], fan["items"], fan["max_concurrency"], fan["catch"]) == ("map", "lines", 5, "handler")
    assert fan["completion"]["tolerated_failure_percentage"] == 10.0 and fan["completion"]["all"] is False
    assert [(b["name"], b["kind"]) for b in fan["branches"]] == [("price", "step")]
    assert fan["retry"] == fan["branches"][0]["retry"], "the item runs under the workflow's policy here"
    assert "compensate" not in fan, "nothing to undo"
    every = build_spec("w", [map_items(items=lines, run="child_flow")]).describe()["steps"][0]
    assert every["completion"]["all"] is True
    assert every["branches"][0]["kind"] == "child" and every["branches"][0]["workflow"] == "child_flow"


@pytest.mark.parametrize(
    ("n", "start", "count", "bounds"),
    [
        (53, 0, 50, (50, 50)),
        (53, 50, 50, (3, None)),
        (3, 0, 50, (3, None)),
        (3, 7, 50, (0, None)),
        (0, 0, 5, (0, None)),
    ],
)
def test_item_pages_cover_their_range_and_say_where_the_next_starts(
    n: int, start: int, count: int, bounds: tuple[int, int | None]
) -> None:
    assert page_bounds(n, start, count) == bounds


def test_a_bad_page_is_refused() -> None:
    for start, count in ((-1, 5), (0, 0)):
        with pytest.raises(InvalidInput):
            page_bounds(5, start, count)


def _ex(status: Status, step_at: int = 0) -> Execution:
    return Execution("e1", "prices", status, step_at, 1, {}, {}, 100.0, 100.0)


def test_which_fanout_gets_a_row_of_its_own_and_its_status() -> None:
    spec = build_spec("prices", [map_items(items=lines, run=price, name="prices"), price])
    done = StepRecord("e1", 0, "prices", StepStatus.COMPLETED, started_at=100.0, finished_at=101.0)
    assert unrecorded(_ex(Status.RUNNING), [], spec) == (0, "prices", "map")
    assert unrecorded(_ex(Status.RUNNING), [done], spec) is None, "a joined map has its record"
    assert unrecorded(_ex(Status.RUNNING, 1), [done], spec) is None, "not at a fan-out step"
    assert unrecorded(_ex(Status.COMPENSATING), [], spec) is None
    assert unrecorded(_ex(Status.RUNNING), [], None) is None, "a workflow not deployed here"
    join = JoinRecord("e1", 0, 3, 1, 2)
    assert open_status(_ex(Status.RUNNING), join) == "RUNNING"
    assert open_status(_ex(Status.RUNNING), replace(join, decided=JoinVerdict.FAIL.value)) == "FAILED"
    assert open_status(_ex(Status.FAILED), join) == "FAILED"
    assert open_status(_ex(Status.CANCELLED), join) == "CANCELLED"
