"""The console's gate as a pure decision: Host, then Origin for changes, then the session token
(a header the pages' script sends; never a cookie, which every port of 127.0.0.1 would receive)."""

from __future__ import annotations

import pytest

from loom.console.auth import TOKEN_HEADER, Gate, Refusal

pytestmark = pytest.mark.unit

GATE = Gate("s3cret-token", 5232)
HOST = {"host": "127.0.0.1:5232"}
TOKEN = {TOKEN_HEADER: "s3cret-token"}
OWN = {"origin": "http://127.0.0.1:5232"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "refusal"),
    [
        ("GET", "/api/executions", {**HOST, **TOKEN}, None),
        ("GET", "/console.json", {**HOST, **TOKEN}, None),
        ("GET", "/local/clock", {**HOST, **TOKEN}, None),
        ("GET", "/api/executions", HOST, Refusal.NO_TOKEN),
        ("GET", "/api/executions", {**HOST, TOKEN_HEADER: "wrong"}, Refusal.NO_TOKEN),
        # The cookie the console used to set: no longer a session (cookies reach every local port).
        ("GET", "/api/executions", {**HOST, "cookie": "loom_console_5232=s3cret-token"}, Refusal.NO_TOKEN),
        ("GET", "/console.json", HOST, Refusal.NO_TOKEN),
        # Pages and assets hold no data: served without the token (it arrives with their script).
        ("GET", "/", HOST, None),
        ("GET", "/executions/x", HOST, None),
        ("GET", "/local", HOST, None),
        ("GET", "/static/app.js", HOST, None),
        ("GET", "/api/executions", {"host": "rebound.example:5232", **TOKEN}, Refusal.BAD_HOST),
        ("GET", "/", {"host": "rebound.example:5232"}, Refusal.BAD_HOST),
        ("GET", "/api/executions", {"host": "localhost:5232", **TOKEN}, None),
        ("GET", "/api/executions", {"host": "[::1]:5232", **TOKEN}, None),
        ("POST", "/api/executions", {**HOST, **TOKEN}, Refusal.BAD_ORIGIN),
        ("POST", "/api/executions", {**HOST, **TOKEN, "origin": "http://evil.example"}, Refusal.BAD_ORIGIN),
        ("POST", "/api/executions", {**HOST, **TOKEN, "origin": "http://127.0.0.1:5233"}, Refusal.BAD_ORIGIN),
        ("POST", "/api/executions", {**HOST, **TOKEN, **OWN}, None),
        ("POST", "/api/executions", {**HOST, **OWN}, Refusal.NO_TOKEN),
        ("POST", "/", {**HOST, **OWN}, Refusal.NO_TOKEN),
    ],
)
def test_the_gate_decides(method: str, path: str, headers: dict[str, str], refusal: Refusal | None) -> None:
    verdict = GATE.decide(method, path, headers)
    assert (verdict.allowed, verdict.refusal) == (refusal is None, refusal)
    if refusal is not None:
        status, message = verdict.answer()
        assert status in (401, 403, 421) and message


def test_a_new_gate_has_a_long_random_token_carried_in_the_fragment() -> None:
    a, b = Gate.new(5232), Gate.new(5232)
    assert a.token != b.token and len(a.token) >= 43  # 32 random bytes
    assert a.url("/") == f"http://127.0.0.1:5232/#token={a.token}"
    assert not hasattr(a, "cookie_header")
