"""AWS event shapes, built the way the services build them, and back.

Pure functions: the SQS event source mapping's batch event, the EventBridge
scheduled event, and the Function URL (payload format 2.0) request event and
response translation. Unit tests check them against the documented shapes.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict
from urllib.parse import parse_qsl

from loom import schedule

ACCOUNT_ID = "123456789012"


class SqsRecord(TypedDict):
    messageId: str
    receiptHandle: str
    body: str
    attributes: dict[str, str]
    messageAttributes: dict[str, dict[str, Any]]
    md5OfBody: str
    eventSource: str
    eventSourceARN: str
    awsRegion: str


class SqsEvent(TypedDict):
    Records: list[SqsRecord]


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    # The Lambda event spells SQS's StringValue/BinaryValue in camelCase and base64-encodes
    # binaries. Like AWS it leaves out the value a type does not have (no "binaryValue": null
    # on a string) but always carries both list fields, empty.
    out: dict[str, Any] = {}
    if value.get("StringValue") is not None:
        out["stringValue"] = value["StringValue"]
    binary = value.get("BinaryValue")
    if binary is not None:
        out["binaryValue"] = base64.b64encode(binary).decode() if isinstance(binary, bytes) else binary
    out["stringListValues"] = list(value.get("StringListValues") or [])
    out["binaryListValues"] = [
        base64.b64encode(b).decode() if isinstance(b, bytes) else b for b in value.get("BinaryListValues") or []
    ]
    out["dataType"] = value.get("DataType", "String")
    return out


def sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> SqsRecord:
    """One record of an SQS event, from a ReceiveMessage result entry."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": {str(k): str(v) for k, v in (message.get("Attributes") or {}).items()},
        "messageAttributes": {k: _message_attribute(v) for k, v in (message.get("MessageAttributes") or {}).items()},
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record  # type: ignore[return-value]


def sqs_event(messages: Iterable[Mapping[str, Any]], queue_arn: str, region: str) -> SqsEvent:
    return {"Records": [sqs_record(m, queue_arn, region) for m in messages]}


def batch_failures(result: Any, message_ids: Iterable[str]) -> set[str] | None:
    """The message ids a ReportBatchItemFailures answer asks to keep.

    None means the whole batch failed, as Lambda reads it: an answer that names
    an id outside the batch or an empty/None identifier. An answer without
    ``batchItemFailures`` (or None) is a full success.
    """
    ids = set(message_ids)
    if not isinstance(result, Mapping) or result.get("batchItemFailures") is None:
        return set()
    failures = result["batchItemFailures"]
    if not isinstance(failures, list):
        return None
    keep: set[str] = set()
    for item in failures:
        ident = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not ident or ident not in ids:
            return None
        keep.add(ident)
    return keep


def scheduled_event(rule_arn: str, region: str, now: float | None = None) -> dict[str, Any]:
    """What EventBridge sends a function on a schedule."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, tz=UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def schedule_seconds(expression: str) -> float:
    """Seconds between runs of a ``rate(...)`` expression (cron is checked, not emulated)."""
    schedule.check(expression)  # ScheduleError (a ValueError) for what EventBridge rejects
    if not expression.strip().startswith("rate("):
        raise ValueError(f"only rate(...) schedules run locally, not {expression!r}; use --tick")
    return float(schedule.rate_seconds(expression))


# ------------------------------------------------------------------ Function URL

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript", "+json", "+xml")
_TEXT_EXACT = ("application/x-www-form-urlencoded", "application/graphql", "application/yaml")


def is_text(content_type: str | None) -> bool:
    ct = (content_type or "").split(";")[0].strip().lower()
    if not ct:
        return True
    return ct in _TEXT_EXACT or any(ct.startswith(t) or ct.endswith(t) for t in _TEXT_TYPES)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    source_ip: str = "127.0.0.1"
    host: str = "localhost"
    protocol: str = "HTTP/1.1"
    scheme: str = "http"  # what the client connected with (AWS: always https)
    port: int = 80  # the port the client connected to (AWS: 443)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def trace_header(now: float | None = None) -> str:
    """An X-Ray trace id as the Function URL front end adds it: ``Root=1-<epoch hex>-<96 bits>``."""
    moment = int(time.time() if now is None else now)
    return f"Root=1-{moment:08x}-{uuid.uuid4().hex[:24]}"


def _event_body(body: bytes, content_type: str | None) -> tuple[str, bool]:
    """The event's ``body`` and ``isBase64Encoded``: text stays text only when it decodes as UTF-8."""
    if is_text(content_type):
        try:
            return body.decode("utf-8"), False
        except UnicodeDecodeError:
            pass  # AWS passes bytes it cannot read as text base64-encoded, never lossily
    return base64.b64encode(body).decode(), True


def function_url_event(
    req: HttpRequest,
    *,
    url_id: str = "local",
    now: float | None = None,
    iam: Mapping[str, Any] | None = None,
    trace_id: str | None = None,
) -> dict[str, Any]:
    """A Function URL (payload format 2.0) event for one HTTP request.

    ``iam`` is ``requestContext.authorizer.iam`` from the verified signer (AuthType AWS_IAM);
    without it (AuthType NONE) ``authorizer`` is null, as AWS documents it.
    """
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in req.headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        # Repeated headers arrive comma-joined, as API Gateway and Function URLs do.
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    # What the Function URL's front end adds (it replaces any the client sent).
    headers["x-forwarded-for"] = req.source_ip
    headers["x-forwarded-proto"] = req.scheme
    headers["x-forwarded-port"] = str(req.port)
    headers["x-amzn-trace-id"] = trace_id or trace_header(now)
    params: dict[str, str] = {}
    for key, value in parse_qsl(req.query, keep_blank_values=True):
        params[key] = f"{params[key]},{value}" if key in params else value
    moment = time.time() if now is None else now
    context: dict[str, Any] = {
        "accountId": ACCOUNT_ID if iam is None else str(iam.get("accountId") or ACCOUNT_ID),
        "apiId": url_id,
        "authentication": None,  # Function URLs never fill it
        "authorizer": None if iam is None else {"iam": dict(iam)},
        "domainName": req.host,
        "domainPrefix": req.host.split(".")[0].split(":")[0],
        "http": {
            "method": req.method.upper(),
            "path": req.path,
            "protocol": req.protocol,
            "sourceIp": req.source_ip,
            "userAgent": headers.get("user-agent", ""),
        },
        "requestId": str(uuid.uuid4()),
        "routeKey": "$default",
        "stage": "$default",
        "time": datetime.fromtimestamp(moment, tz=UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(moment * 1000),
    }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": req.path,
        "rawQueryString": req.query,
        "headers": headers,
        "requestContext": context,
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if params:
        event["queryStringParameters"] = params
    if req.body:
        event["body"], event["isBase64Encoded"] = _event_body(req.body, headers.get("content-type"))
    return event


IGNORED_RESPONSE_FIELDS = ("multiValueHeaders",)  # API Gateway REST fields a Function URL drops


def ignored_response_fields(result: Any) -> list[str]:
    """The fields of a handler's answer a Function URL ignores (the server logs a warning)."""
    if not isinstance(result, Mapping) or "statusCode" not in result:
        return []
    return [name for name in IGNORED_RESPONSE_FIELDS if result.get(name)]


def function_url_response(result: Any) -> HttpResponse:
    """Translate a handler's answer the way Function URLs do.

    A dict with ``statusCode`` is a full response (``multiValueHeaders`` ignored, as AWS
    does); any other JSON value is the body of a 200 ``application/json`` response.
    """
    if not (isinstance(result, Mapping) and "statusCode" in result):
        return HttpResponse(200, [("content-type", "application/json")], json.dumps(result).encode())
    status = int(result["statusCode"])
    headers = [(str(k), str(v)) for k, v in (result.get("headers") or {}).items()]
    headers.extend(("set-cookie", str(c)) for c in result.get("cookies") or [])
    body = result.get("body")
    if body is None:
        data = b""
    elif result.get("isBase64Encoded"):
        data = base64.b64decode(body)
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = json.dumps(body).encode()
    if not any(k.lower() == "content-type" for k, _ in headers) and data:
        headers.append(("content-type", "application/json"))
    return HttpResponse(status, headers, data)


INTERNAL_ERROR = b"Internal Server Error"


def function_error_response(*, status: int = 502) -> HttpResponse:
    """What a Function URL answers when the function errors, crashes or times out.

    A fixed body: the error type, message and stack trace go to the function's log only.
    """
    return HttpResponse(status, [("content-type", "text/plain; charset=utf-8")], INTERNAL_ERROR)
