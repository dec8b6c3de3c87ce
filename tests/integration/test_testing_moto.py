"""loom.testing's moto backend: the same runner on the table template.yaml describes."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, step, workflow
from engine.config import EngineConfig
from engine.errors import ExecutionNotFound
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


def test_retention_on_the_moto_backend_stamps_hides_and_deletes_as_dynamodb_ttl_would(reg: Registry) -> None:
    with WorkflowTest(reg, backend="moto", config=EngineConfig(retention_seconds=2 * 86400)) as test:
        eid = test.start("flaky")
        test.run(eid)
        test.advance(300)  # past the grace: the sweeper stamps the history too
        ddb, table = test.store._db, test.store._table  # type: ignore[attr-defined]
        items = ddb.query(
            TableName=table, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": f"EXEC#{eid}"}}
        )["Items"]
        assert len(items) == 2 and all("expires_at" in i for i in items)
        test.advance(86400)
        assert test.status(eid) == "COMPLETED"
        test.advance(86400)
        with pytest.raises(ExecutionNotFound, match="no execution"):
            test.status(eid)
        assert ddb.scan(TableName=table)["Count"] == 0  # TTL's deletes, done by expire()
