"""``loom localstack install`` / ``loom localstack status``: host-mode LocalStack, installed on request.

`loom up --emulator localstack` never downloads anything: where no Docker engine answers it
runs the LocalStack this command installed, and otherwise says to run it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from loom.cli.output import error
from loom.local.emulator import localstack_host


def register(sub: Any) -> None:
    group = sub.add_parser(
        "localstack",
        help="install host-mode LocalStack (for `loom up --emulator localstack` without Docker)",
        description=f"LocalStack {localstack_host.LOCALSTACK_VERSION} in host mode: a Python "
        f"{'.'.join(map(str, localstack_host.PYTHON_VERSION))} virtual environment under the state dir "
        "(or $LOOM_LOCALSTACK_HOME), built from PyPI on request. `loom up --emulator localstack` starts it "
        "where no LocalStack answers and no Docker engine does, and `loom down` stops it.",
    )
    actions = group.add_subparsers(dest="localstack_command", metavar="ACTION")
    actions.required = True
    install = actions.add_parser("install", help="build the venv from PyPI (once; a second run only checks)")
    install.add_argument(
        "--python",
        default=None,
        help="the Python 3.13 interpreter to build it with (default: $LOOM_LOCALSTACK_PYTHON, pyenv's 3.13, "
        "python3.13 on PATH)",
    )
    install.set_defaults(func=cmd_install)
    status = actions.add_parser("status", help="where host-mode LocalStack is installed, and whether it answers")
    status.add_argument("--endpoint-url", default="http://localhost:4566", help="where it would answer")
    status.set_defaults(func=cmd_status)


def cmd_install(args: argparse.Namespace) -> int:
    home = localstack_host.localstack_home()
    done = localstack_host.installed(home)
    if done is not None:
        sys.stderr.write(f"loom: LocalStack {done.version} (host mode) is installed in {done.venv}\n")
        return 0
    try:
        python = args.python or localstack_host.find_python()
        sys.stderr.write(
            f"loom: installing LocalStack {localstack_host.LOCALSTACK_VERSION} (host mode) into "
            f"{localstack_host.venv_dir(home)} with {python}: {' '.join(localstack_host.REQUIREMENTS)}\n"
        )
        t0 = time.monotonic()
        installation = localstack_host.install(home, python, sys.stderr)
    except localstack_host.HostModeError as exc:
        error(str(exc))
        return 1
    sys.stderr.write(
        f"loom: installed LocalStack {installation.version} in {installation.venv} "
        f"({time.monotonic() - t0:.0f}s); `loom up --emulator localstack` starts it where no Docker engine answers\n"
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    home = localstack_host.localstack_home()
    done = localstack_host.installed(home)
    where = f"installed in {done.venv}" if done else f"not installed ({localstack_host.INSTALL_COMMAND})"
    print(f"host mode: {where}")
    answer = localstack_host.health(args.endpoint_url)
    if answer is None:
        print(f"{args.endpoint_url}: no LocalStack answers")
    else:
        print(f"{args.endpoint_url}: LocalStack {answer.get('version')} answers")
    return 0
