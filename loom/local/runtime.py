"""One warm function process, as a Lambda execution environment is.

Started by :class:`loom.local.pool.FunctionPool` with the function's
environment. It imports the handler once, then answers invocations read as
JSON lines on stdin with JSON lines on a private reply pipe (stdout and stderr
stay the function's own log streams). When stdin closes — the supervisor went
away — it exits, so a stack killed with SIGKILL leaves no process behind.

    python -m loom.local.runtime --handler functions.worker.handler --reply-fd N ...
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

ACCOUNT_ID = "123456789012"


class LambdaContext:
    """The context object a Python Lambda handler receives."""

    def __init__(
        self,
        *,
        request_id: str,
        function_name: str,
        memory: int,
        region: str,
        timeout_ms: int,
        log_stream: str,
        log_group: str | None = None,
    ) -> None:
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{function_name}"
        self.memory_limit_in_mb = str(memory)
        self.log_group_name = log_group or f"/aws/lambda/{function_name}"
        self.log_stream_name = log_stream
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + timeout_ms / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(name: str) -> Callable[[Any, Any], Any]:
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ImportError(f"handler {name!r} is not module.function")
    return getattr(importlib.import_module(module_name), attr)


def error_payload(exc: BaseException, kind: str | None = None) -> dict[str, Any]:
    return {
        "errorType": kind or type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_exception(type(exc), exc, exc.__traceback__),
    }


def log_stream_name(now: float | None = None) -> str:
    """``YYYY/MM/DD/[$LATEST]<32 hex>``: one stream per execution environment, as Lambda names it."""
    day = time.strftime("%Y/%m/%d", time.gmtime(time.time() if now is None else now))
    return f"{day}/[$LATEST]{uuid.uuid4().hex}"


def trace_env(trace_id: str | None) -> str:
    """``_X_AMZN_TRACE_ID`` for one invocation: the caller's root (or a new one) and this segment."""
    root = trace_id or f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}"
    return f"{root};Parent={uuid.uuid4().hex[:16]};Sampled=0"


def log_error(error: dict[str, Any]) -> None:
    # Lambda's Python runtime writes an unhandled error to the function's log; the caller gets none of it.
    sys.stderr.write(f"[ERROR] {error['errorType']}: {error['errorMessage']}\n")
    sys.stderr.write("".join(error.get("stackTrace") or []))


def serve(args: argparse.Namespace) -> int:
    reply = os.fdopen(args.reply_fd, "w", encoding="utf-8", buffering=1)
    init_error: dict[str, Any] | None = None
    handler: Callable[[Any, Any], Any] | None = None
    try:
        handler = load_handler(args.handler)
    except Exception as exc:  # Lambda answers every invocation with the init error; so do we
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.HandlerNotFound"
        if not isinstance(exc, (ImportError, AttributeError)):
            kind = "Runtime.InitError"
        init_error = error_payload(exc, kind)
        log_error(init_error)
    reply.write(json.dumps({"ready": True, "pid": os.getpid(), "init_error": init_error}) + "\n")
    region = os.environ.get("AWS_REGION", "us-east-1")
    # What AWS_LAMBDA_FUNCTION_NAME says is the deployed (physical) name; the context agrees with it.
    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or args.function_name
    log_stream = log_stream_name()
    os.environ["AWS_LAMBDA_LOG_STREAM_NAME"] = log_stream
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer: dict[str, Any] = {"id": request["id"]}
        os.environ["_X_AMZN_TRACE_ID"] = trace_env(request.get("trace_id"))
        if init_error is not None or handler is None:
            answer["error"] = init_error
        else:
            context = LambdaContext(
                request_id=request["id"],
                function_name=function_name,
                memory=args.memory,
                region=region,
                timeout_ms=int(request["timeout_ms"]),
                log_stream=log_stream,
                log_group=os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME"),
            )
            try:
                result = handler(request["event"], context)
                answer["result"] = result
                json.dumps(result)  # an answer Lambda could not serialize is an error there too
            except Exception as exc:
                answer.pop("result", None)
                answer["error"] = error_payload(exc)
                log_error(answer["error"])
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            reply.write(json.dumps(answer, default=str) + "\n")
        except BrokenPipeError:
            return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loom.local.runtime")
    parser.add_argument("--handler", required=True)
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--memory", type=int, default=128)
    parser.add_argument("--reply-fd", type=int, required=True)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
