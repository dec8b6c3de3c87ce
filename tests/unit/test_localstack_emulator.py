"""LocalStack from compose.yaml: started only when none answers, and only then stopped."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from loom.local import emulator

pytestmark = pytest.mark.unit


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"services": {"dynamodb": "running", "sqs": "available"}}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def health() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    yield server
    server.server_close()


def _serve(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=server.serve_forever, daemon=True).start()


def _fake_compose(calls: list[tuple[str, ...]], on_up: Any = None) -> Any:
    def compose(self: emulator.LocalStackEmulator, *args: str, timeout: float = 600) -> Any:
        calls.append(args)
        if args[0] == "up" and on_up is not None:
            on_up()
        return subprocess.CompletedProcess(args, 0, "", "")

    return compose


def test_a_running_localstack_is_used_and_left_running(monkeypatch, health) -> None:
    _serve(health)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(emulator, "docker_available", lambda: (True, ""))
    monkeypatch.setattr(emulator.LocalStackEmulator, "_compose", _fake_compose(calls))
    url = f"http://127.0.0.1:{health.server_address[1]}"
    try:
        ls = emulator.LocalStackEmulator(endpoint_url=url).start(timeout=5)
        ls.stop()
    finally:
        health.shutdown()
    assert calls == [], "neither `compose up` nor `compose down` for a LocalStack someone else runs"


def test_a_localstack_it_starts_is_the_one_it_stops(monkeypatch, health) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(emulator, "docker_available", lambda: (True, ""))
    monkeypatch.setattr(emulator.LocalStackEmulator, "_compose", _fake_compose(calls, on_up=lambda: _serve(health)))
    url = f"http://127.0.0.1:{health.server_address[1]}"
    try:
        ls = emulator.LocalStackEmulator(endpoint_url=url).start(timeout=5)
        ls.stop()
    finally:
        health.shutdown()
    assert [c[0] for c in calls] == ["up", "down"]
