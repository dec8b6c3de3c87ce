"""The seams between primitives (issue #19) on loom.testing's in-memory store: a redrive after a
failed catch, a late heartbeat, a caught fan-out's undo, a crash between two branches' undos."""

from __future__ import annotations

from typing import Any

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, parallel, step, workflow
from engine.errors import WaitEnded
from engine.ports import FaultPoint
from engine.workflow import wait_for_callback
from loom.testing import WorkflowTest

ONCE = RetryPolicy(max_attempts=1)


class World:
    def __init__(self) -> None:
        self.fallback_down = True
        self.tokens: list[str] = []
        self.undone: list[str] = []


def _registry(world: World) -> Registry:
    reg = Registry()

    def declined(ctx: Any) -> Any:
        raise NonRetryableError("card declined")

    def fallback(ctx: Any, error: Any) -> Any:
        if world.fallback_down:
            raise NonRetryableError("the fallback is down too")
        return {"paid_by": "invoice"}

    def reserve(ctx: Any) -> Any:
        return {f"r{ctx.item_index}": True}

    def undo(ctx: Any) -> Any:
        world.undone.append(ctx.idempotency_key)

    def refuse(ctx: Any) -> Any:
        raise NonRetryableError("refused")

    def submit(ctx: Any, token: str) -> None:
        world.tokens.append(token)

    def ship(ctx: Any) -> Any:
        raise NonRetryableError("no courier")

    @workflow("seam_caught", registry=reg)
    class Caught:
        steps = [step(declined, name="charge", catch=fallback)]
        retry = ONCE

    @workflow("seam_beat", registry=reg)
    class Beat:
        # A missed heartbeat starts a new attempt only because the wait asks for it.
        steps = [
            wait_for_callback(
                "job",
                submit=submit,
                timeout=86_400,
                heartbeat_timeout=600,
                retry=RetryPolicy(max_attempts=2, jitter="none"),
            )
        ]

    @workflow("seam_caught_fanout", registry=reg)
    class CaughtFanout:
        steps = [
            parallel(step(reserve, compensate=undo), step(refuse), name="prepare", catch=fallback, on_failure="fail")
        ]
        retry = ONCE

    @workflow("seam_strict", registry=reg)
    class Strict:
        steps = [
            parallel(
                step(reserve, compensate=undo, compensate_retry=ONCE),
                step(reserve, compensate=undo, compensate_retry=ONCE),
                name="prepare",
            ),
            step(ship, name="ship"),
        ]
        retry = ONCE

    return reg


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def wt(world: World) -> Any:
    with WorkflowTest(_registry(world)) as test:
        yield test


def test_a_redrive_after_a_failed_catch_handler_can_complete(wt: WorkflowTest, world: World) -> None:
    wt.start("seam_caught", {}, execution_id="c1")
    assert wt.run("c1").status.value == "FAILED" and len(wt.dead_letters) == 1
    world.fallback_down = False
    wt.engine.redrive_failed("c1")
    ex = wt.run("c1")
    assert ex.status.value == "COMPLETED" and ex.context["paid_by"] == "invoice"
    assert len(wt.dead_letters) == 1, "no second DLQ record"


def test_a_heartbeat_after_its_deadline_is_refused(wt: WorkflowTest, world: World) -> None:
    wt.start("seam_beat", {}, execution_id="h1")
    assert wt.run("h1").status.value == "WAITING"
    wt.clock.set(wt.execution("h1").wait.heartbeat_deadline + 1)
    with pytest.raises(WaitEnded):
        wt.heartbeat(world.tokens[-1])
    wt.engine.sweep()
    assert wt.execution("h1").attempt == 2


def test_a_caught_fanout_whose_handler_fails_undoes_its_committed_branch(wt: WorkflowTest, world: World) -> None:
    wt.start("seam_caught_fanout", {}, execution_id="f1")
    assert wt.run("f1").status.value == "COMPENSATED"
    assert world.undone == ["f1:0:0:compensate"]


def test_a_crash_between_two_branches_undos_is_not_a_lost_worker(wt: WorkflowTest, world: World) -> None:
    wt.crash(FaultPoint.AFTER_STEP, step=0, phase="compensate")  # after the first undo's commit
    wt.start("seam_strict", {}, execution_id="x1")
    ex = wt.run("x1")
    assert wt.faults.fired and ex.status.value == "COMPENSATED", ex.error
    assert world.undone == ["x1:0:1:compensate", "x1:0:0:compensate"]
