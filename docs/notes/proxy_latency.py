"""Milliseconds a call, straight to an upstream and through the chaos kit's throttling proxy.

The upstream answers as the embedded emulator does (one send, TCP_NODELAY), so what differs is
the proxy alone. Used by docs/notes/2026-12-07-soak-time.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/proxy_latency.py
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3

from chaos.throttle import ThrottleProxy

CALLS = 50
ANSWER = b'{"Item": {"pk": {"S": "EXEC#x"}, "sk": {"S": "META"}}}' * 10


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {len(ANSWER)}\r\n\r\n"
        self.wfile.write(head.encode() + ANSWER)


def per_call_ms(url: str) -> float:
    pool = urllib3.PoolManager()  # one kept-alive connection, as a function's boto3 client has
    headers = {"X-Amz-Target": "DynamoDB_20120810.GetItem", "Content-Type": "application/x-amz-json-1.0"}
    body = b'{"TableName": "loom", "Key": {"pk": {"S": "EXEC#x"}, "sk": {"S": "META"}}}'
    pool.request("POST", url + "/", body=body, headers=headers)
    started = time.perf_counter()
    for _ in range(CALLS):
        pool.request("POST", url + "/", body=body, headers=headers)
    return (time.perf_counter() - started) / CALLS * 1000


def main() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    direct = f"http://127.0.0.1:{upstream.server_address[1]}"
    with ThrottleProxy(direct) as proxy:
        print(f"direct        {per_call_ms(direct):6.2f} ms a call")
        print(f"chaos proxy   {per_call_ms(proxy.url):6.2f} ms a call")
    upstream.shutdown()


if __name__ == "__main__":
    main()
