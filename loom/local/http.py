"""The control plane's Function URL, locally: HTTP in, payload 2.0 event, HTTP out."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loom.local.events import (
    HttpRequest,
    HttpResponse,
    function_error_response,
    function_url_event,
    function_url_response,
)
from loom.local.pool import FunctionPool, PoolClosed

MAX_BODY = 6 * 1024 * 1024  # Lambda's synchronous payload limit


class FunctionUrlServer:
    """A threading HTTP server on ``host:port`` invoking ``pool`` per request."""

    def __init__(self, pool: FunctionPool, host: str = "127.0.0.1", port: int = 0) -> None:
        self.pool = pool
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
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

    def handle(self, request: HttpRequest) -> HttpResponse:
        if len(request.body) > MAX_BODY:
            return HttpResponse(413, [("content-type", "application/json")], b'{"Message":"Request too large"}')
        event = function_url_event(request, url_id=f"local-{self.port}")
        try:
            inv = self.pool.invoke(event, request_id=event["requestContext"]["requestId"])
        except PoolClosed:
            stopping = {"errorType": "ServiceUnavailable", "errorMessage": "the stack is stopping"}
            return function_error_response(stopping, status=503)
        if inv.outcome != "ok":
            return function_error_response(inv.error)
        try:
            return function_url_response(inv.result)
        except (TypeError, ValueError) as exc:
            return function_error_response({"errorType": "Runtime.InvalidResponse", "errorMessage": str(exc)})


def _make_handler(server: FunctionUrlServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            request = HttpRequest(
                method=self.command,
                path=path or "/",
                query=query,
                headers=list(self.headers.items()),
                body=body,
                source_ip=self.client_address[0],
                host=self.headers.get("host") or f"{server.host}:{server.port}",
                protocol=self.request_version,
            )
            response = server.handle(request)
            self.send_response(response.status)
            for name, value in response.headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("content-length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # every invocation is already logged by the stack

    return Handler
