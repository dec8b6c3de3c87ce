"""Milliseconds of the engine's step commit (``DynamoStore.commit_step``, one UpdateItem) in moto
with the emulator's replacements, with the emulator's validation pass and tree copy
(``moto_speed.traverse``, ``moto_speed.copy_node``) and with moto's own.

moto in-process, the table as template.yaml makes it, the two ways alternated round by round so
that the machine's drift hits both. Used by docs/notes/2026-12-07-night-speed.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/validation_cost.py
"""

from __future__ import annotations

from condition_parse import CALLS, alternated  # the same commit, store, timing and alternation

from loom.local.emulator import moto_speed

ROUNDS = 10
Traverser = moto_speed.ast_nodes.DepthFirstTraverser
Node = moto_speed.ast_nodes.Node
MOTO_TRAVERSE = Traverser.traverse  # read before any replacement is installed


def _ours() -> None:
    Traverser.traverse, Node.__deepcopy__ = moto_speed.traverse, moto_speed.copy_node


def _moto() -> None:
    Traverser.traverse, Node.__deepcopy__ = MOTO_TRAVERSE, None  # deepcopy's own way


def main() -> None:
    ours, moto = alternated(ROUNDS, _ours, _moto)
    print(f"the engine's commit, moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  moto's validation passes and tree copy:       {moto:.3f} ms")
    print(f"  the emulator's validation passes and copy:    {ours:.3f} ms")


if __name__ == "__main__":
    main()
