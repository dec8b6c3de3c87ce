"""Milliseconds of the local stack's TTL look (``loom.ttl.reap``: a Scan of the whole table for
expired items, nothing expired) in moto with the emulator's replacements, on tables the size of a
soak's, with and without the emulator's Scan (``moto_scan.scan``).

moto in-process, the table as template.yaml makes it, filled through the engine's own store (an
execution item and six step records per execution, as a soak's chains write them), the two ways
alternated round by round. Used by docs/notes/2026-12-07-night-speed.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/scan_cost.py
"""

from __future__ import annotations

import statistics
import sys
import time

import boto3
from moto import mock_aws
from moto.dynamodb.models.table import Table

from engine.adapters.dynamodb import DynamoStore
from engine.state import Attempt, AttemptOutcome, Execution, Status
from loom import ttl
from loom.local.emulator import moto_scan, moto_speed
from loom.template import create_resources

ROUNDS = 3
STEPS = 6
NOW = 1796660000.0


def fill(store: DynamoStore, executions: int) -> None:
    attempt = Attempt(attempt=1, started_at=NOW, finished_at=NOW + 0.4, outcome=AttemptOutcome.COMPLETED)
    for i in range(executions):
        execution_id = f"soak1-{i:05d}"
        store.create_execution(
            Execution(execution_id, "chain", Status.RUNNING, 0, 1, {"n": i}, {"n": i}, NOW, NOW, next_wake_at=NOW + 60)
        )
        for step in range(STEPS):
            store.commit_step(execution_id, step, f"step{step}", attempt, {"ok": True, "step": step, "by": "x" * 40})


def timed(ddb: object, table: str) -> float:
    began = time.perf_counter()
    assert ttl.reap(ddb, table, "expires_at", NOW - 86400) == 0
    return (time.perf_counter() - began) * 1000


def main(sizes: list[int]) -> None:
    moto_speed.apply()
    fast, moto = moto_scan.scan, moto_scan._moto_scan
    print(
        f"one TTL look over the whole table (ms, median of {ROUNDS}), moto in-process with the emulator's replacements:"
    )
    print("| executions | items | moto's Scan | the emulator's Scan |")
    print("|---|---|---|---|")
    for executions in sizes:
        with mock_aws():
            session = boto3.Session(region_name="us-east-1")
            refs = create_resources(session)
            ddb = session.client("dynamodb")
            fill(DynamoStore(ddb, refs["Table"], 4), executions)
            items = ddb.describe_table(TableName=refs["Table"])["Table"]["ItemCount"]
            kept, plain = [], []
            for _ in range(ROUNDS):
                Table.scan, Table.all_items = fast, moto_scan.all_items  # type: ignore[method-assign]
                kept.append(timed(ddb, refs["Table"]))
                Table.scan, Table.all_items = moto, moto_scan._moto_all_items  # type: ignore[method-assign]
                plain.append(timed(ddb, refs["Table"]))
            moto_scan.install()
        print(f"| {executions} | {items} | {statistics.median(plain):.0f} | {statistics.median(kept):.0f} |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [300, 1000, 3000])
