"""The console's HTTP server: 127.0.0.1 only, one session token, static pages, the proxy, the kit.

| path                         | what                                                        |
|------------------------------|-------------------------------------------------------------|
| /, /executions/{id}, /workflows, /dlq, /local | the pages (static HTML, data fetched by JS) |
| /static/{file}               | CSS and JS                                                  |
| /api/{control-plane path}    | signed and forwarded (loom.console.proxy)                   |
| /console.json                | what the pages need to know: target, local or deployed      |
| /local/clock, /local/clock/advance | the functions' clock (local stack only)              |
| /local/chaos, /local/chaos/{name}, /local/chaos/runs | the chaos kit (local stack only)     |

Every request passes the gate first (loom.console.auth): no data without the session token (sent by
the pages' script in a header, never a cookie), no answer to a foreign Host, no change from a foreign Origin.
"""

from __future__ import annotations

import json
import mimetypes
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from engine.log import get_logger
from loom.console.auth import Gate
from loom.console.kit import Kit, KitError
from loom.console.proxy import MAX_BODY, Answer, Proxy, error

_LOG = get_logger(component="console")
STATIC = Path(__file__).resolve().parent / "static"
# Each page is its main content (static/pages/<name>.html) in the one shared layout, which
# holds the head, the navigation and the scripts: a new page or nav entry is written once.
PAGES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^/$"), "executions", "Executions"),
    (re.compile(r"^/executions/[^/]+$"), "execution", "Execution"),
    (re.compile(r"^/workflows$"), "workflows", "Workflows"),
    (re.compile(r"^/dlq$"), "dlq", "Dead-letter queue"),
    (re.compile(r"^/local$"), "local", "Local stack"),
)
DRAIN_LIMIT = 16 * MAX_BODY  # an oversized body up to this is read and dropped; past it, the connection closes
_CALLBACK_PATH = re.compile(r"^(/api/callbacks/)[^/]+")
ASSET = re.compile(r"^/static/([A-Za-z0-9_.-]+)$")
# Scripts and styles only from the console itself; nothing is fetched from elsewhere.
SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
)


class ConsoleServer:
    def __init__(self, proxy: Proxy, kit: Kit | None = None, *, port: int = 0, mode: str = "local") -> None:
        self.proxy, self.kit, self.mode = proxy, kit, mode
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_class(self))
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.gate = Gate.new(self.port)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The URL to open: it carries the session token."""
        return self.gate.url()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConsoleServer:
        # A short poll: stop() (and `loom down`) waits for the loop to notice, at most this long.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="console", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode, "target": self.proxy.target_url, "local": self.kit is not None}

    # ------------------------------------------------------------------ routes

    def local(self, method: str, path: str, query: str, body: bytes) -> Answer:
        if self.kit is None:
            return error(404, "local_only", "the clock and the chaos kit exist only for the local stack")
        try:
            return Answer(200, self._local(method, path, query, body))
        except KitError as exc:
            return error(exc.status, exc.code, exc.message)

    def _local(self, method: str, path: str, query: str, body: bytes) -> Any:
        kit = self.kit
        assert kit is not None
        routes: dict[tuple[str, str], Callable[[], Any]] = {
            ("GET", "/local/clock"): lambda: kit.clock(),
            ("POST", "/local/clock/advance"): lambda: kit.advance(_json(body)),
            ("GET", "/local/chaos"): lambda: kit.scenarios(),
            ("GET", "/local/chaos/runs"): lambda: {
                "runs": kit.runs(parse_qs(query).get("execution", [None])[-1]),
            },
        }
        found = routes.get((method, path))
        if found is not None:
            return found()
        match = re.match(r"^/local/chaos/([a-z_]+)$", path)
        if match and method == "POST":
            return kit.run(match.group(1))
        raise KitError(404, "not_found", f"no local control {method} {path}")


def _json(body: bytes) -> Any:
    if not body.strip():
        raise KitError(400, "invalid_input", "the request body is empty; send a JSON object")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise KitError(400, "malformed_json", f"the request body is not valid JSON: {exc}") from None


class _Handler(BaseHTTPRequestHandler):
    """One request: the gate, then a page, an asset, the proxy or the kit."""

    console: ConsoleServer  # set per server by _handler_class
    server_version = "loom-console"
    sys_version = ""
    disable_nagle_algorithm = True  # the head and the body are two sends (see loom.local.lambdas.http)

    def log_message(self, format: str, *args: Any) -> None:
        return  # one structured line per request instead (no token: the query is not logged)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        verdict = self.console.gate.decide(method, parts.path, headers)
        if not verdict.allowed:
            status, message = verdict.answer()
            self._send(status, _refusal_page(message), "text/html; charset=utf-8")
        else:
            self._route(method, parts.path, parts.query)

    def _route(self, method: str, path: str, query: str) -> None:
        if path.startswith("/api/") or path.startswith("/local/"):
            body = self._body()
            if body is None:
                return
            if path.startswith("/api/"):
                answer = self.console.proxy.forward(method, path[4:], query, body)
            else:
                answer = self.console.local(method, path, query, body)
            self._send(answer.status, answer.encoded(), "application/json")
            return
        if method not in ("GET", "HEAD"):
            self._send(405, b"only GET here", "text/plain", [("Allow", "GET, HEAD")])
            return
        if path == "/console.json":
            self._send(200, json.dumps(self.console.info()).encode(), "application/json")
            return
        self._static(path)

    def _static(self, path: str) -> None:
        page = next(((name, title) for pattern, name, title in PAGES if pattern.match(path)), None)
        if page is not None:
            self._send(200, render_page(*page), "text/html; charset=utf-8")
            return
        asset = ASSET.match(path)
        file = STATIC / asset.group(1) if asset else None
        if file is None or not file.is_file():
            self._send(404, _refusal_page(f"no such page: {path}"), "text/html; charset=utf-8")
            return
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        self._send(200, file.read_bytes(), kind)

    def _body(self) -> bytes | None:
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            self._send(400, error(400, "bad_length", "Content-Length is not a number").encoded(), "application/json")
            return None
        if length > MAX_BODY:
            answer = error(413, "payload_too_large", f"the request body is over {MAX_BODY} bytes")
            if length <= DRAIN_LIMIT:
                # Read it away, so the client (still sending) gets the answer instead of a broken pipe.
                left = length
                while left > 0:
                    got = self.rfile.read(min(65536, left))
                    if not got:
                        break
                    left -= len(got)
            self.close_connection = True
            self._send(413, answer.encoded(), "application/json")
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, kind: str, extra: list[tuple[str, str]] | None = None) -> None:
        # Logged before the answer is written, so the line exists by the time the client has it.
        _LOG.debug("console.request", method=self.command, path=_loggable(urlsplit(self.path).path), status=status)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (*SECURITY_HEADERS, *(extra or [])):
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _loggable(path: str) -> str:
    """The path without a callback token (a bearer secret): logs never hold one."""
    return _CALLBACK_PATH.sub(r"\1<token>", path)


def _handler_class(console: ConsoleServer) -> type[BaseHTTPRequestHandler]:
    return type("ConsoleHandler", (_Handler,), {"console": console})


def render_page(name: str, title: str) -> bytes:
    """The layout with this page's title, name (its script) and main content."""
    layout = (STATIC / "pages" / "layout.html").read_text(encoding="utf-8")
    main = (STATIC / "pages" / f"{name}.html").read_text(encoding="utf-8")
    filled = layout.replace("{{title}}", title).replace("{{page}}", name)
    return filled.replace("{{main}}", main).encode("utf-8")


def _refusal_page(message: str) -> bytes:
    import html

    text = html.escape(message)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Loom console</title></head>"
        f"<body><main><h1>Loom console</h1><p>{text}</p></main></body></html>"
    ).encode()
