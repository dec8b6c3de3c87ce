"""Function URL payload format 2.0: requests in, JSON responses out, and a small router.

The local stack builds the same event shape from plain HTTP (loom/local/lambdas/events.py), so
``functions.api.handler`` runs there exactly as Lambda runs it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict
from urllib.parse import parse_qs, unquote

from engine.errors import InvalidInput


class HttpContext(TypedDict, total=False):
    method: str
    path: str
    protocol: str
    sourceIp: str
    userAgent: str


class RequestContext(TypedDict, total=False):
    accountId: str
    apiId: str
    authentication: None  # Function URLs always send null
    authorizer: dict[str, Any] | None  # {"iam": {...the signer...}} under AuthType AWS_IAM
    domainName: str
    domainPrefix: str
    http: HttpContext
    requestId: str
    routeKey: str
    stage: str
    time: str
    timeEpoch: int


class FunctionUrlEvent(TypedDict, total=False):
    version: str
    routeKey: str
    rawPath: str
    rawQueryString: str
    cookies: list[str]
    headers: dict[str, str]
    queryStringParameters: dict[str, str]
    requestContext: RequestContext
    body: str
    isBase64Encoded: bool


class HttpError(Exception):
    """An answer other than success, raised from anywhere in a route."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


class MalformedJson(InvalidInput):
    """The request body is not valid JSON."""

    code = "malformed_json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        ctx = (event.get("requestContext") or {}).get("http") or {}
        method = str(ctx.get("method") or "GET").upper()
        path = str(event.get("rawPath") or ctx.get("path") or "/")
        raw_query = event.get("rawQueryString")
        if raw_query is not None:
            pairs = parse_qs(str(raw_query), keep_blank_values=True)
            query = {k: v[-1] for k, v in pairs.items()}
        else:
            query = dict(event.get("queryStringParameters") or {})
        body = event.get("body") or ""
        data = base64.b64decode(body) if event.get("isBase64Encoded") else str(body).encode("utf-8")
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        return cls(method, path, query, headers, data)

    def json(self) -> Any:
        if not self.body.strip():
            raise MalformedJson("the request body is empty; send a JSON object")
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise MalformedJson(f"the request body is not valid JSON: {exc}") from exc
        except RecursionError:
            # The parser's own stack limit: a client error, not the function's.
            raise MalformedJson("the request body is JSON nested too deeply") from None


def response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        "isBase64Encoded": False,
    }


def error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    return response(status, {"error": {"code": code, "message": message}}, headers)


Route = Callable[[Request], dict[str, Any]]


class Router:
    """Paths are patterns like ``/executions/{id}``; a parameter matches one path segment."""

    def __init__(self) -> None:
        self._routes: list[tuple[re.Pattern[str], dict[str, Route]]] = []

    def add(self, method: str, pattern: str, fn: Route) -> None:
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "/?$")
        for existing, methods in self._routes:
            if existing.pattern == regex.pattern:
                methods[method] = fn
                return
        self._routes.append((regex, {method: fn}))

    def dispatch(self, request: Request) -> dict[str, Any]:
        for regex, methods in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            fn = methods.get(request.method)
            if fn is None:
                allowed = ", ".join(sorted(methods))
                raise HttpError(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed on {request.path}; use {allowed}",
                    {"allow": allowed},
                )
            params = {k: unquote(v) for k, v in match.groupdict().items()}
            return fn(Request(request.method, request.path, request.query, request.headers, request.body, params))
        raise HttpError(404, "not_found", f"no such path: {request.path}")
