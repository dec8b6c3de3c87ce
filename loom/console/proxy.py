"""The console's ``/api/...`` door: checks what the browser asks, then signs and forwards it.

Only the control plane's own routes pass (a closed list), only GET and POST, with a JSON
body of bounded size; the answer comes back as the control plane gave it. The signing is
loom.client's (botocore's SigV4Auth, service ``lambda``): the stack file's key for the local
stack, the user's default credential chain for a deployed Function URL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from loom.client import ApiError, ClientError, ControlPlane

MAX_BODY = 1024 * 1024  # larger than any request the pages send; the control plane checks its own limits
# The control plane's routes (functions/api.py, functions/waits_api.py); nothing else is forwarded.
ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (method, re.compile(pattern))
    for method, pattern in (
        ("GET", r"^/executions$"),
        ("POST", r"^/executions$"),
        ("GET", r"^/executions/[^/]+$"),
        ("GET", r"^/executions/[^/]+/history$"),
        ("POST", r"^/executions/[^/]+/cancel$"),
        ("POST", r"^/executions/[^/]+/redrive$"),
        ("POST", r"^/executions/[^/]+/signals/[^/]+$"),
        ("POST", r"^/callbacks/[^/]+/(succeed|fail|heartbeat)$"),
        ("GET", r"^/workflows$"),
        ("GET", r"^/dlq$"),
        ("POST", r"^/dlq/redrive$"),
    )
)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def error(status: int, code: str, message: str) -> Answer:
    return Answer(status, {"error": {"code": code, "message": message}})


def check(method: str, path: str, body: bytes) -> Answer | Any:
    """The parsed JSON body (None when empty) if the request may go on, else the refusal."""
    allowed = [m for m, pattern in ROUTES if pattern.match(path)]
    if not allowed:
        return error(404, "not_found", f"the control plane has no route {path}")
    if method not in allowed:
        return error(405, "method_not_allowed", f"{method} is not allowed on {path}; use {', '.join(allowed)}")
    if len(body) > MAX_BODY:
        return error(413, "payload_too_large", f"the request body is over {MAX_BODY} bytes")
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return error(400, "malformed_json", f"the request body is not valid JSON: {exc}")


class Proxy:
    def __init__(self, client: ControlPlane) -> None:
        self.client = client

    @property
    def target_url(self) -> str:
        return self.client.target.url

    def forward(self, method: str, path: str, query: str, body: bytes) -> Answer:
        parsed = check(method, path, body)
        if isinstance(parsed, Answer):
            return parsed
        params = dict(parse_qsl(query, keep_blank_values=True))
        try:
            status, payload = self.client.request(method, path, query=params, body=parsed)
        except ApiError as exc:
            if isinstance(exc.body, dict) and isinstance(exc.body.get("error"), dict):
                return Answer(exc.status, exc.body)
            # AWS's own refusals (IAM's 403, a crashed function's 502) in the control plane's shape.
            return error(exc.status, exc.code, exc.message)
        except ClientError as exc:
            return error(502, "upstream_unreachable", str(exc))
        return Answer(status, payload)
