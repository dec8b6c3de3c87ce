"""A small HTTP proxy between the functions and the AWS emulator that throttles on demand.

The functions' AWS_ENDPOINT_URL points here. While a throttling window is open,
a share of DynamoDB and SQS calls is answered the way AWS answers an
over-eager caller — HTTP 400 with ProvisionedThroughputExceededException or
ThrottlingException (DynamoDB) and RequestThrottled (SQS) — and every other
call is passed through untouched. botocore retries these; what gets through
its retries reaches the engine as TransientError.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
DDB_CODES = ("ProvisionedThroughputExceededException", "ThrottlingException")


def service_of(headers: Any, body: bytes) -> str:
    target = headers.get("X-Amz-Target", "") or ""
    if target.startswith("DynamoDB"):
        return "dynamodb"
    if target.startswith("AmazonSQS"):
        return "sqs"
    if b"Action=" in body[:200] or "sqs" in (headers.get("Authorization", "") or ""):
        return "sqs"
    return "other"


def throttled_response(service: str, headers: Any, rng: random.Random) -> tuple[str, bytes, dict[str, str]]:
    """(error code, body, headers) shaped like the real service's throttling answer."""
    if service == "dynamodb":
        code = rng.choice(DDB_CODES)
        message = (
            "The level of configured provisioned throughput for the table was exceeded. "
            "Consider increasing your provisioning level with the UpdateTable API."
            if code == DDB_CODES[0]
            else "Rate of requests exceeds the allowed throughput."
        )
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message}).encode()
        return code, body, {"Content-Type": "application/x-amz-json-1.0"}
    code = "RequestThrottled"
    if (headers.get("Content-Type", "") or "").startswith("application/x-amz-json"):
        body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": "Request is throttled."}).encode()
        return code, body, {"Content-Type": "application/x-amz-json-1.0", "x-amzn-query-error": f"{code};Sender"}
    xml = (
        '<?xml version="1.0"?><ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">'
        f"<Error><Type>Sender</Type><Code>{code}</Code><Message>Request is throttled.</Message></Error>"
        "<RequestId>chaos-throttle</RequestId></ErrorResponse>"
    )
    return code, xml.encode(), {"Content-Type": "text/xml"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A SIGKILLed worker drops its keep-alive connection: that is the chaos, not a proxy fault.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ThrottleProxy:
    """Start with ``start()``; aim it with ``upstream``; open a window with ``throttle(...)``."""

    def __init__(self, upstream: str | None = None, *, host: str = "127.0.0.1", seed: int = 0) -> None:
        self.upstream = upstream
        # service -> upstream where it is not ``upstream``: DynamoDB from the embedded emulator next
        # to a host-mode LocalStack, as the functions' AWS_ENDPOINT_URL_DYNAMODB says.
        self.routes: dict[str, str] = {}
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._share = 0.0
        self._until = 0.0
        self._services: frozenset[str] = frozenset()
        self.throttled: Counter[str] = Counter()  # "dynamodb:ProvisionedThroughputExceededException" -> n
        self.passed: Counter[str] = Counter()
        self._server = _Server((host, 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, name="chaos-throttle", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        # An AF_INET server's address is a str; the stubs allow bytes for AF_UNIX ones.
        return f"http://{host.decode() if isinstance(host, (bytes, bytearray)) else host}:{port}"

    def start(self) -> ThrottleProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ThrottleProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def throttle(self, share: float, seconds: float, services: tuple[str, ...] = ("dynamodb", "sqs")) -> None:
        """Answer ``share`` of the calls to ``services`` with throttling errors for ``seconds``."""
        if not 0 <= share <= 1:
            raise ValueError("share must be between 0 and 1")
        self._share, self._services = share, frozenset(services)
        self._until = time.monotonic() + seconds

    def calm(self) -> None:
        self._until = 0.0

    @property
    def active(self) -> bool:
        return time.monotonic() < self._until

    def _decide(self, service: str) -> bool:
        if service not in self._services or not self.active:
            return False
        with self._rng_lock:
            return self._rng.random() < self._share

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        local = threading.local()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Every function call of the chaos stack passes here on a kept-alive connection, and
            # the answer's head and body are two sends: with Nagle on, the body waited for the
            # worker's delayed ACK of the head, 40 ms a call, most of a soak's step time.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the functions log their calls
                return None

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                service = service_of(self.headers, body)
                if proxy._decide(service):
                    with proxy._rng_lock:
                        code, payload, extra = throttled_response(service, self.headers, proxy._rng)
                    proxy.throttled[f"{service}:{code}"] += 1
                    self.send_response(400)
                    for k, v in {**extra, "x-amzn-RequestId": "chaos-throttle"}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                deadline = time.monotonic() + 30
                while proxy.upstream is None and time.monotonic() < deadline:
                    time.sleep(0.05)  # the stack is still starting; its emulator address comes next
                status, headers, data = self._upstream(body, proxy.routes.get(service) or proxy.upstream or "")
                proxy.passed[service] += 1
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _upstream(self, body: bytes, upstream: str) -> tuple[int, list[tuple[str, str]], bytes]:
                split = urlsplit(upstream)
                if not hasattr(local, "conns"):
                    local.conns = {}  # one keep-alive connection per upstream and thread
                for attempt in range(2):
                    conn = local.conns.get(split.netloc)
                    if conn is None:
                        conn = http.client.HTTPConnection(split.hostname or "", split.port, timeout=60)
                        local.conns[split.netloc] = conn
                    try:
                        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        return resp.status, resp.getheaders(), resp.read()
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        local.conns.pop(split.netloc, None)
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        return Handler
