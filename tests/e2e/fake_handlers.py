"""Handlers for the function pool's tests: each misbehaves in one way Lambda code can."""

from __future__ import annotations

import json
import os
import time
from typing import Any

IMPORTED_AT = time.time()  # a warm process keeps this between invocations


def echo(event: Any, context: Any) -> dict[str, Any]:
    return {
        "event": event,
        "pid": os.getpid(),
        "imported_at": IMPORTED_AT,
        "request_id": context.aws_request_id,
        "function_name": context.function_name,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "arn": context.invoked_function_arn,
        "env": os.environ.get("FAKE_SETTING"),
    }


def sleepy(event: dict[str, Any], context: Any) -> dict[str, Any]:
    time.sleep(float(event["seconds"]))
    return {"slept": event["seconds"]}


def dies(event: Any, context: Any) -> None:
    os._exit(3)


def fails(event: Any, context: Any) -> None:
    raise ValueError("bad input, on purpose")


def unserializable(event: Any, context: Any) -> Any:
    return {"when": object()}


def url_probe(event: dict[str, Any], context: Any) -> Any:
    """A Function URL handler whose path says what to do: echo, fail, sleep or answer as told."""
    path = event.get("rawPath")
    if path == "/fail":
        raise ValueError("detail only the log may see")
    if path == "/sleep":
        time.sleep(30)
    if path == "/respond":
        return json.loads(event["body"])
    names = ("_X_AMZN_TRACE_ID", "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_LAMBDA_FUNCTION_NAME")
    seen = {
        "event": event,
        "env": {name: os.environ.get(name) for name in names},
        "context": {
            "function_name": context.function_name,
            "invoked_function_arn": context.invoked_function_arn,
            "log_group_name": context.log_group_name,
            "log_stream_name": context.log_stream_name,
        },
    }
    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(seen)}
