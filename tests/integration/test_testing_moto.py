"""loom.testing's moto backend: the same runner on the table template.yaml describes."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, step, workflow
from loom.testing import WorkflowTest

pytestmark = pytest.mark.integration


def call(ctx):
    if ctx.attempt <= 2:
        raise RuntimeError(f"attempt {ctx.attempt}")
    return {"n": 1}


@pytest.fixture
def reg() -> Registry:
    reg = Registry()

    @workflow("flaky", registry=reg)
    class Flaky:
        steps = [step(call, retry=RetryPolicy(max_attempts=5, base=600))]

    return reg


def test_the_moto_backend_runs_the_same_workflow_on_the_templates_table(reg: Registry) -> None:
    with WorkflowTest(reg, backend="moto") as test:
        eid = test.start("flaky")
        assert test.run(eid).status.value == "COMPLETED"  # type: ignore[union-attr]
        assert test.steps(eid) == [("call", "COMPLETED", ["failed", "failed", "completed"])]
        assert type(test.store).__name__ == "DynamoStore"
