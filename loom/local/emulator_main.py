"""moto's server in its own process, for the embedded emulator.

Prints ``{"port": N}`` on stdout once it listens (so port 0 works without a
race), then serves until stdin closes or a signal arrives. Every process of the
stack talks to this one server, so they all share its state.

With ``--state-file``, the supervisor writes ``persist`` on stdin once it has put the
saved state back; from then on the data is saved there every ``--snapshot-every``
seconds while requests arrive, and once more when stdin closes (see loom.local.snapshot).

    python -m loom.local.emulator_main --host 127.0.0.1 --port 0 [--state-file F]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from loom.local import moto_speed, snapshot


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
        self.dirty = threading.Event()  # a request arrived since the last snapshot

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not str(environ.get("PATH_INFO", "")).startswith("/moto-api"):
            self.dirty.set()
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


class Saver:
    """Saves the emulator's data to ``path`` once persistence is switched on."""

    def __init__(self, app: AtomicDynamoDB, path: Path | None, every: float) -> None:
        self.app, self.path, self.every = app, path, every
        self.on = threading.Event()
        self._lock = threading.Lock()

    def save(self) -> None:
        if self.path is None or not self.on.is_set():
            return
        with self._lock:
            self.app.dirty.clear()
            snapshot.write(self.path, snapshot.capture(self.app.lock))

    def run(self) -> None:
        while True:
            self.on.wait()
            time.sleep(self.every)
            if self.app.dirty.is_set():
                try:
                    self.save()
                except Exception as exc:  # keep serving; say why the data is not being saved
                    sys.stderr.write(f"emulator: could not save state to {self.path}: {exc!r}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loom.local.emulator_main")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state-file", type=Path, default=None, help="save the data here (see `persist`)")
    parser.add_argument("--snapshot-every", type=float, default=2.0, help="seconds between saves while busy")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request is noise here
    moto_speed.apply()  # a backlog must not make every SQS call cost a pass per message
    app = AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))
    server = make_server(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, name="moto", daemon=True).start()
    host, port = str(server.server_address[0]), int(server.server_address[1])
    sys.stdout.write(json.dumps({"host": host, "port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    saver = Saver(app, args.state_file, args.snapshot_every)
    threading.Thread(target=saver.run, name="saver", daemon=True).start()
    # The supervisor holds our stdin: when it goes away, for whatever reason, so do we.
    for line in sys.stdin:
        if line.strip() == "persist":
            saver.on.set()
    saver.save()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
