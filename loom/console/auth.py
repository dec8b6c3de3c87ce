"""Who may use the console: a pure decision per request (a :class:`Verdict`), acted on by the server.

The console signs control-plane calls with the user's credentials, so anything that reaches
it can act as the user. Three doors are closed, as Jupyter closes them:

- a random session token, printed once in the console's URL and exchanged for an HttpOnly,
  SameSite=Strict cookie (other local users and web pages never learn it);
- the Host header must name the loopback address the console listens on, so a DNS-rebinding
  page (``evil.example`` resolving to 127.0.0.1) is refused even with the browser's cookie;
- a state-changing request must carry an Origin of the console itself (cross-site forms).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

SAFE_METHODS = frozenset({"GET", "HEAD"})


class Refusal(Enum):
    """Why a request is refused; each maps to one status and one message."""

    BAD_HOST = "bad_host"
    NO_TOKEN = "no_token"
    BAD_ORIGIN = "bad_origin"


_ANSWERS: dict[Refusal, tuple[int, str]] = {
    Refusal.BAD_HOST: (421, "this console answers only to its loopback address (the Host header names another)"),
    Refusal.NO_TOKEN: (
        401,
        "no console session: open the URL with ?token=... that `loom up` or `loom console` printed",
    ),
    Refusal.BAD_ORIGIN: (403, "a request that changes something must come from the console's own pages (Origin)"),
}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    refusal: Refusal | None = None
    # The token came in the URL: set the cookie and redirect to the same page without it,
    # so the token leaves the address bar and the history.
    set_cookie: bool = False

    def answer(self) -> tuple[int, str]:
        assert self.refusal is not None
        return _ANSWERS[self.refusal]


@dataclass(frozen=True)
class Gate:
    token: str
    port: int

    @classmethod
    def new(cls, port: int) -> Gate:
        return cls(secrets.token_urlsafe(32), port)

    @property
    def cookie_name(self) -> str:
        # Cookies are not scoped by port: two consoles on one host must not overwrite each other.
        return f"loom_console_{self.port}"

    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}"})

    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{h}" for h in self.hosts())

    def cookie_header(self) -> str:
        return f"{self.cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?token={self.token}"

    def _matches(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(str(candidate).encode(), self.token.encode())

    def _cookie_token(self, header: str | None) -> str | None:
        if not header:
            return None
        jar = SimpleCookie()
        try:
            jar.load(header)
        except CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else None

    def decide(self, method: str, query: str, headers: Mapping[str, str]) -> Verdict:
        """``headers`` with lower-case names; ``query`` the raw query string."""
        if headers.get("host", "").lower() not in self.hosts():
            return Verdict(False, Refusal.BAD_HOST)
        if method.upper() not in SAFE_METHODS and headers.get("origin") not in self.origins():
            return Verdict(False, Refusal.BAD_ORIGIN)
        if self._matches(self._cookie_token(headers.get("cookie"))):
            return Verdict(True)
        given = parse_qs(query).get("token", [None])[-1]
        if method.upper() in SAFE_METHODS and self._matches(given):
            return Verdict(True, set_cookie=True)
        return Verdict(False, Refusal.NO_TOKEN)
