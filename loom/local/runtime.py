"""One warm function process, as a Lambda execution environment is.

Started by :class:`loom.local.pool.FunctionPool` with the function's
environment. It imports the handler once, then answers invocations read as
JSON lines on stdin with JSON lines on a private reply pipe (stdout and stderr
stay the function's own log streams). When stdin closes — the supervisor went
away — it exits; and a watchdog thread ends it at once, even inside an invocation, when its
parent (the supervisor) is gone, so a stack killed with SIGKILL leaves no process behind.

    python -m loom.local.runtime --handler functions.worker.handler --reply-fd N ...
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any


class LambdaContext:
    """The context object a Python Lambda handler receives."""

    def __init__(
        self, *, request_id: str, function_name: str, memory: int, region: str, timeout_ms: int, log_stream: str
    ) -> None:
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:123456789012:function:{function_name}"
        self.memory_limit_in_mb = str(memory)
        self.log_group_name = f"/aws/lambda/{function_name}"
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
    reply.write(json.dumps({"ready": True, "pid": os.getpid(), "init_error": init_error}) + "\n")
    region = os.environ.get("AWS_REGION", "us-east-1")
    log_stream = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{os.getpid():x}"
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer: dict[str, Any] = {"id": request["id"]}
        if init_error is not None or handler is None:
            answer["error"] = init_error
        else:
            context = LambdaContext(
                request_id=request["id"],
                function_name=args.function_name,
                memory=args.memory,
                region=region,
                timeout_ms=int(request["timeout_ms"]),
                log_stream=log_stream,
            )
            try:
                result = handler(request["event"], context)
                answer["result"] = result
                json.dumps(result)  # an answer Lambda could not serialize is an error there too
            except Exception as exc:
                answer.pop("result", None)
                answer["error"] = error_payload(exc)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            reply.write(json.dumps(answer, default=str) + "\n")
        except BrokenPipeError:
            return 0
    return 0


def watch_parent(parent: int, interval: float = 0.25) -> None:
    """Exit at once when ``parent`` is gone (even by SIGKILL), from a daemon thread.

    stdin's EOF is only noticed between invocations; this works inside one too.
    PR_SET_PDEATHSIG would be immediate, but Linux ties it to the *thread* that forked the
    child: the pools spawn from short-lived threads, whose exit would kill healthy processes.
    Being reparented (``getppid`` changes) is what a dead parent means, on every Unix.
    Self-contained on purpose: this module is the function's bootstrap and imports no Loom code.
    """

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=run, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loom.local.runtime")
    parser.add_argument("--handler", required=True)
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--memory", type=int, default=128)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = parser.parse_args(argv)
    if args.parent_pid:
        watch_parent(args.parent_pid)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
