"""Milliseconds of the engine's step commit (``DynamoStore.commit_step``, one UpdateItem) in moto
with the emulator's replacements, with the emulator's validation pass and tree copy
(``moto_speed.traverse``, ``moto_speed.copy_node``) and with moto's own.

moto in-process, the table as template.yaml makes it, the two ways alternated round by round so
that the machine's drift hits both. Used by docs/notes/2026-12-07-night-speed.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/validation_cost.py
"""

from __future__ import annotations

import statistics

from condition_parse import CALLS, commit_store, timed  # the same commit, store and timing

from loom.local.emulator import moto_speed

ROUNDS = 10
Traverser = moto_speed.ast_nodes.DepthFirstTraverser
Node = moto_speed.ast_nodes.Node


def main() -> None:
    moto_traverse = Traverser.traverse
    for owner, name, value in moto_speed.expression_replacements():
        setattr(owner, name, value)
    ours, moto = [], []
    with commit_store() as store:
        for _ in range(ROUNDS):
            Traverser.traverse, Node.__deepcopy__ = moto_speed.traverse, moto_speed.copy_node
            ours.append(timed(store))
            Traverser.traverse, Node.__deepcopy__ = moto_traverse, None  # deepcopy's own way
            moto.append(timed(store))
    print(f"the engine's commit, moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  moto's validation passes and tree copy:       {statistics.median(moto):.3f} ms")
    print(f"  the emulator's validation passes and copy:    {statistics.median(ours):.3f} ms")


if __name__ == "__main__":
    main()
