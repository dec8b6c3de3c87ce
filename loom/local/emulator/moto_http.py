"""The embedded emulator's HTTP: moto's request handler, with connections kept open between requests.

werkzeug's development server answers every request with ``Connection: close`` (http.server cannot
drain a request body it did not read before the next request line), so every AWS call of every
function process paid a TCP connect, a new server thread, and werkzeug's 10 ms drain wait before
the socket closed. The emulator read a step's four or five calls over four or five connections.

:class:`KeepAliveHandler` reads each request's body whole (by its Content-Length) before the app
runs, so the next request line is always where the stream stands, and writes the status line,
headers and body in one send. The WSGI app (the gate, the one-at-a-time DynamoDB lock, moto) and
the answers are unchanged: a chunked request, one that expects ``100 Continue`` or has a malformed
length takes werkzeug's own path, which closes the connection after it.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.exceptions import InternalServerError

from loom.local.emulator import meter

# Headers this handler writes itself (the app's own are dropped): framing and the connection.
_FRAMING = frozenset({"content-length", "connection", "transfer-encoding"})


_HEADER_LINE = re.compile(rb"[\x21-\x39\x3b-\x7e]+:[\x20-\x7e\t]*\r\n")


def parse_headers(fp: Any, _class: Any = http.client.HTTPMessage) -> Any:
    """http.client's header parse; a block of plain ``Name: value`` lines skips the email package.

    The email package's feed parser is a fifth of a small request's cost in the emulator. A
    block whose every line is a printable-ASCII name, a colon and a printable value ending in
    CRLF parses to the same message by splitting each line once (what compat32 does); anything
    else (folded lines, bare LF, other bytes, a line that is no header) takes the email package.
    """
    lines = http.client._read_headers(fp)  # type: ignore[attr-defined]  # its limits on line length and count
    if not lines or lines[-1] != b"\r\n" or not all(_HEADER_LINE.fullmatch(line) for line in lines[:-1]):
        return http.client._parse_header_lines(lines, _class)  # type: ignore[attr-defined]
    msg = _class()
    for line in lines[:-1]:
        name, _, value = line[:-2].decode("ascii").partition(":")
        msg.set_raw(name, value.lstrip(" \t"))
    msg.set_payload("")
    return msg


def apply() -> None:
    """Install the header parse for the emulator's process (which sends no HTTP request of its own)."""
    http.client.parse_headers = parse_headers  # http.server reads headers through it


def request_length(headers: Any) -> int | None:
    """The body's length when the request can be read whole up front, else None (werkzeug's path)."""
    if headers.get("Transfer-Encoding"):
        return None
    raw = headers.get("Content-Length")
    if raw is None:
        return 0
    raw = raw.strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def response_bytes(
    version: str, date: str, status: str, headers: Iterable[tuple[str, str]], body: bytes, *, close: bool, head: bool
) -> bytes:
    """One HTTP/1.1 response: status line, headers with our framing, blank line, body."""
    lines = [f"HTTP/1.1 {status}", f"Server: {version}", f"Date: {date}"]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _FRAMING]
    lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head_bytes if head else head_bytes + body


class KeepAliveHandler(MotoRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # The answer goes out in one send; no small write may wait for the peer's delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_one_request(self) -> None:
        active = meter.METER
        if active is None:
            super().handle_one_request()
            return
        self.headers = None  # type: ignore[assignment]  # so an idle connection's close is not counted as a request
        started = time.thread_time()
        super().handle_one_request()
        if self.headers is not None:
            active.add(meter.operation(self.headers, self.path), time.thread_time() - started)

    def run_wsgi(self) -> None:
        length = request_length(self.headers)
        if length is None or self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
            self.close_connection = True
            super().run_wsgi()
            return
        body = self.rfile.read(length) if length else b""
        if len(body) != length:  # the client went away mid-body
            self.close_connection = True
            return
        self.environ = environ = self.make_environ()
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            status, headers, payload = self._call(self.server.app, environ)
        except Exception as exc:
            # What werkzeug answers when the app raises (Flask catches moto's own errors first):
            # its 500 page and a log line; never a second run of a request that may have written.
            self.close_connection = True
            self.server.log("error", f"Error on request: {exc!r}")
            status, headers, payload = self._call(InternalServerError(), environ)
        answer = response_bytes(
            self.version_string(),
            self.date_time_string(),
            status,
            headers,
            payload,
            close=self.close_connection,
            head=self.command == "HEAD",
        )
        try:
            self.wfile.write(answer)
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    @staticmethod
    def _call(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            if started and exc_info is None:
                raise AssertionError("Headers already set")
            started[:] = [status, headers]
            return chunks.append

        result = app(environ, start_response)
        try:
            for data in result:
                chunks.append(data)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        if not started:
            raise RuntimeError("the app returned without starting a response")
        return started[0], list(started[1]), b"".join(chunks)
