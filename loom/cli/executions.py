"""``loom start | status | history | list | cancel | workflows | migrate | dlq list | dlq redrive``.

Every command talks to the control plane: ``--url`` for a deployed Function URL (each
request SigV4-signed for service ``lambda`` with the default credential chain), else the
local stack that ``loom up`` started. Tables for people, ``--json`` for scripts; the exit
code is 1 on any error, with the API's message on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from loom.cli import follow, output, timeline
from loom.client import ApiError, ClientError, ControlPlane, resolve_target

EXIT_ERROR = 1
EXIT_USAGE = 2


def _common(request_timeout: bool = True) -> argparse.ArgumentParser:
    """``request_timeout=False`` for ``loom wait``, whose ``--timeout`` is how long to wait for the end."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("target")
    group.add_argument("--url", help="a deployed control plane's Function URL (requests are SigV4-signed)")
    group.add_argument("--region", help="region to sign for (default: from the URL, else the AWS config)")
    if request_timeout:
        group.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an answer (default 30)")
    parent.add_argument("--json", action="store_true", help="print the API's JSON answer")
    parent.add_argument(
        "--state-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="the local stack's state dir (default: $LOOM_STATE_DIR, else ./.loom)",
    )
    return parent


def execution_id(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an execution id cannot be empty")
    return text


def status_filter(text: str) -> str:
    """Any case; the control plane says which statuses exist (and refuses the rest)."""
    return text.strip().upper()


def register(sub: Any) -> None:
    common = _common()

    def add(name: str, fn: Callable[[ControlPlane, argparse.Namespace], int], help: str, parent: Any = sub) -> Any:
        parser = parent.add_parser(name, help=help, description=help, parents=[common])
        parser.set_defaults(func=lambda args: _run(fn, args))
        return parser

    p = add("start", start, "start an execution of WORKFLOW")
    p.add_argument("workflow", help="a registered workflow's name (`loom workflows` lists them)")
    p.add_argument("--input", default="{}", help="a JSON object, @FILE, or - for stdin (default {})")
    p.add_argument(
        "--id",
        dest="execution_id",
        type=execution_id,
        help="execution id (idempotent: the same id and input start once)",
    )

    add("status", status, "show an execution").add_argument("id", type=execution_id, help="the execution's id")
    p = add("history", history, "show every step of an execution: done, current and pending")
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument("--traceback", action="store_true", help="print each failed attempt's whole traceback")
    _register_follow(sub, common)

    p = add("list", list_, "list executions, newest first")
    p.add_argument("--status", type=status_filter, help="RUNNING, COMPLETED, FAILED, COMPENSATING... (any case)")
    p.add_argument("--workflow", help="only executions of this workflow")
    p.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    p.add_argument("--cursor", help="next_cursor of the previous page")

    p = add("cancel", cancel, "cancel an execution")
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument("--compensate", action="store_true", help="undo the committed steps of a saga (reverse order) first")
    add("workflows", workflows, "list the registered workflows, their steps and each version's open executions")
    p = add("migrate", migrate, "move a BLOCKED execution onto a deployed version, at the step OLD=NEW maps it to")
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument("mapping", nargs="*", type=step_mapping, help="OLD=NEW: an old step's name and its new step's")
    p.add_argument("--to-version", type=int, dest="version", help="the target version (default: the newest)")
    p.add_argument("--at", help="the old step it stopped at, when it had not run yet (the error says so)")

    dlq = sub.add_parser("dlq", help="look at and redrive the dead-letter queue", description="the dead-letter queue")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", metavar="COMMAND")
    dlq_sub.required = True
    add("list", dlq_list, "show the parked messages without removing them", dlq_sub).add_argument(
        "--limit", type=int, default=20
    )
    add("redrive", dlq_redrive, "redrive what the parked messages point at", dlq_sub).add_argument(
        "--limit", type=int, default=50
    )


def _register_follow(sub: Any, common: argparse.ArgumentParser) -> None:
    every = {"type": follow.positive_seconds, "default": 1.0, "help": "seconds between looks (default 1)"}
    p = sub.add_parser("watch", help=WATCH_HELP, description=WATCH_HELP, parents=[common])
    p.set_defaults(func=lambda args: _run(follow.watch, args))
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument("--interval", **every)
    p.add_argument("--traceback", action="store_true", help="print each failed attempt's whole traceback")
    p = sub.add_parser(
        "wait",
        help="block until an execution ends; the exit code tells how",
        description=WAIT_HELP,
        epilog=WAIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(request_timeout=False)],
    )
    p.set_defaults(func=lambda args: _run(follow.wait, args), timeout=30.0)
    p.add_argument("id", type=execution_id, help="the execution's id")
    p.add_argument(
        "--timeout", dest="wait_timeout", type=follow.positive_seconds, help="give up after this many seconds"
    )
    p.add_argument("--interval", **every)


WATCH_HELP = "follow an execution live: redraws its history on each change, ends with it"
WAIT_HELP = "block until an execution ends; the exit code tells its final status"
WAIT_CODES = (
    "exit codes: 0 COMPLETED, 1 error, 2 usage, 3 FAILED, 4 CANCELLED, 5 COMPENSATED,\n"
    "            6 COMPENSATION_FAILED, 7 --timeout passed first"
)


def _run(fn: Callable[[ControlPlane, argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        client = ControlPlane(resolve_target(args.url, args.region), timeout=args.timeout)
        return fn(client, args)
    except ApiError as exc:
        if args.json and exc.body is not None:
            output.as_json(exc.body)
        output.error(f"{exc.message} ({exc.code}, HTTP {exc.status})")
        return EXIT_ERROR
    except ClientError as exc:
        output.error(str(exc))
        return EXIT_ERROR


def _input(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ValueError(f"cannot read {text[1:]}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--input is not valid JSON: {exc}") from None


# ---------------------------------------------------------------- commands

EXECUTION_FIELDS = [
    ("id", "id"),
    ("workflow", "workflow"),
    ("status", "status"),
    ("doing", "doing"),
    ("current_step", "step"),
    ("current_step_name", "step name"),
    ("attempt", "attempt"),
    ("version", "version"),
    ("workflow_version", "workflow version"),
    ("blocked", "blocked"),
    ("unregistered", "not registered"),  # shown only when this stack lacks the workflow
    ("created_at", "created"),
    ("updated_at", "updated"),
    ("next_wake_at", "next wake"),
    ("expires_at", "expires"),  # retention's end: then it is gone (DESIGN.md, "Retention")
    ("error", "error"),
    ("input", "input"),
    ("output", "output"),
]


def start(client: ControlPlane, args: argparse.Namespace) -> int:
    try:
        payload = _input(args.input)
    except ValueError as exc:
        output.error(str(exc))
        return EXIT_USAGE
    code, body = client.start(args.workflow, payload, args.execution_id)
    if args.json:
        output.as_json(body)
    elif code == 201:
        print(f"started {body['id']} ({body['workflow']}, {body['status']})")
    else:
        print(f"already started: {body['id']} ({body['workflow']}, {body['status']}); same id and input")
    return 0


def status(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.status(args.id)
    if args.json:
        output.as_json(body)
        return 0
    state = timeline.state_of(body)
    if state:  # what it is doing, in the reader's time zone (an older control plane has no state)
        body = {**body, "doing": timeline.local_reason(state, float(body.get("read_at_epoch") or time.time()))}
    missing = timeline.unregistered_line(body)
    body = {**body, "unregistered": missing}
    shown = [f for f in EXECUTION_FIELDS if (f[0] != "doing" or state) and (f[0] != "unregistered" or missing)]
    output.fields(body, shown)
    return 0


def history(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.history(args.id)
    if args.json:
        output.as_json(body)
        return 0
    sys.stdout.write(timeline.render(body, time.time(), traceback=getattr(args, "traceback", False)))
    return 0


LIST_COLUMNS = [
    ("id", "id"),
    ("workflow", "workflow"),
    ("status", "status"),
    ("current_step", "step"),
    ("created_at", "created"),
    ("updated_at", "updated"),
]


def list_(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.list(status=args.status, workflow=args.workflow, limit=args.limit, cursor=args.cursor)
    if args.json:
        output.as_json(body)
        return 0
    rows = body.get("executions", [])
    missing = [r["unregistered"] for r in rows if r.get("unregistered")]  # an older control plane has none
    if not missing:
        output.table(rows, LIST_COLUMNS)
    else:  # which rows this stack cannot run, then each fix once (their pages say the same)
        marked = [{**r, "not_registered": (r.get("unregistered") or {}).get("code")} for r in rows]
        output.table(marked, [*LIST_COLUMNS, ("not_registered", "not registered")])
        for message in dict.fromkeys(m["message"] for m in missing):
            print(f"\nnot registered: {message}")
    if body.get("next_cursor"):
        print(f"\nmore: loom list --cursor {body['next_cursor']}")
    return 0


def cancel(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.cancel(args.id, compensate=args.compensate)
    if args.json:
        output.as_json(body)
    elif body.get("status") == "COMPENSATING":
        print(f"compensating {body['id']}: undoing from step {body['current_step']} down")
    else:
        print(f"cancelled {body['id']} at step {body['current_step']}")
    return 0


def step_mapping(value: str) -> tuple[str, str]:
    old, sep, new = value.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(f"{value!r} is not OLD=NEW (an old step's name = its new step's)")
    return old, new


def migrate(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.migrate(args.id, dict(args.mapping), version=args.version, at=args.at)
    if args.json:
        output.as_json(body)
    else:
        name = body.get("current_step_name") or body["current_step"]
        print(f"migrated {body['id']} to version {body.get('workflow_version')}: runs from step {name} on")
    return 0


def versions_cell(versions: list[dict[str, Any]] | None) -> str:
    """``v1: 3 open, v2: 0 open``; a version this deployment lacks says so (its executions are BLOCKED)."""
    cells = []
    for v in versions or []:
        label = f"v{v['version']}" if v["version"] is not None else "unversioned"
        cells.append(f"{label}: {v['open']} open" + ("" if v["registered"] else " (not deployed)"))
    return ", ".join(cells)


def workflows(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.workflows()
    if args.json:
        output.as_json(body)
        return 0
    rows = [
        {
            "name": w["name"],
            "count": len(w["steps"]),
            "versions": versions_cell(w.get("versions")),
            "schedule": schedule_cell(w.get("schedule")),
            "steps": " -> ".join(s["name"] for s in w["steps"]),
        }
        for w in body.get("workflows", [])
    ]
    columns = [("name", "workflow"), ("count", "steps"), ("versions", "versions (executions not ended)")]
    if any(row["schedule"] for row in rows):
        columns.append(("schedule", "schedule (next fire, UTC)"))
    output.table(rows, [*columns, ("steps", "order")], width=200)
    return 0


def schedule_cell(schedule: dict[str, Any] | None) -> str:
    """``rate(1 hour), next 2026-12-02 03:00``; a ``skip`` policy is named, the default is not."""
    if not schedule:
        return ""
    epoch = schedule.get("next_fire_epoch")
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch)) if epoch is not None else "none left"
    policy = "" if schedule.get("catch_up", "run_once") == "run_once" else f", catch_up={schedule['catch_up']}"
    return f"{schedule['expression']}, next {when}{policy}"


def dlq_list(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.dlq_list(args.limit)
    if args.json:
        output.as_json(body)
        return 0
    rows = []
    for m in body.get("messages", []):
        content = m.get("body")
        error = content.get("error") if isinstance(content, dict) else None
        rows.append({**m, "problem": error.get("message") if isinstance(error, dict) else error})
    output.table(
        rows,
        [
            ("message_id", "message"),
            ("kind", "kind"),
            ("execution_id", "execution"),
            ("receive_count", "receives"),
            ("sent_at", "parked"),
            ("problem", "error"),
        ],
    )
    print(f"\n{len(rows)} shown, about {body.get('approximate_count', 0)} in the DLQ")
    return 0


def dlq_redrive(client: ControlPlane, args: argparse.Namespace) -> int:
    body = client.dlq_redrive(args.limit)
    if args.json:
        output.as_json(body)
        return 0
    output.table(
        body.get("results", []),
        [("message_id", "message"), ("execution_id", "execution"), ("action", "action"), ("reason", "reason")],
    )
    summary = body.get("summary") or {}
    print("\n" + (", ".join(f"{n} {action}" for action, n in sorted(summary.items())) or "the DLQ is empty"))
    return 0
