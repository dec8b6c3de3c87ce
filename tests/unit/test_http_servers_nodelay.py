"""Every HTTP server of the kit answers on a kept-alive connection without Nagle's wait.

http.server writes an answer's head and body in two sends. With Nagle on, the body waits for
the client's ACK of the head, which the client delays (40 ms on Linux): every call through the
chaos proxy paid it, most of a soak step's time (docs/notes/2026-12-07-soak-time.md). The
stdlib turns Nagle off per connection for a handler with ``disable_nagle_algorithm``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.throttle import ThrottleProxy
from loom.client import ControlPlane, Target
from loom.console.proxy import Proxy
from loom.console.server import ConsoleServer
from loom.local.emulator.sigv4 import new_principal
from loom.local.lambdas.http import FunctionUrlServer, UrlAuth


# Each builds a server without starting it and gives its http.server: the handler class is there.
def _function_url() -> ThreadingHTTPServer:
    server = FunctionUrlServer(SimpleNamespace(function="F"), UrlAuth.iam("us-east-1", new_principal()))  # type: ignore[arg-type]
    return server._server


def _console() -> ThreadingHTTPServer:
    plane = ControlPlane(Target("http://127.0.0.1:9", signed=False, region="us-east-1"), timeout=1)
    return ConsoleServer(Proxy(plane), None, port=0, mode="deployed")._httpd


def _throttle() -> ThreadingHTTPServer:
    return ThrottleProxy("http://127.0.0.1:9")._server


@pytest.fixture(params=[_function_url, _console, _throttle], ids=["function-url", "console", "chaos-proxy"])
def handler(request: pytest.FixtureRequest) -> Iterator[Any]:
    make: Callable[[], ThreadingHTTPServer] = request.param
    httpd = make()
    try:
        yield httpd.RequestHandlerClass
    finally:
        httpd.server_close()


def test_every_kit_server_turns_nagle_off_on_its_connections(handler: Any) -> None:
    assert handler.disable_nagle_algorithm is True


def test_a_connection_the_chaos_proxy_accepts_has_nodelay_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attribute above is what the stdlib reads; this shows it on a real accepted socket."""
    seen: list[tuple[int, int, Any]] = []
    original = socket.socket.setsockopt

    def record(self: socket.socket, level: int, option: int, value: Any, *rest: Any) -> None:
        seen.append((level, option, value))
        original(self, level, option, value, *rest)

    monkeypatch.setattr(socket.socket, "setsockopt", record)
    with ThrottleProxy("http://127.0.0.1:9") as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        client = socket.create_connection((host, int(port)), timeout=5)
        try:
            # Refused by the proxy (no upstream listens on port 9) or answered: either way the
            # handler has set its connection up before it reads the request line.
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            client.recv(1)
        finally:
            client.close()
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, True) in seen
