"""The chaos kit's proxy sends each service where the functions' per-service endpoints say."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from chaos.throttle import ThrottleProxy

pytestmark = pytest.mark.unit


def _upstream(name: str) -> ThreadingHTTPServer:
    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def upstreams() -> Iterator[dict[str, ThreadingHTTPServer]]:
    servers = {"localstack": _upstream("localstack"), "embedded": _upstream("embedded")}
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


def _post(url: str, headers: dict[str, str], body: bytes) -> str:
    host, port = url.split("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/", body=body, headers=headers)
    answer = conn.getresponse().read().decode()
    conn.close()
    return answer


def test_dynamodb_goes_to_its_route_and_the_rest_to_the_upstream(upstreams) -> None:
    url = {k: f"http://127.0.0.1:{s.server_address[1]}" for k, s in upstreams.items()}
    with ThrottleProxy(url["localstack"]) as proxy:
        proxy.routes["dynamodb"] = url["embedded"]
        ddb = {"X-Amz-Target": "DynamoDB_20120810.GetItem", "Content-Type": "application/x-amz-json-1.0"}
        sqs = {"X-Amz-Target": "AmazonSQS.SendMessage", "Content-Type": "application/x-amz-json-1.0"}
        # Alternating on one keep-alive connection per upstream and thread.
        assert [_post(proxy.url, h, b"{}") for h in (ddb, sqs, ddb, sqs)] == [
            "embedded",
            "localstack",
            "embedded",
            "localstack",
        ]
        assert proxy.passed == {"dynamodb": 2, "sqs": 2}
