"""Milliseconds of the engine's two writes a step in moto with the emulator's replacements: its
commit (``DynamoStore.commit_step``, an UpdateItem that makes a new step item) with a new item
validated once or twice, and its advance (``DynamoStore.put_execution``, a PutItem of the
execution item) with the item built in one pass or by moto's own constructor, and with the
request's attribute values taken as they came or walked by moto's parser.

moto in-process, the table as template.yaml makes it, the two ways alternated round by round so
that the machine's drift hits both. Used by docs/notes/2026-12-08-machine-speed.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/new_item_cost.py
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from condition_parse import CALLS, alternated  # the same commit, store, timing and alternation
from moto.core import parse
from moto.dynamodb.models import dynamo_type

from engine.adapters.dynamodb import DynamoStore
from engine.state import Execution, Status
from loom.local.emulator import moto_speed

ROUNDS = 8
SERVES = moto_speed._FirstPass.serves


def _once() -> None:
    moto_speed._FirstPass.serves = SERVES  # type: ignore[method-assign]


def _twice() -> None:
    moto_speed._FirstPass.serves = lambda *_: False  # type: ignore[method-assign]


def _advance(store: DynamoStore) -> float:
    ex = Execution(
        id=uuid.uuid4().hex,
        workflow="plain_steps",
        status=Status.RUNNING,
        current_step=0,
        version=1,
        input={"n": 1},
        context={},
        created_at=1796660000.0,
        updated_at=1796660000.0,
        next_wake_at=1796660100.0,
        attempt_started_at=1796660000.0,
        fingerprint="f" * 16,
        workflow_version=1,
    )
    store.create_execution(ex)
    began = time.perf_counter()
    for _ in range(CALLS):
        new = replace(ex, current_step=ex.current_step + 1, version=ex.version + 1)
        store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        ex = new
    return (time.perf_counter() - began) / CALLS * 1000


def _built(ours: bool) -> Callable[[], None]:
    def set_up() -> None:
        dynamo_type.Item.__init__ = moto_speed.item_init if ours else moto_speed._moto_item_init

    return set_up


def _parsed(ours: bool) -> Callable[[], None]:
    def set_up() -> None:
        parse.BaseJSONParser._parse_structure = moto_speed.parse_structure if ours else moto_speed._moto_parse_structure

    return set_up


def main() -> None:
    once, twice = alternated(ROUNDS, _once, _twice)
    built, moto_built = alternated(ROUNDS, _built(ours=True), _built(ours=False), _advance)
    dynamo_type.Item.__init__ = moto_speed.item_init
    taken, walked = alternated(ROUNDS, _parsed(ours=True), _parsed(ours=False), _advance)
    print(f"moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  the commit, a new item validated twice (moto): {twice:.3f} ms")
    print(f"  the commit, a new item validated once:         {once:.3f} ms")
    print(f"  the advance, the item built by moto:           {moto_built:.3f} ms")
    print(f"  the advance, the item built in one pass:       {built:.3f} ms")
    print(f"  and its values walked by moto's parser:        {walked:.3f} ms")
    print(f"  and its values taken as they came:             {taken:.3f} ms")


if __name__ == "__main__":
    main()
