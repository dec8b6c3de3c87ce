"""moto's server in its own process, for the embedded emulator.

Prints ``{"port": N}`` on stdout once it listens (so port 0 works without a
race), then serves until stdin closes or a signal arrives. Every process of the
stack talks to this one server, so they all share its state.

    python -m loom.local.emulator_main --host 127.0.0.1 --port 0
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class AtomicDynamoDB:
    """WSGI wrapper that runs DynamoDB requests one at a time.

    moto reads the item, evaluates the ConditionExpression and writes in separate
    steps with no lock, so two concurrent conditional writes can both succeed.
    DynamoDB makes each conditional write atomic, and Loom's protocol (one commit
    per step, one winner per version) depends on it. SQS is left concurrent: its
    long polls block inside the handler.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loom.local.emulator_main")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request is noise here
    app = AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))
    server = make_server(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, name="moto", daemon=True).start()
    host, port = str(server.server_address[0]), int(server.server_address[1])
    sys.stdout.write(json.dumps({"host": host, "port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    # The supervisor holds our stdin: when it goes away, for whatever reason, so do we.
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
