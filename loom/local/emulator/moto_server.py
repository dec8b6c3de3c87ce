"""moto's server in its own process, for the embedded emulator.

Prints ``{"port": N, "admin": {...}, "api_key": ...}`` on stdout once it listens (so port 0
works without a race), then serves until stdin closes or a signal arrives. Every process of the
stack talks to this one server, so they all share its state.

It authenticates and authorizes like AWS (see DESIGN.md, "Security: the local stack"): moto
checks every request's SigV4 signature and the caller's IAM policies from the first request on
(``INITIAL_NO_AUTH_ACTION_COUNT=0``, set by loom.local.emulator.backends), and the one admin user is made
here, in the process, before the port opens: no request is ever let through unauthenticated, so
none can slip in first. Its key goes out on stdout (a pipe only the supervisor holds). In front
of moto, :class:`Gate` refuses any browser (a request with ``Origin``) and ``/moto-api/`` (reset,
data dump, dashboard, reset-auth) without the stack's key; moto's own CORS is off
(``MOTO_DISABLE_GLOBAL_CORS``), and no ``Access-Control-*`` header leaves.

With ``--state-file``, the supervisor writes ``persist`` on stdin once it has put the
saved state back; from then on the data is saved there every ``--snapshot-every``
seconds while requests arrive, and once more when stdin closes (see loom.local.emulator.snapshot).

    python -m loom.local.emulator.moto_server --host 127.0.0.1 --port 0 [--state-file F]
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto import settings
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from loom.local.emulator import meter, moto_http, moto_iam, moto_index, moto_speed, moto_tokens, snapshot
from loom.local.emulator.meter import RequestMeter
from loom.local.emulator.moto_http import KeepAliveHandler

ACCOUNT_ID = "123456789012"
ADMIN_USER = "loom-admin"
API_KEY_HEADER = "HTTP_X_LOOM_EMULATOR_KEY"  # x-loom-emulator-key
_ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass(frozen=True)
class Refusal:
    status: str
    error_type: str
    message: str


def refusal(environ: Mapping[str, Any], expected_key: str) -> Refusal | None:
    """Why the gate refuses a request (None: pass it to moto, which checks signature and policy)."""
    path = str(environ.get("PATH_INFO", ""))
    if environ.get("HTTP_ORIGIN") is not None:
        return Refusal("403 Forbidden", "AccessDeniedException", "a browser (a request with Origin) gets nothing here")
    if path.startswith("/moto-api"):
        given = str(environ.get(API_KEY_HEADER) or "")
        if given and hmac.compare_digest(given.encode(), expected_key.encode()):
            return None
        return Refusal("403 Forbidden", "AccessDeniedException", "/moto-api/ answers only the stack's own processes")
    if not environ.get("HTTP_AUTHORIZATION") and "X-Amz-Signature=" not in str(environ.get("QUERY_STRING", "")):
        # moto would route an unsigned request to S3, whose check fails with a 500: answer as AWS does.
        if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB"):
            return Refusal(
                "400 Bad Request",
                "com.amazon.coral.service#MissingAuthenticationTokenException",
                "Request is missing Authentication Token",
            )
        return Refusal("403 Forbidden", "MissingAuthenticationToken", "Request is missing Authentication Token")
    return None


class Gate:
    """WSGI in front of moto: no browser, no moto-api without the key, no CORS header out."""

    def __init__(self, app: Callable[..., Iterable[bytes]], api_key: str) -> None:
        self.app, self.api_key = app, api_key

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = refusal(environ, self.api_key)
        if refused is not None:
            body = json.dumps({"__type": refused.error_type, "message": refused.message}).encode()
            start_response(refused.status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        def no_cors(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, no_cors)


def make_admin() -> dict[str, str]:
    """The stack's admin user and key, made in moto's IAM directly (no request, so nothing slips in first)."""
    backend = iam_backends[ACCOUNT_ID]["aws"]
    user = backend.create_user("us-east-1", ADMIN_USER)
    backend.put_user_policy(ADMIN_USER, "loom-admin", json.dumps(_ADMIN_POLICY))
    key = backend.create_access_key(ADMIN_USER)
    return {"access_key_id": key.access_key_id, "secret_access_key": key.secret_access_key, "user_arn": user.arn}


def check_settings() -> None:
    """Refuse to serve an emulator that would answer unauthenticated requests or reflect CORS."""
    if settings.INITIAL_NO_AUTH_ACTION_COUNT != 0 or not settings.DISABLE_GLOBAL_CORS:
        raise SystemExit(
            "emulator: refusing to start without INITIAL_NO_AUTH_ACTION_COUNT=0 and MOTO_DISABLE_GLOBAL_CORS=true "
            "(loom.local.emulator.backends sets both)"
        )


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
    parser = argparse.ArgumentParser(prog="loom.local.emulator.moto_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state-file", type=Path, default=None, help="save the data here (see `persist`)")
    parser.add_argument("--snapshot-every", type=float, default=2.0, help="seconds between saves while busy")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request is noise here
    check_settings()
    moto_speed.apply()  # a backlog must not make every SQS call cost a pass per message
    moto_index.apply()  # an index Query reads the items with its hash key, not the table (after moto_speed)
    moto_tokens.apply()  # a resent transaction (its answer lost) must not apply twice, as in DynamoDB
    moto_iam.apply()  # the (action, resource) pairs AWS authorises each DynamoDB and SQS call as
    moto_http.apply()  # request headers parsed without the email package when they are plain
    if os.environ.get("LOOM_EMULATOR_METER"):  # scripts/bench.py --local-throughput: CPU per operation
        meter.METER = RequestMeter(Path(os.environ["LOOM_EMULATOR_METER"]))
        threading.Thread(target=meter.METER.run, name="meter", daemon=True).start()
    admin, api_key = make_admin(), secrets.token_urlsafe(32)
    app = AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))
    # Keep-alive: a function process's calls reuse one connection (see loom.local.emulator.moto_http).
    server = make_server(args.host, args.port, Gate(app, api_key), threaded=True, request_handler=KeepAliveHandler)
    threading.Thread(target=server.serve_forever, name="moto", daemon=True).start()
    host, port = str(server.server_address[0]), int(server.server_address[1])
    started = {"host": host, "port": port, "pid": os.getpid(), "admin": admin, "api_key": api_key}
    sys.stdout.write(json.dumps(started) + "\n")
    sys.stdout.flush()
    saver = Saver(app, args.state_file, args.snapshot_every)
    threading.Thread(target=saver.run, name="saver", daemon=True).start()
    # The supervisor holds our stdin: when it goes away, for whatever reason, so do we.
    for line in sys.stdin:
        if line.strip() == "persist":
            saver.on.set()
    saver.save()
    if meter.METER is not None:
        meter.METER.dump()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
