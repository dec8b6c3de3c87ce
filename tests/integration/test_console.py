"""The web console over plain HTTP: its door (token, Host, Origin), every page, the signing proxy
(checked by the local stack's own SigV4 verifier) and the local controls' bad input."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loom.client import ControlPlane, Target
from loom.console.app import serve_stack
from loom.console.auth import TOKEN_HEADER
from loom.console.kit import Kit
from loom.console.proxy import Proxy
from loom.console.server import ConsoleServer
from loom.local.emulator import clock as offset_clock
from loom.local.emulator.sigv4 import Principal, amz_now, new_principal, verify

pytestmark = pytest.mark.integration

REGION = "us-east-1"
SECRET_ID = "exec-secret-7f3a"  # an execution id that must never reach an unauthenticated caller
PAGES = {
    "/": "Executions",
    "/executions/" + SECRET_ID: "Execution",
    "/workflows": "Workflows",
    "/dlq": "Dead-letter queue",
    "/local": "Local stack",
}


@dataclass
class Upstream:
    """A control plane stand-in that checks signatures with the local Function URL's verifier."""

    principal: Principal
    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)


def _upstream_handler(up: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            verdict = verify(
                self.command,
                f"http://{headers['host']}{self.path}",
                headers,
                body,
                principals={up.principal.access_key: up.principal},
                region=REGION,
                now=amz_now(),
            )
            up.seen.append({"method": self.command, "path": self.path, "allowed": verdict.allowed, "body": body})
            if not verdict.allowed:
                status, extra, payload = verdict.answer()
            else:
                status, extra, payload = 200, [("content-type", "application/json")], self._data(body)
            self.send_response(status)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _data(self, body: bytes) -> bytes:
            if self.path.startswith("/executions?"):
                row = {"id": SECRET_ID, "workflow": "w", "status": "RUNNING", "current_step": 0}
                return json.dumps({"executions": [row], "next_cursor": None}).encode()
            return json.dumps({"path": self.path, "echo": json.loads(body) if body else None}).encode()

        do_GET = do_POST = _answer

    return Handler


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    up = Upstream(new_principal())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _upstream_handler(up))
    up.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield up
    server.shutdown()
    server.server_close()


class FakeChaosTarget:
    def __init__(self) -> None:
        self.ticks = 0

    def tick_sweeper(self) -> dict[str, Any]:
        self.ticks += 1
        return {"woken": 1}

    def why_not(self, *needs: str) -> str | None:
        return "not in this test" if needs else None


def make_console(up: Upstream, tmp: Path, credentials: Any = None, *, local: bool = True) -> ConsoleServer:
    creds = credentials or up.principal.credentials()
    client = ControlPlane(Target(up.url, signed=True, region=REGION, credentials=creds), timeout=5)
    target = FakeChaosTarget()
    kit = Kit(tmp / "clock_offset", lambda: target, lambda prefix, since: []) if local else None
    server = ConsoleServer(Proxy(client), kit, port=0, mode="local" if local else "deployed").start()
    server.fake_target = target  # type: ignore[attr-defined]
    return server


@pytest.fixture()
def console(upstream: Upstream, tmp_path: Path) -> Iterator[ConsoleServer]:
    server = make_console(upstream, tmp_path)
    yield server
    server.stop()


def call(
    server: ConsoleServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: bool = True,
    host: str | None = None,
    origin: str | None = "own",
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Host": host or f"127.0.0.1:{server.port}"}
    if token:
        headers[TOKEN_HEADER] = server.gate.token
    if method == "POST" and origin:
        headers["Origin"] = server.base_url if origin == "own" else origin
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    answer = conn.getresponse()
    out = (answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read())
    conn.close()
    return out


# ---------------------------------------------------------------- the door


@pytest.mark.parametrize("path", ["/console.json", "/api/executions", "/local/clock", "/local/chaos"])
def test_without_the_session_token_no_data_is_served(console: ConsoleServer, upstream: Upstream, path: str) -> None:
    before = len(upstream.seen)
    status, _, body = call(console, "GET", path, token=False)
    assert status == 401
    assert b"token" in body and SECRET_ID.encode() not in body and b"<script" not in body
    assert len(upstream.seen) == before  # the control plane was never asked


@pytest.mark.parametrize("path", [*PAGES, "/static/app.js"])
def test_pages_and_assets_hold_no_data_and_need_no_token(console: ConsoleServer, upstream: Upstream, path: str) -> None:
    before = len(upstream.seen)
    status, headers, body = call(console, "GET", path, token=False)
    assert status == 200 and SECRET_ID.encode() not in body
    assert "set-cookie" not in headers
    assert len(upstream.seen) == before


def test_a_wrong_token_a_token_in_the_query_or_a_cookie_is_refused(console: ConsoleServer) -> None:
    for headers in (
        {TOKEN_HEADER: "guess"},
        {"Cookie": f"loom_console_{console.port}={console.gate.token}"},  # what the console used to set
        {},
    ):
        conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
        conn.request("GET", "/api/executions", headers={"Host": f"127.0.0.1:{console.port}", **headers})
        assert conn.getresponse().status == 401, headers
        conn.close()
    assert call(console, "GET", f"/api/executions?token={console.gate.token}", token=False)[0] == 401


def test_the_token_travels_in_the_url_fragment_never_to_a_server(console: ConsoleServer) -> None:
    assert console.url == f"http://127.0.0.1:{console.port}/#token={console.gate.token}"
    assert "?" not in console.url


def test_a_foreign_host_header_is_refused_even_with_the_token(console: ConsoleServer) -> None:
    """DNS rebinding: evil.example resolving to 127.0.0.1 names its own Host, even with the token."""
    for host in (f"evil.example:{console.port}", "127.0.0.1:1", "127.0.0.1"):
        status, _, body = call(console, "GET", "/api/executions", host=host)
        assert status == 421 and SECRET_ID.encode() not in body
    assert call(console, "GET", "/console.json", host=f"localhost:{console.port}")[0] == 200


def test_a_post_needs_the_consoles_own_origin(console: ConsoleServer, upstream: Upstream) -> None:
    before = len(upstream.seen)
    assert call(console, "POST", "/api/executions/x/cancel", origin=None)[0] == 403
    assert call(console, "POST", "/api/executions/x/cancel", origin="http://evil.example")[0] == 403
    assert len(upstream.seen) == before
    assert call(console, "POST", "/api/executions/x/cancel")[0] == 200


# ---------------------------------------------------------------- pages


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_is_served_with_its_script_and_a_strict_csp(console: ConsoleServer, path: str) -> None:
    status, headers, body = call(console, "GET", path)
    assert status == 200 and headers["content-type"].startswith("text/html")
    text = body.decode()
    assert f"<title>{PAGES[path]} - Loom console</title>" in text
    page = text.split('data-page="', 1)[1].split('"', 1)[0]
    assert f'<script src="/static/{page}.js"></script>' in text and 'id="main"' in text
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"
    assert "http://" not in text and "https://" not in text  # nothing fetched from elsewhere
    script = call(console, "GET", f"/static/{page}.js")
    assert script[0] == 200 and "javascript" in script[1]["content-type"] and len(script[2]) > 500


def test_assets_and_unknown_paths(console: ConsoleServer) -> None:
    assert call(console, "GET", "/static/app.css")[1]["content-type"].startswith("text/css")
    assert call(console, "GET", "/static/../server.py")[0] == 404
    assert call(console, "GET", "/nowhere")[0] == 404
    assert call(console, "POST", "/workflows", {})[0] == 405
    info = json.loads(call(console, "GET", "/console.json")[2])
    assert info["local"] is True and info["mode"] == "local"


# ---------------------------------------------------------------- the proxy


def test_the_proxy_signs_what_the_local_verifier_accepts(console: ConsoleServer, upstream: Upstream) -> None:
    status, _, body = call(console, "GET", "/api/executions?status=RUNNING&limit=5")
    assert status == 200 and json.loads(body)["executions"][0]["id"] == SECRET_ID
    seen = upstream.seen[-1]
    assert seen["allowed"] and seen["path"].startswith("/executions?") and "status=RUNNING" in seen["path"]
    status, _, body = call(console, "POST", "/api/executions/a%2Fb/signals/ok", {"payload": {"x": 1}})
    assert status == 200 and json.loads(body)["echo"] == {"payload": {"x": 1}}
    assert upstream.seen[-1]["allowed"] and upstream.seen[-1]["path"] == "/executions/a%2Fb/signals/ok"


def test_a_fanout_steps_next_item_page_goes_through_the_proxy_with_its_query(
    console: ConsoleServer, upstream: Upstream
) -> None:
    # The execution page's "more items" button (execution.js moreItems) asks this.
    status, _, _ = call(console, "GET", "/api/executions/m1/history?step=0&items_from=50")
    assert status == 200
    seen = upstream.seen[-1]
    assert seen["allowed"] and seen["path"].startswith("/executions/m1/history?")
    assert "step=0" in seen["path"] and "items_from=50" in seen["path"]


def test_a_console_signing_with_the_wrong_key_gets_no_data(upstream: Upstream, tmp_path: Path) -> None:
    wrong = new_principal()
    for creds in (wrong.credentials(), Principal(upstream.principal.access_key, "not-the-secret", "u").credentials()):
        server = make_console(upstream, tmp_path, creds)
        try:
            status, _, body = call(server, "GET", "/api/executions")
        finally:
            server.stop()
        assert status == 403 and SECRET_ID.encode() not in body
        assert json.loads(body)["error"]["code"] == "http_403"
        assert upstream.seen[-1]["allowed"] is False


def test_an_unsigned_request_to_the_control_plane_gets_no_data(upstream: Upstream) -> None:
    conn = http.client.HTTPConnection(upstream.url.split("//")[1], timeout=5)
    conn.request("GET", "/executions?limit=5")
    answer = conn.getresponse()
    assert answer.status == 403 and SECRET_ID.encode() not in answer.read()


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/api/admin", None, 404, "not_found"),
        ("GET", "/api/executions/x/cancel", None, 405, "method_not_allowed"),
        ("POST", "/api/executions/x/cancel", b"{not json", 400, "malformed_json"),
        ("POST", "/api/executions/x/cancel", b"x" * (1024 * 1024 + 1), 413, "payload_too_large"),
    ],
)
def test_the_proxy_refuses_bad_requests_before_the_control_plane(
    console: ConsoleServer, upstream: Upstream, method: str, path: str, body: Any, status: int, code: str
) -> None:
    before = len(upstream.seen)
    got = call(console, method, path, body)
    assert got[0] == status and json.loads(got[2])["error"]["code"] == code
    assert len(upstream.seen) == before


def test_an_unreachable_control_plane_is_a_502_with_the_reason(tmp_path: Path) -> None:
    dead = Upstream(new_principal(), url="http://127.0.0.1:9")
    server = make_console(dead, tmp_path)
    try:
        status, _, body = call(server, "GET", "/api/workflows")
    finally:
        server.stop()
    assert status == 502 and json.loads(body)["error"]["code"] == "upstream_unreachable"


# ---------------------------------------------------------------- local controls


def test_advancing_the_clock_moves_the_offset_then_ticks_the_sweeper(console: ConsoleServer, tmp_path: Path) -> None:
    status, _, body = call(console, "POST", "/local/clock/advance", {"duration": "1h30m"})
    answer = json.loads(body)
    assert status == 200 and answer["advanced_seconds"] == 5400 and answer["sweep"] == {"woken": 1}
    assert offset_clock.read_offset(tmp_path / "clock_offset") == 5400
    assert console.fake_target.ticks == 1  # type: ignore[attr-defined]
    assert json.loads(call(console, "GET", "/local/clock")[2])["offset_seconds"] == 5400


@pytest.mark.parametrize(
    "body", [{"duration": "soon"}, {"duration": "-1h"}, {"duration": "0s"}, {"by": "1h"}, [], {"duration": "99999d"}]
)
def test_bad_clock_input_is_refused_and_moves_nothing(console: ConsoleServer, tmp_path: Path, body: Any) -> None:
    status, _, answer = call(console, "POST", "/local/clock/advance", body)
    assert status == 400 and json.loads(answer)["error"]["message"]
    assert offset_clock.read_offset(tmp_path / "clock_offset") == 0
    assert console.fake_target.ticks == 0  # type: ignore[attr-defined]


def test_chaos_lists_scenarios_and_refuses_an_unknown_one(console: ConsoleServer) -> None:
    listed = json.loads(call(console, "GET", "/local/chaos")[2])
    names = {s["name"]: s for s in listed["scenarios"]}
    assert names["signal_race"]["available"] and not names["crash_mid_step"]["available"]
    assert names["crash_mid_step"]["reason"]
    status, _, body = call(console, "POST", "/local/chaos/no_such")
    assert status == 404 and json.loads(body)["error"]["code"] == "unknown_scenario"


def test_a_deployed_console_has_no_local_controls(upstream: Upstream, tmp_path: Path) -> None:
    server = make_console(upstream, tmp_path, local=False)
    try:
        assert call(server, "GET", "/local/clock")[0] == 404
        assert json.loads(call(server, "GET", "/console.json")[2])["local"] is False
    finally:
        server.stop()


# ---------------------------------------------------------------- the command line


def test_loom_up_prints_the_console_url_and_passes_its_flags_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from loom.cli import build_parser
    from loom.cli import local as local_cli

    out = io.StringIO()
    local_cli._print_endpoints({"console_url": "http://127.0.0.1:5232/#token=abc"}, out)
    assert "console:                     http://127.0.0.1:5232/#token=abc" in out.getvalue()
    # The background supervisor's output is stack.log: the URL without its token.
    logged = io.StringIO()
    local_cli._print_endpoints({"console_url": "http://127.0.0.1:5232/#token=abc"}, logged, secrets=False)
    assert "http://127.0.0.1:5232/ (its token: in the stack file)" in logged.getvalue()
    assert "abc" not in logged.getvalue()
    parse = build_parser().parse_args
    default = local_cli._options(parse(["up"]))
    assert (default.console_port, default.console_port_fallback) == (5232, True)
    assert default.console_factory is serve_stack  # the CLI composes: the stack does not import the console
    chosen = local_cli._options(parse(["up", "--console-port", "0"]))
    assert (chosen.console_port, chosen.console_port_fallback) == (0, False)
    assert local_cli._options(parse(["up", "--no-console"])).console_port is None
    assert "--no-console" in local_cli._rebuild_argv(parse(["up", "--no-console"]))
    argv = local_cli._rebuild_argv(parse(["up", "--console-port", "7000"]))
    assert argv[argv.index("--console-port") + 1] == "7000"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["console"], "no local stack is running"),
        (["console", "--url", "not-a-url"], "--url must be an absolute URL"),
        (["console", "--url", "http://example.com/"], "refusing to send a signed request"),
        (["console", "--port", "70000"], "--port must be between 0 and 65535"),
    ],
)
def test_loom_console_says_why_it_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    from loom.cli import main

    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    assert main(argv) == 1
    assert said in capsys.readouterr().err


def test_loom_console_for_a_deployed_url_signs_with_the_default_chain_and_has_no_local_controls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loom.console.app import for_url

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    server = for_url("https://abc123.lambda-url.eu-west-1.on.aws/", None, port=0)
    try:
        assert server.kit is None and server.mode == "deployed"
        target = server.proxy.client.target
        assert (target.region, target.credentials, target.signed) == ("eu-west-1", None, True)
        assert server._httpd.server_address[0] == "127.0.0.1"
    finally:
        server._httpd.server_close()


def test_loom_console_takes_a_free_port_when_the_default_is_taken_and_not_when_one_was_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse
    import errno
    import socket

    from loom.cli import webconsole

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(webconsole, "DEFAULT_PORT", port)
        args = argparse.Namespace(url="https://abc.lambda-url.us-east-1.on.aws/", region=None, port=None)
        server = webconsole.build(args)
        try:
            assert server.port not in (0, port)
        finally:
            server._httpd.server_close()
        with pytest.raises(OSError) as refused:
            webconsole.build(argparse.Namespace(url=args.url, region=None, port=port))
        assert refused.value.errno == errno.EADDRINUSE


def test_every_static_file_is_packaged() -> None:
    """An installed loom (not editable) carries the pages: package-data covers every file served."""
    import fnmatch
    import tomllib

    from loom.console.server import STATIC

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["loom.console"]
    files = [f"static/{p.name}" for p in STATIC.iterdir() if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_a_callback_token_never_reaches_the_consoles_log(
    console: ConsoleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom.console import server as server_module

    lines: list[dict[str, Any]] = []
    monkeypatch.setattr(server_module._LOG, "debug", lambda event, **kw: lines.append({"event": event, **kw}))
    token = "cbtok.SECRETSECRETSECRET"
    assert call(console, "POST", f"/api/callbacks/{token}/succeed", {"result": {}})[0] == 200
    assert lines and all("SECRET" not in json.dumps(line) for line in lines)
    assert lines[-1]["path"] == "/api/callbacks/<token>/succeed"
