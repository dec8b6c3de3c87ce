"""The console's gate as a pure decision: Host, then Origin for changes, then the session token."""

from __future__ import annotations

import pytest

from loom.console.auth import Gate, Refusal

pytestmark = pytest.mark.unit

GATE = Gate("s3cret-token", 5232)
HOST = {"host": "127.0.0.1:5232"}
COOKIE = {"cookie": "other=1; loom_console_5232=s3cret-token"}


@pytest.mark.parametrize(
    ("method", "query", "headers", "refusal", "set_cookie"),
    [
        ("GET", "", {**HOST, **COOKIE}, None, False),
        ("GET", "token=s3cret-token", HOST, None, True),
        ("GET", "token=wrong", HOST, Refusal.NO_TOKEN, False),
        ("GET", "", HOST, Refusal.NO_TOKEN, False),
        ("GET", "", {"host": "127.0.0.1:5232", "cookie": "loom_console_5233=s3cret-token"}, Refusal.NO_TOKEN, False),
        ("GET", "", {"host": "rebound.example:5232", **COOKIE}, Refusal.BAD_HOST, False),
        ("GET", "", {"host": "localhost:5232", **COOKIE}, None, False),
        ("GET", "", {"host": "[::1]:5232", **COOKIE}, None, False),
        ("POST", "", {**HOST, **COOKIE}, Refusal.BAD_ORIGIN, False),
        ("POST", "", {**HOST, **COOKIE, "origin": "http://evil.example"}, Refusal.BAD_ORIGIN, False),
        ("POST", "", {**HOST, **COOKIE, "origin": "http://127.0.0.1:5232"}, None, False),
        ("POST", "token=s3cret-token", {**HOST, "origin": "http://127.0.0.1:5232"}, Refusal.NO_TOKEN, False),
        ("GET", "", {**HOST, "cookie": "bad cookie ;;; ="}, Refusal.NO_TOKEN, False),
    ],
)
def test_the_gate_decides(
    method: str, query: str, headers: dict[str, str], refusal: Refusal | None, set_cookie: bool
) -> None:
    verdict = GATE.decide(method, query, headers)
    assert (verdict.allowed, verdict.refusal, verdict.set_cookie) == (refusal is None, refusal, set_cookie)
    if refusal is not None:
        status, message = verdict.answer()
        assert status in (401, 403, 421) and message


def test_a_new_gate_has_a_long_random_token_and_a_port_scoped_cookie() -> None:
    a, b = Gate.new(5232), Gate.new(5232)
    assert a.token != b.token and len(a.token) >= 43  # 32 random bytes
    assert a.cookie_header() == f"loom_console_5232={a.token}; HttpOnly; SameSite=Strict; Path=/"
    assert a.url("/") == f"http://127.0.0.1:5232/?token={a.token}"
