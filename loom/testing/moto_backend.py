"""The moto backend: the table as template.yaml describes it, on moto's DynamoDB in this process.

Only the table moves to moto; the queue stays virtual, because moto's SQS delays run on
the wall clock and a test must be able to skip them.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

from engine.adapters.dynamodb import DynamoStore
from engine.ports import Store
from loom.testing.moto_resources import moto_kept, template_resources
from loom.ttl import reap


def moto_store(resources: ExitStack, shards: int) -> Store:
    import boto3

    # moto needs credentials to sign with; these never leave the process.
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    # Kept, not reset: a mock the caller already runs keeps its own resources, and the next
    # WorkflowTest empties the template's instead of building them again.
    resources.enter_context(moto_kept())
    session = boto3.Session(region_name="us-east-1")
    refs: dict[str, Any] = template_resources(session)
    return DynamoStore(session.client("dynamodb"), refs["Table"], shards)


def reap_expired(store: Store, now: float) -> int:
    """DynamoDB's TTL on the moto table, which keeps expired items for ever (loom/ttl.py)."""
    assert isinstance(store, DynamoStore)
    return reap(store._db, store._table, "expires_at", now)


FAR_FUTURE = 1e12  # a date no wake time reaches (year 33658), and a number DynamoDB accepts


def earliest_wake(store: Store, shards: int, *, skip_waits: bool = True) -> float | None:
    """The earliest wake time in the due index, read the way the sweeper reads it (without
    ``skip_waits``, WAITING executions' timeouts and BLOCKED ones' rechecks do not count; an
    ended execution's retention stamp never does: nothing of the workflow runs then)."""
    found: list[float] = []
    for shard in range(shards):
        ids, _ = store.due(shard, FAR_FUTURE, 100, None)
        for execution_id in ids:
            ex = store.get_execution(execution_id)
            if (
                ex is not None
                and ex.next_wake_at is not None
                and (skip_waits or ex.status.value not in ("WAITING", "BLOCKED"))
                and not (ex.terminal and ex.parent is None)
            ):
                found.append(ex.next_wake_at)
                break  # the index is in wake order: the first that counts is the shard's earliest
    return min(found) if found else None
