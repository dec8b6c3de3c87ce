"""LocalStack from compose.yaml: started only when none answers, and only then stopped."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from loom.local.emulator import backends

pytestmark = pytest.mark.unit


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"services": {"dynamodb": "running", "sqs": "available"}}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        # A loaded machine may outlast the client's 2 s health timeout: it has gone, and its
        # retry is the one that counts; a traceback here would only be noise in the test output.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
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
    def compose(self: backends.LocalStackEmulator, *args: str, timeout: float = 600) -> Any:
        calls.append(args)
        if args[0] == "up" and on_up is not None:
            on_up()
        return subprocess.CompletedProcess(args, 0, "", "")

    return compose


def test_a_running_localstack_is_used_and_left_running(monkeypatch, health) -> None:
    _serve(health)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(backends, "docker_available", lambda: (True, ""))
    monkeypatch.setattr(backends.LocalStackEmulator, "_compose", _fake_compose(calls))
    url = f"http://127.0.0.1:{health.server_address[1]}"
    try:
        ls = backends.LocalStackEmulator(endpoint_url=url).start(timeout=5)
        ls.stop()
    finally:
        health.shutdown()
    assert calls == [], "neither `compose up` nor `compose down` for a LocalStack someone else runs"


def test_a_localstack_it_starts_is_the_one_it_stops(monkeypatch, health) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(backends, "docker_available", lambda: (True, ""))
    monkeypatch.setattr(backends.LocalStackEmulator, "_compose", _fake_compose(calls, on_up=lambda: _serve(health)))
    url = f"http://127.0.0.1:{health.server_address[1]}"
    try:
        ls = backends.LocalStackEmulator(endpoint_url=url).start(timeout=5)
        ls.stop()
    finally:
        health.shutdown()
    assert [c[0] for c in calls] == ["up", "down"]


def test_an_answering_localstack_is_used_without_docker(monkeypatch, health) -> None:
    """Bug: start() asked for Docker first and refused a LocalStack that answered ("needs Docker")."""
    _serve(health)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(backends, "docker_available", lambda: (False, "no Docker engine answers (test)"))
    monkeypatch.setattr(backends.LocalStackEmulator, "_compose", _fake_compose(calls))
    url = f"http://127.0.0.1:{health.server_address[1]}"
    try:
        ls = backends.LocalStackEmulator(endpoint_url=url).start(timeout=5)
        assert ls.mode is backends.LocalStackMode.RUNNING
        assert ls.dynamodb is backends.DynamoSource.LOCALSTACK
        ls.stop()
    finally:
        health.shutdown()
    assert calls == []


def test_no_localstack_no_docker_and_no_install_says_the_install_command(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(backends, "docker_available", lambda: (False, "no Docker engine answers (test)"))
    free = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    url = f"http://127.0.0.1:{free.server_address[1]}"
    free.server_close()  # a port nothing listens on
    with pytest.raises(backends.EmulatorError) as raised:
        backends.LocalStackEmulator(endpoint_url=url, home=tmp_path).start(timeout=5)
    said = str(raised.value)
    assert "no Docker engine answers (test)" in said
    assert "`loom localstack install`" in said
    assert str(tmp_path) in said


@pytest.mark.parametrize(
    ("choice", "mode", "has_local", "expected"),
    [
        ("auto", "docker", False, "localstack"),
        ("auto", "running", False, "localstack"),
        ("auto", "host", True, "localstack"),
        ("auto", "host", False, "embedded"),
        ("embedded", "docker", True, "embedded"),
        ("localstack", "host", False, "localstack"),
    ],
)
def test_whose_dynamodb(choice: str, mode: str, has_local: bool, expected: str) -> None:
    source, note = backends.dynamodb_verdict(backends.DynamoSource(choice), backends.LocalStackMode(mode), has_local)
    assert source is backends.DynamoSource(expected)
    if (choice, mode, has_local) == ("auto", "host", False):
        assert note.startswith("offline: DynamoDB from the embedded emulator")


class _SlowDynamo(BaseHTTPRequestHandler):
    """Answers ListTables the way DynamoDB does, or (``hold``) only after the caller gave up."""

    hold = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.holding:  # type: ignore[attr-defined]
            _SlowDynamo.hold.wait(10)
        body = json.dumps({"TableNames": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/x-amz-json-1.0")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize("holding", [False, True])
def test_a_dynamodb_that_does_not_answer_in_time_is_reported_with_the_reason(holding: bool) -> None:
    """Host mode with `--localstack-dynamodb localstack` offline: the first DynamoDB call hangs on the download."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowDynamo)
    server.holding = holding  # type: ignore[attr-defined]
    _serve(server)
    try:
        why = backends.dynamodb_answers(f"http://127.0.0.1:{server.server_address[1]}", "us-east-1", timeout=1)
    finally:
        _SlowDynamo.hold.set()
        server.shutdown()
        server.server_close()
        _SlowDynamo.hold.clear()
    if holding:
        assert why is not None and "ReadTimeout" in why
    else:
        assert why is None


def test_host_mode_is_not_started_for_an_endpoint_on_another_machine(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(backends, "docker_available", lambda: (False, "no Docker engine answers (test)"))
    monkeypatch.setattr(backends.localstack_host, "health", lambda url, timeout=2.0: None)
    with pytest.raises(backends.EmulatorError, match="on this machine only"):
        backends.LocalStackEmulator(endpoint_url="http://10.9.8.7:4566", home=tmp_path).start(timeout=5)
