"""Requests per sweep with and without a firing, on moto (docs/notes/2026-12-02-schedules.md)."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from engine import Registry, workflow
from engine.adapters.dynamodb import item_size
from engine.clock import FakeClock
from engine.config import EngineConfig
from engine.runtime import Engine
from loom.testing.moto_backend import moto_store
from loom.testing.queue import VirtualQueue


def main() -> None:
    calls: Counter[str] = Counter()
    reg = Registry()
    workflow("nightly_report", registry=reg, schedule="cron(0 2 * * ? *)")(type("N", (), {"steps": [lambda c: None]}))
    with ExitStack() as stack:
        store = moto_store(stack, 4)

        def count(model: Any, **_: Any) -> None:
            calls.update([model.name])

        store._db.meta.events.register("before-call.dynamodb.*", count)
        clock = FakeClock(datetime(2026, 12, 2, 1, 58, tzinfo=UTC).timestamp())
        engine = Engine(registry=reg, store=store, queue=VirtualQueue(clock), clock=clock, config=EngineConfig())
        engine.sweep()  # the first tick: the cursor
        calls.clear()
        clock.advance(60)
        engine.sweep()
        print("tick, nothing due:", dict(calls))
        calls.clear()
        clock.advance(65)
        report = engine.sweep()
        print("tick that fires:", dict(calls), "fired", report.fired)
        answer = store._db.query(
            TableName=store._table,
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues={":p": {"S": "LOOM#SCHEDULES"}},
            ConsistentRead=True,
            ReturnConsumedCapacity="TOTAL",
        )
        print("cursor query consumed:", answer.get("ConsumedCapacity"), "items", answer["Count"])
        print("cursor item bytes:", item_size(answer["Items"][0]))


if __name__ == "__main__":
    main()
