"""``loom``: one command line for executions, the local stack, chaos and the DLQ.

Each subcommand group lives in its own module with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

GROUPS = ("loom.cli.executions", "loom.cli.waits", "loom.cli.local", "loom.cli.chaos")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loom", description="Durable workflows on AWS serverless, proven locally.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in GROUPS:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
