"""The moto backend: the table as template.yaml describes it, on moto's DynamoDB in this process.

Only the table moves to moto; the queue stays virtual, because moto's SQS delays run on
the wall clock and a test must be able to skip them.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

from engine.ports import Store


def moto_store(resources: ExitStack, shards: int) -> Store:
    import boto3
    from moto import mock_aws

    from engine.adapters.dynamodb import DynamoStore
    from loom.template import create_resources

    # moto needs credentials to sign with; these never leave the process.
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    resources.enter_context(mock_aws())
    session = boto3.Session(region_name="us-east-1")
    refs: dict[str, Any] = create_resources(session)
    return DynamoStore(session.client("dynamodb"), refs["Table"], shards)


FAR_FUTURE = 1e12  # a date no wake time reaches (year 33658), and a number DynamoDB accepts


def earliest_wake(store: Store, shards: int) -> float | None:
    """The earliest wake time in the due index, read the way the sweeper reads it."""
    found: list[float] = []
    for shard in range(shards):
        ids, _ = store.due(shard, FAR_FUTURE, 1, None)
        for execution_id in ids:
            ex = store.get_execution(execution_id)
            if ex is not None and ex.next_wake_at is not None:
                found.append(ex.next_wake_at)
    return min(found) if found else None
