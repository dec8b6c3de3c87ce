"""Milliseconds of the engine's step commit (``DynamoStore.commit_step``, one UpdateItem) in moto,
with the emulator's replacements, with and without the kept condition parse
(``moto_speed.parse_condition``).

moto in-process, the table as template.yaml makes it, the two ways alternated round by round so
that the machine's drift hits both. Used by docs/notes/2026-12-07-fork-server.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/condition_parse.py
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

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


def alternated(
    rounds: int,
    ours: Callable[[], None],
    moto: Callable[[], None],
    measure: Callable[[DynamoStore], float] = timed,
) -> tuple[float, float]:
    """Median ms of the engine's commit, or of what ``measure`` times (template.yaml's table, moto
    in-process with the emulator's replacements), with ``ours`` then ``moto`` set up, round by
    round, so that the machine's drift hits both (docs/notes/validation_cost.py and
    new_item_cost.py too)."""
    for owner, name, value in moto_speed.expression_replacements():
        setattr(owner, name, value)
    with_ours, with_moto = [], []
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        store = DynamoStore(session.client("dynamodb"), create_resources(session)["Table"], 4)
        for _ in range(rounds):
            ours()
            with_ours.append(measure(store))
            moto()
            with_moto.append(measure(store))
    return statistics.median(with_ours), statistics.median(with_moto)


def _parse(kept: bool) -> Callable[[], None]:
    def set_up() -> None:
        parse = moto_speed.parse_condition if kept else moto_speed._moto_condition_parse
        moto_speed.ConditionExpressionParser.parse = parse

    return set_up


def main() -> None:
    kept, moto = alternated(ROUNDS, _parse(kept=True), _parse(kept=False))
    print(f"the engine's commit, moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  condition parsed every call: {moto:.3f} ms")
    print(f"  condition parse kept:        {kept:.3f} ms")


if __name__ == "__main__":
    main()
