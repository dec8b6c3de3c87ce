"""Milliseconds of the engine's step commit (``DynamoStore.commit_step``, one UpdateItem) in moto,
with the emulator's replacements, with and without the kept condition parse
(``moto_speed.parse_condition``).

moto in-process, the table as template.yaml makes it, the two ways alternated round by round so
that the machine's drift hits both. Used by docs/notes/2026-12-07-fork-server.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/condition_parse.py
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from collections.abc import Iterator

import boto3
from moto import mock_aws

from engine.adapters.dynamodb import DynamoStore
from engine.state import Attempt, AttemptOutcome
from loom.local.emulator import moto_speed
from loom.template import create_resources

ROUNDS = 8
CALLS = 200


def timed(store: DynamoStore) -> float:
    execution = uuid.uuid4().hex
    attempt = Attempt(attempt=1, started_at=1796660000.1, finished_at=1796660000.5, outcome=AttemptOutcome.COMPLETED)
    began = time.perf_counter()
    for index in range(CALLS):
        store.commit_step(execution, index, f"step{index}", attempt, {"ok": True})
    return (time.perf_counter() - began) / CALLS * 1000


@contextlib.contextmanager
def commit_store() -> Iterator[DynamoStore]:
    """The engine's store on template.yaml's table, in moto in-process (docs/notes/validation_cost.py too)."""
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        refs = create_resources(session)
        yield DynamoStore(session.client("dynamodb"), refs["Table"], 4)


def main() -> None:
    parser = moto_speed.ConditionExpressionParser
    for owner, name, value in moto_speed.expression_replacements():
        setattr(owner, name, value)
    kept, moto = [], []
    with commit_store() as store:
        for _ in range(ROUNDS):
            parser.parse = moto_speed.parse_condition
            kept.append(timed(store))
            parser.parse = moto_speed._moto_condition_parse
            moto.append(timed(store))
    print(f"the engine's commit, moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  condition parsed every call: {statistics.median(moto):.3f} ms")
    print(f"  condition parse kept:        {statistics.median(kept):.3f} ms")


if __name__ == "__main__":
    main()
