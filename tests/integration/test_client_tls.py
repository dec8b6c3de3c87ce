"""A SigV4-signed request never travels over plain HTTP, except to loopback, and never follows a redirect."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.credentials import Credentials

from loom.client import ClientError, ControlPlane, Target, is_loopback, resolve_target

pytestmark = pytest.mark.integration

CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "SESSION-TOKEN")


@pytest.mark.parametrize(
    "url",
    [
        "http://abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws/",
        "http://10.0.0.5:8080",
        "http://192.168.1.10",
        "http://[2001:db8::1]:80",
        "http://localhost.example.com",
        "http://127.0.0.1.nip.io",
        "ftp://127.0.0.1/",
    ],
)
def test_signing_over_plain_http_is_refused(url: str) -> None:
    with pytest.raises(ClientError, match="refusing to send a signed request"):
        resolve_target(url, "eu-west-1")


@pytest.mark.parametrize(
    "url",
    [
        "https://abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws/",
        "https://10.0.0.5:8443",
        "http://127.0.0.1:5231",
        "http://127.8.9.10",
        "http://localhost:5231/",
        "http://LOCALHOST",
        "http://[::1]:5231",
    ],
)
def test_https_and_loopback_are_allowed(url: str) -> None:
    target = resolve_target(url, "eu-west-1")
    assert target.signed and target.region == "eu-west-1"


def test_loopback_is_the_loopback_ranges_only() -> None:
    assert is_loopback("127.255.255.254") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("128.0.0.1") and not is_loopback("0.0.0.0") and not is_loopback(None)


def test_a_target_built_by_hand_is_checked_before_signing() -> None:
    plane = ControlPlane(Target("http://10.0.0.5", signed=True, region="eu-west-1"), credentials=CREDS)
    with pytest.raises(ClientError, match="refusing to send a signed request"):
        plane.workflows()


@contextmanager
def server(status: int, headers: dict[str, str]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            for k, v in {**headers, "content-length": "2", "content-type": "application/json"}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_a_signed_request_does_not_follow_a_redirect() -> None:
    with (
        server(200, {}) as (elsewhere, reached),
        server(307, {"location": elsewhere + "/workflows"}) as (url, first),
    ):
        plane = ControlPlane(Target(url, signed=True, region="us-east-1"), credentials=CREDS, timeout=5)
        with pytest.raises(ClientError, match="answered 307"):
            plane.workflows()
        assert first and first[0]["authorization"].startswith("AWS4-HMAC-SHA256 ")
        assert reached == []  # the signature and token went nowhere else

        unsigned = ControlPlane(Target(url, signed=False), timeout=5)
        assert unsigned.workflows() == {}  # the local stack's unsigned requests may follow
        assert len(reached) == 1 and "authorization" not in reached[0]
