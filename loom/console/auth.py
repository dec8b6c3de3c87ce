"""Who may use the console: a pure decision per request (a :class:`Verdict`), acted on by the server.

The console signs control-plane calls with the user's credentials, so anything that reaches
its data can act as the user. The doors, and why each is shut this way:

- a random session token, printed once in the console's URL *fragment* (``/#token=...``). A
  fragment never leaves the browser (no request line, no Referer, no server log); the page's own
  script moves it to ``sessionStorage`` and drops it from the address, and sends it in the
  ``x-loom-console-token`` header on every data request. sessionStorage belongs to the origin,
  port included; a cookie does not: cookies are not isolated by port, so a cookie set by the
  console reached every server on 127.0.0.1 (a page on another local port received
  ``loom_console_<port>=<token>`` and could replay it). No cookie is set or read.
- a header a page on another origin cannot send without a CORS preflight, which the console never
  answers with ``Access-Control-Allow-*``; so a foreign page can neither read nor send a data call;
- the Host header must name the loopback address the console listens on, so a DNS-rebinding
  page (``evil.example`` resolving to 127.0.0.1) is refused;
- a state-changing request must carry an Origin of the console itself (cross-site forms).

The pages and assets (static HTML, CSS, JS: no data) are served without the token, since the
token arrives only with the page's script; everything that reads or changes data needs it.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

SAFE_METHODS = frozenset({"GET", "HEAD"})
TOKEN_HEADER = "x-loom-console-token"
# What needs the session: the data (proxied API, local controls, the console's own info).
_DATA_PREFIXES = ("/api/", "/local/")
_DATA_PATHS = frozenset({"/console.json"})


class Refusal(Enum):
    """Why a request is refused; each maps to one status and one message."""

    BAD_HOST = "bad_host"
    NO_TOKEN = "no_token"
    BAD_ORIGIN = "bad_origin"


_ANSWERS: dict[Refusal, tuple[int, str]] = {
    Refusal.BAD_HOST: (421, "this console answers only to its loopback address (the Host header names another)"),
    Refusal.NO_TOKEN: (
        401,
        "no console session: open the URL (with #token=...) that `loom up` or `loom console` printed",
    ),
    Refusal.BAD_ORIGIN: (403, "a request that changes something must come from the console's own pages (Origin)"),
}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    refusal: Refusal | None = None

    def answer(self) -> tuple[int, str]:
        assert self.refusal is not None
        return _ANSWERS[self.refusal]


def needs_session(path: str) -> bool:
    return path in _DATA_PATHS or path.startswith(_DATA_PREFIXES)


@dataclass(frozen=True)
class Gate:
    token: str
    port: int

    @classmethod
    def new(cls, port: int) -> Gate:
        return cls(secrets.token_urlsafe(32), port)

    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"})

    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{h}" for h in self.hosts())

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}#token={self.token}"

    def _matches(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(str(candidate).encode(), self.token.encode())

    def decide(self, method: str, path: str, headers: Mapping[str, str]) -> Verdict:
        """``headers`` with lower-case names; ``path`` without the query."""
        if headers.get("host", "").lower() not in self.hosts():
            return Verdict(False, Refusal.BAD_HOST)
        if method.upper() not in SAFE_METHODS and headers.get("origin") not in self.origins():
            return Verdict(False, Refusal.BAD_ORIGIN)
        if not needs_session(path) and method.upper() in SAFE_METHODS:
            return Verdict(True)  # a page or an asset: no data in it
        if self._matches(headers.get(TOKEN_HEADER)):
            return Verdict(True)
        return Verdict(False, Refusal.NO_TOKEN)
