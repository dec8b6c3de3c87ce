"""``loom callback succeed|fail|heartbeat TOKEN`` and ``loom signal ID NAME --payload JSON``.

The token is a secret: it is read from the command line (or ``-`` for stdin, which keeps it
out of the shell history) and never printed back.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loom.cli import output
from loom.cli.executions import EXIT_USAGE, _common, _input, _run
from loom.client import ControlPlane


def register(sub: Any) -> None:
    common = _common()
    cb = sub.add_parser("callback", help="complete a wait_for_callback from outside", description="callbacks")
    cb_sub = cb.add_subparsers(dest="callback_command", metavar="ACTION")
    cb_sub.required = True
    for action, text in (
        ("succeed", "complete the wait with a result (--result JSON)"),
        ("fail", "fail the wait's attempt (its retry policy decides what follows)"),
        ("heartbeat", "push the wait's heartbeat timeout back"),
    ):
        p = cb_sub.add_parser(action, help=text, description=text, parents=[common])
        p.add_argument("token", help="the token submit() handed out, or - to read it from stdin")
        if action == "succeed":
            p.add_argument("--result", default="{}", help="a JSON object, @FILE, or - for stdin (default {})")
        if action == "fail":
            p.add_argument("--type", dest="error_type", default="Rejected", help="the error's type (default Rejected)")
            p.add_argument("--message", default="", help="the error's message")
        p.set_defaults(func=lambda args, a=action: _run(lambda c, ns: callback(c, ns, a), args))

    p = sub.add_parser("signal", help="send a named signal to an execution", description="signals", parents=[common])
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("--payload", default="{}", help="a JSON object, @FILE, or - for stdin (default {})")
    p.set_defaults(func=lambda args: _run(signal, args))


def callback(client: ControlPlane, args: argparse.Namespace, action: str) -> int:
    token = (sys.stdin.readline() if args.token == "-" else args.token).strip()
    if not token:
        output.error("the callback token is empty: pass the token submit() handed out, or - to read it from stdin")
        return EXIT_USAGE
    body: dict[str, Any] | None = None
    try:
        if action == "succeed":
            body = {"result": _input(args.result)}
    except ValueError as exc:
        output.error(str(exc).replace("--input", "--result"))
        return EXIT_USAGE
    if action == "fail":
        body = {"error": {"type": args.error_type, "message": args.message}}
    answer = client.callback(token, action, body)
    if args.json:
        output.as_json(answer)
    else:
        what = "repeat: nothing changed" if answer.get("repeat") else "accepted"
        print(f"callback {action} {what} (execution {answer['execution_id']}, step {answer['step']})")
    return 0


def signal(client: ControlPlane, args: argparse.Namespace) -> int:
    try:
        payload = _input(args.payload)
    except ValueError as exc:
        output.error(str(exc).replace("--input", "--payload"))
        return EXIT_USAGE
    answer = client.signal(args.id, args.name, payload)
    if args.json:
        output.as_json(answer)
    else:
        state = "consumed by its wait" if answer.get("delivered") else "kept until a wait takes it"
        print(f"signal {answer['name']} sent to {answer['execution_id']}: {state}")
    return 0
