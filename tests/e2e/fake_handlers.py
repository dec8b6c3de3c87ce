"""Handlers for the function pool's tests: each misbehaves in one way Lambda code can."""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
import time
from typing import Any

import botocore

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


def env_of(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"value": os.environ.get(event["name"]), "pid": os.getpid()}


def sleepy(event: dict[str, Any], context: Any) -> dict[str, Any]:
    time.sleep(float(event["seconds"]))
    return {"slept": event["seconds"]}


def dies(event: Any, context: Any) -> None:
    os._exit(3)


def fails(event: Any, context: Any) -> None:
    raise ValueError("bad input, on purpose")


def unserializable(event: Any, context: Any) -> Any:
    return {"when": object()}


def probe(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """What the process can import and where it runs: the deployment package, or the dev venv."""
    found = {}
    for name in event["modules"]:
        try:
            importlib.import_module(name)
            found[name] = True
        except ImportError:
            found[name] = False
    return {
        "importable": found,
        "sys_path": sys.path,
        "cwd": os.getcwd(),
        "task_root": os.environ["LAMBDA_TASK_ROOT"],
        "site_builtins": all(callable(getattr(builtins, n, None)) for n in ("exit", "quit", "help")),
    }


PROBE = "loom-read-only-probe.txt"  # never left behind: the test removes it if a write got through


def writes(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Each write the handler tries, and the error it met (None: it worked)."""
    root = os.environ["LAMBDA_TASK_ROOT"]
    here = os.path.join(root, "tests", "e2e", "fake_handlers.py")
    attempts = {
        "create": lambda: open(os.path.join(root, "new.txt"), "w").close(),
        "append": lambda: open(here, "a").close(),
        "os_open": lambda: os.close(os.open(os.path.join(root, "raw.txt"), os.O_WRONLY | os.O_CREAT)),
        "mkdir": lambda: os.mkdir(os.path.join(root, "newdir")),
        "remove": lambda: os.remove(here),
        "rename": lambda: os.rename(here, os.path.join(root, "moved.py")),
        "runtime": lambda: open(os.path.join(os.path.dirname(botocore.__file__), PROBE), "w").close(),
        "stdlib": lambda: open(os.path.join(os.path.dirname(os.__file__), PROBE), "w").close(),
        "tmp": lambda: open(os.path.join(event["tmp"], "ok.txt"), "w").close(),
        "read": lambda: open(here).close(),
    }
    out: dict[str, Any] = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            out[name] = None
        except OSError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    if event.get("raise"):
        open(os.path.join(root, "uncaught.txt"), "w")  # noqa: SIM115 - the error is the point
    return out


_HOARD: list[bytes] = []


def hog(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Touch ``mb`` megabytes (b"x" * n writes every page, so they are resident)."""
    blob = b"x" * (int(event["mb"]) << 20)
    if event.get("keep"):
        _HOARD.append(blob)
    return {"bytes": len(blob)}


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
