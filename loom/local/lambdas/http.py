"""The control plane's Function URL, locally: HTTP in, payload 2.0 event, HTTP out.

In the order Lambda's front end does it: the request's framing is checked from its headers
alone (a body over the limit is refused unread), then its SigV4 signature (AuthType
AWS_IAM), then the function is invoked. A function that fails answers 502 with a fixed
body; the details go to the logs only.
"""

from __future__ import annotations

import ipaddress
import json
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.log import get_logger
from loom.local.emulator.sigv4 import Principal, amz_now, verify
from loom.local.lambdas.events import (
    HttpRequest,
    HttpResponse,
    function_error_response,
    function_url_event,
    function_url_response,
    ignored_response_fields,
    trace_header,
)
from loom.local.lambdas.pool import FunctionPool, PoolClosed

MAX_BODY = 6 * 1024 * 1024  # Lambda's synchronous payload limit
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_ASCII_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() also takes '²' and '٣', which int() refuses or misreads
_CALLBACK_PATH = re.compile(r"^(/callbacks/)[^/]+")


class AuthType(Enum):
    AWS_IAM = "AWS_IAM"
    NONE = "NONE"


@dataclass(frozen=True)
class UrlAuth:
    """The Function URL's AuthType and, for AWS_IAM, the principals IAM knows locally."""

    kind: AuthType
    region: str
    principals: Mapping[str, Principal] = field(default_factory=dict)
    clock: Callable[[], datetime] = amz_now

    @classmethod
    def iam(cls, region: str, *principals: Principal) -> UrlAuth:
        return cls(AuthType.AWS_IAM, region, {p.access_key: p for p in principals})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FramingError(Exception):
    """The request's headers alone say it cannot be served (no or bad length, too large)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> HttpResponse:
        body = json.dumps({"Message": self.message}, separators=(",", ":")).encode()
        return HttpResponse(self.status, [("content-type", "application/json")], body)


def body_length(method: str, headers: Mapping[str, str], limit: int = MAX_BODY) -> int:
    """How many body bytes to read, decided from the headers before reading any.

    ``headers`` has lower-cased names, each once (repeats comma-joined).
    """
    raw = headers.get("content-length")
    if headers.get("transfer-encoding"):
        raise FramingError(411, "Length Required")  # a Function URL needs the length up front
    if raw is None:
        if method.upper() in BODY_METHODS:
            raise FramingError(411, "Length Required")
        return 0
    values = {v.strip() for v in raw.split(",")}
    if len(values) != 1 or not _ASCII_DIGITS.fullmatch(next(iter(values))):
        raise FramingError(400, "Bad Request")
    length = int(next(iter(values)))
    if length > limit:
        raise FramingError(413, "Request must be smaller than 6291456 bytes for the InvokeFunction operation")
    return length


def check_target(target: str) -> None:
    """A request target with a fragment: the signature cannot cover what follows ``#`` (clients never
    send it), so it is a malformed request, answered 400 before any signature check."""
    if "#" in target:
        raise FramingError(400, "Bad Request")


def loggable_path(path: str) -> str:
    """The path without a callback token (a bearer secret): logs never hold one."""
    return _CALLBACK_PATH.sub(r"\1<token>", path)


class FunctionUrlServer:
    """A threading HTTP server on ``host:port`` invoking ``pool`` per request."""

    def __init__(self, pool: FunctionPool, auth: UrlAuth, host: str = "127.0.0.1", port: int = 0) -> None:
        if auth.kind is AuthType.NONE and not is_loopback(host):
            raise ValueError(
                f"refusing to serve a Function URL with AuthType NONE on {host}: "
                "anyone who can reach it could call the control plane; bind 127.0.0.1 or use AWS_IAM"
            )
        if auth.kind is AuthType.AWS_IAM and not auth.principals:
            raise ValueError("an AWS_IAM Function URL needs at least one principal to accept")
        self.pool = pool
        self.auth = auth
        self._log = get_logger(component="function-url", function=pool.function)
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        bound, self.port = self._server.server_address[:2]
        # An AF_INET server's address is a str; the stubs allow bytes for AF_UNIX ones.
        self.host = bound.decode() if isinstance(bound, (bytes, bytearray)) else bound
        self._thread = threading.Thread(target=self._server.serve_forever, name="function-url", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FunctionUrlServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def authorize(self, request: HttpRequest) -> tuple[dict[str, Any] | None, HttpResponse | None]:
        """``requestContext.authorizer.iam`` for a request AWS would let through, else the 403."""
        if self.auth.kind is AuthType.NONE:
            return None, None
        headers = _joined(request.headers)
        url = f"http://{request.host}{request.path}" + (f"?{request.query}" if request.query else "")
        verdict = verify(
            request.method,
            url,
            headers,
            request.body,
            principals=self.auth.principals,
            region=self.auth.region,
            now=self.auth.clock(),
        )
        if verdict.principal is None:
            assert verdict.failure is not None
            self._log.warning("function_url.forbidden", reason=verdict.failure.value, path=loggable_path(request.path))
            return None, HttpResponse(*verdict.answer())
        return verdict.principal.iam_authorizer(), None

    def handle(self, request: HttpRequest) -> HttpResponse:
        iam, refusal = self.authorize(request)
        if refusal is not None:
            return refusal
        trace = trace_header()
        event = function_url_event(request, url_id=f"local-{self.port}", iam=iam, trace_id=trace)
        request_id = event["requestContext"]["requestId"]
        try:
            inv = self.pool.invoke(event, request_id=request_id, trace_id=trace)
        except PoolClosed:
            return function_error_response(status=503)
        if inv.outcome != "ok":
            # The error type and message are in the invocation log, the stack trace in the function's.
            return function_error_response()
        ignored = ignored_response_fields(inv.result)
        if ignored:
            self._log.warning("function_url.response_fields_ignored", request_id=request_id, fields=ignored)
        try:
            return function_url_response(inv.result)
        except (TypeError, ValueError) as exc:
            self._log.error("function_url.invalid_response", request_id=request_id, error=str(exc))
            return function_error_response()


def _joined(pairs: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


def _make_handler(server: FunctionUrlServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The head and the body go out in two sends: with Nagle on, the body waits for the
        # client's delayed ACK of the head, 40 ms on every answer of a kept-alive connection.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            try:
                check_target(self.path)
                length = body_length(self.command, _joined(list(self.headers.items())))
            except FramingError as exc:
                # The body (if any) is left unread: the connection cannot be reused after it.
                self.close_connection = True
                self._send(exc.response(), close=True)
                return
            body = self.rfile.read(length) if length > 0 else b""
            path, _, query = self.path.partition("?")
            request = HttpRequest(
                method=self.command,
                path=path or "/",
                query=query,
                headers=list(self.headers.items()),
                body=body,
                source_ip=self.client_address[0],
                host=self.headers.get("host") or f"{server.host}:{server.port}",
                protocol=self.request_version,
                scheme="http",
                port=server.port,
            )
            self._send(server.handle(request))

        def _send(self, response: HttpResponse, close: bool = False) -> None:
            self.send_response(response.status)
            for name, value in response.headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            self.send_header("content-length", str(len(response.body)))
            if close:
                self.send_header("connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # every invocation is already logged by the stack

    return Handler
