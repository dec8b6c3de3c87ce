"""``loom``: one command line for executions, the local stack, chaos and the DLQ.

Each subcommand group lives in its own module with ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

GROUPS = (
    "loom.cli.executions",
    "loom.cli.waits",
    "loom.cli.logs",
    "loom.cli.local",
    "chaos.cli",
    "loom.cli.webconsole",
    "loom.cli.localstack",
)


def _version() -> str:
    try:
        return version("loom")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loom", description="Durable workflows on AWS serverless, proven locally.")
    parser.add_argument("--version", action="version", version=f"loom {_version()}")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the local stack's state dir for any command (default: $LOOM_STATE_DIR, else ./.loom)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in GROUPS:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def _quiet_stdout() -> None:
    """The reader went away (``loom list | head -1``): drop the rest without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "state_dir", None):
        # The environment, so that a detached supervisor and every helper see the same dir.
        os.environ["LOOM_STATE_DIR"] = str(Path(args.state_dir).resolve())
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
