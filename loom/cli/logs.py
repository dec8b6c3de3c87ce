"""``loom logs ID``: one execution's lines from the local stack's log.

The functions log JSON lines (engine/log.py) with ``execution_id`` bound on every line
about an execution; the control plane's request lines carry the path instead. Where the
log is: ``--file``; else the file the running stack was told (``loom up --log-file``, in
its stack file); else ``<state dir>/stack.log``, where ``loom up -d`` writes. A foreground
``loom up`` without ``--log-file`` prints to its terminal and keeps no file to read.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from loom import stackfile
from loom.cli import follow, output
from loom.cli.executions import execution_id
from loom.cli.timeline import local_time

SHOWN_FIRST = ("event", "level", "timestamp", "execution_id")


def register(sub: Any) -> None:
    help = "show one execution's lines from the local stack's log"
    p = sub.add_parser("logs", help=help, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument("--file", type=Path, help="the log to read (default: the running stack's, else STATE_DIR/stack.log)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    p.add_argument("--interval", type=follow.positive_seconds, default=0.5, help="seconds between looks with --follow")
    p.add_argument("--json", action="store_true", help="print the matching JSON lines as they are")
    p.add_argument(
        "--reads",
        action="store_true",
        help="also show the control plane's GET requests about it (`loom watch` and the console make one a second)",
    )
    p.add_argument("--state-dir", default=argparse.SUPPRESS, metavar="DIR", help="the local stack's state dir")
    p.set_defaults(func=run)


def log_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    info = stackfile.read()
    if info and info.get("log_file"):
        return Path(str(info["log_file"]))
    return stackfile.state_dir() / "stack.log"


def matches(record: dict[str, Any], wanted: str, reads: bool = True) -> bool:
    if record.get("execution_id") == wanted:
        return True
    path = record.get("path")  # api.request lines: /executions/<id>[/...]
    about = isinstance(path, str) and (path == f"/executions/{wanted}" or path.startswith(f"/executions/{wanted}/"))
    return about and (reads or record.get("method") != "GET")


def stale(path: Path, explicit: Path | None) -> str | None:
    """Why ``path`` is not the running stack's log, when it is not: a foreground `loom up` prints
    to its terminal, and a stack.log left by an earlier `loom up -d` would only mislead."""
    info = stackfile.read()
    if explicit is not None or not info or info.get("log_file") or not stackfile.supervisor_running(info):
        return None
    started = info.get("started_at")
    try:
        written = path.stat().st_mtime
    except OSError:
        return None
    if not isinstance(started, (int, float)) or written >= started - 1:
        return None
    return (
        f"{path} was last written before the running stack started: that stack runs in the foreground and "
        "prints its log to its terminal. Pass --file, or start it with `loom up -d` or `loom up --log-file FILE`"
    )


def parse(line: str) -> dict[str, Any] | None:
    """A JSON log line, or None for anything else (the emulator's and supervisor's text)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def readable(record: dict[str, Any], now: float) -> str:
    """``22:52:01 info  step.completed  step=1 attempt=1 step_name=charge duration_ms=3.2``."""
    when = _epoch(record.get("timestamp"))
    stamp = local_time(when, now) if when is not None else str(record.get("timestamp", "-"))
    rest = " ".join(f"{k}={output.cell(v, 200)}" for k, v in sorted(record.items()) if k not in SHOWN_FIRST)
    return f"{stamp} {record.get('level', '-')!s:<7} {record.get('event', '-')}  {rest}".rstrip()


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _emit(lines: list[str], args: argparse.Namespace, out: TextIO, now: float) -> int:
    shown = 0
    for line in lines:
        record = parse(line)
        if record is None or not matches(record, args.id, getattr(args, "reads", True)):
            continue
        out.write((line.strip() if args.json else readable(record, now)) + "\n")
        shown += 1
    out.flush()
    return shown


def run(args: argparse.Namespace, pace: follow.Pace | None = None, out: TextIO | None = None) -> int:
    pace = pace or follow.PACE
    out = out or sys.stdout
    path = log_path(args.file)
    why = stale(path, args.file)
    if why is not None:
        output.error(why)
        return 1
    try:
        fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except OSError as exc:
        output.error(
            f"cannot read the stack's log {path}: {exc.strerror}. `loom up -d` writes it there; "
            "a foreground `loom up` prints to its terminal unless given --log-file"
        )
        return 1
    with fh:
        shown = _emit(fh.readlines(), args, out, pace.now())
        if not args.follow:
            if shown == 0:
                sys.stderr.write(f"loom: no line about {args.id} in {path}\n")
            return 0
        return _follow(fh, path, args, out, pace)


def _follow(fh: TextIO, path: Path, args: argparse.Namespace, out: TextIO, pace: follow.Pace) -> int:
    partial = ""
    try:
        while True:
            chunk = fh.read()
            if not chunk:
                if path.exists() and path.stat().st_size < fh.tell():
                    fh.seek(0)  # the file was truncated or replaced: start over
                pace.sleep(args.interval)
                continue
            # A line still being written has no newline yet: keep it for the next read.
            text = partial + chunk
            complete, _, partial = text.rpartition("\n")
            if complete:
                _emit(complete.split("\n"), args, out, pace.now())
    except KeyboardInterrupt:
        return 0
