"""Handlers for the function pool's tests: each misbehaves in one way Lambda code can."""

from __future__ import annotations

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
