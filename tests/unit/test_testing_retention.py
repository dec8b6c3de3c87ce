"""loom.testing honours retention on its virtual clock: an ended execution is there until its
retention passes, then gone with everything it left, as DynamoDB's TTL would leave it."""

from __future__ import annotations

import pytest

from engine import Registry, step, workflow
from engine.config import EngineConfig
from engine.errors import ExecutionNotFound
from engine.workflow import wait_for_signal
from loom.testing import WorkflowTest

DAY = 86400.0


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @workflow("approval", registry=reg)
    class Approval:
        steps = [step(lambda ctx: {"asked": True}, name="ask"), wait_for_signal("approved")]

    return reg


def test_an_ended_execution_stays_for_its_retention_and_then_is_gone_with_its_items(reg: Registry) -> None:
    with WorkflowTest(reg) as test:
        eid = test.start("approval")
        test.run(eid)
        test.signal(eid, "approved", {"by": "ann"})
        assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
        test.advance(29 * DAY)
        assert test.status(eid) == "COMPLETED" and len(test.history(eid)) == 2
        test.advance(1 * DAY)
        with pytest.raises(ExecutionNotFound, match=r"retention has passed|no execution"):
            test.status(eid)
        assert test.store.history(eid) == [] and test.store.signals(eid) == []


def test_a_running_execution_never_expires_and_retention_zero_keeps_what_ended(reg: Registry) -> None:
    with WorkflowTest(reg) as test:
        waiting = test.start("approval")
        test.run(waiting)
        test.advance(400 * DAY)
        assert test.status(waiting) == "WAITING"
    with WorkflowTest(reg, config=EngineConfig(retention_seconds=0)) as test:
        eid = test.start("approval")
        test.run(eid)
        test.signal(eid, "approved")
        test.run(eid)
        test.advance(4000 * DAY)
        assert test.status(eid) == "COMPLETED"
