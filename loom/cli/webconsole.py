"""``loom console``: serve the web console for a deployed Function URL or the running local stack."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from loom import stackfile
from loom.cli.output import error
from loom.client import ClientError
from loom.console import app

DEFAULT_PORT = app.DEFAULT_PORT

DESCRIPTION = """\
Serve the web console on 127.0.0.1 and print its URL (with a session token; open it in a browser).

With --url, the console shows a deployed stack: each call to its Function URL is SigV4-signed
here with your AWS credentials (the default chain), which never reach the browser. Without
--url it shows the local stack that `loom up` runs (`loom up` serves one itself too).
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "console",
        help="serve the web console (executions, timelines, workflows, DLQ) on 127.0.0.1",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", help="a deployed control plane's Function URL (https://<id>.lambda-url.<region>.on.aws/)"
    )
    parser.add_argument("--region", help="region to sign for (default: from the URL, else the AWS config)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port on 127.0.0.1 (0: any free port; default 5232, or a free one when 5232 is taken, "
        "e.g. by the console of `loom up`)",
    )
    parser.add_argument(
        "--state-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="the local stack's state dir (default: $LOOM_STATE_DIR, else ./.loom)",
    )
    parser.set_defaults(func=cmd_console)


def build(args: argparse.Namespace) -> Any:
    """The console server for ``args``; ClientError says why there is none."""
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ClientError(f"--port must be between 0 and 65535, not {args.port}")
    if args.url:
        return _on_port(lambda port: app.for_url(args.url, args.region, port), args.port)
    info = stackfile.read()
    if not info:
        raise ClientError(stackfile.no_stack_message())
    if not stackfile.supervisor_running(info):
        raise ClientError(stackfile.not_running_message(info))
    return _on_port(lambda port: app.for_stackfile(info, port), args.port)


def _on_port(make: Any, asked: int | None) -> Any:
    """The port asked for, or the default one, else (default only) any free one."""
    if asked is not None:
        return make(asked)
    try:
        return make(DEFAULT_PORT)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
        return make(0)


def cmd_console(args: argparse.Namespace) -> int:
    try:
        server = build(args)
    except ClientError as exc:
        error(str(exc))
        return 1
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            error(
                f"port {args.port} on 127.0.0.1 is taken (--port): pass --port with another port (0 picks a free one)"
            )
            return 1
        raise
    sys.stderr.write(f"loom: console for {server.proxy.target_url} ({server.mode})\n")
    sys.stderr.write(f"  open: {server.url}\n  Ctrl-C stops it\n")
    sys.stderr.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
