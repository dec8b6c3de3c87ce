"""One warm function process, as a Lambda execution environment is.

This file is the bootstrap of the local runtime: :mod:`loom.local.lambdas.package`
copies it into the runtime dir and :class:`loom.local.lambdas.pool.FunctionPool` runs
it with ``python -I -S``, so that the process sees the standard library, the
task root (the function's package) and the runtime's boto3, and nothing of the
development venv. It must therefore import only the standard library.

It makes the task root read-only, imports the handler once, then answers
invocations read as JSON lines on stdin with JSON lines on a private reply
pipe (stdout and stderr stay the function's own log streams). When stdin
closes (the supervisor went away) it exits; and a watchdog thread ends it at
once, even inside an invocation, when its parent is gone, so a stack killed with
SIGKILL leaves no process behind.

With ``--template`` it is a function's template instead: it sets up the same sandbox,
imports the runtime's libraries (``--preload``, never the handler) and then forks one
execution environment per request from the supervisor (:mod:`loom.local.lambdas.forkserver`),
reaping each and reporting its exit status. Each fork then runs as the process above does.

    python -I -S bootstrap.py --handler functions.worker.handler --reply-fd N ...
    python -I -S bootstrap.py --template --control-fd N --preload boto3 ...
    python -I -S bootstrap.py --check-imports workflows,myapp.flows
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

CHECK_MARKER = "loom-import-check "
# Write-like flags of open(2): any of them on a path under the task root is refused.
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Audit events that change the filesystem, and which of their arguments are paths.
_PATH_EVENTS = {
    "os.mkdir": (0,),
    "os.rmdir": (0,),
    "os.remove": (0,),
    "os.rename": (0, 1),
    "os.link": (1,),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
}
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


# ---------------------------------------------------------------------- the sandbox


def use_package(task_root: str, runtime_dir: str) -> None:
    """sys.path as Lambda's python3.12 has it: the task root first, then the runtime's libraries."""
    sys.path[:0] = [p for p in (task_root, runtime_dir) if p]
    # -S kept the venv's site-packages out, and with them the builtins site adds (exit, quit,
    # help), which Lambda's interpreter has. Importing site under -S does not touch sys.path.
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()


def read_only_roots(task_root: str, runtime_dir: str) -> list[str]:
    """What Lambda mounts read-only and this process can see: the task root, the runtime
    (its links resolved: they point into the venv) and the standard library."""
    roots = [task_root, runtime_dir, os.path.dirname(os.__file__)]
    if runtime_dir and os.path.isdir(runtime_dir):
        roots.extend(os.path.join(runtime_dir, entry) for entry in os.listdir(runtime_dir))
    return sorted({os.path.realpath(r) for r in roots if r})


def read_only_guard(roots: list[str]) -> Callable[[str, tuple[Any, ...]], None]:
    """An audit hook that fails writes under ``roots`` as a read-only mount does (EROFS).

    The task root of a Lambda is a read-only file system. Locally we run as
    whoever started the stack (often root, whom file modes do not stop), and a
    mount namespace needs privileges a laptop may not grant, so the interpreter
    itself refuses: every ``open`` with a write flag and every call that
    changes the file system under a root raises ``OSError(EROFS)``.
    """
    prefixes = tuple(r.rstrip(os.sep) + os.sep for r in roots)
    exact = frozenset(roots)

    def under_root(path: Any) -> bool:
        if isinstance(path, int) or path is None:
            return False  # an open descriptor: its open was checked
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real in exact or real.startswith(prefixes)

    def refuse(path: Any, other: Any = None) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path), None, other)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and flags & _WRITE_FLAGS and under_root(path):
                refuse(path)
        elif event in _PATH_EVENTS:
            positions = _PATH_EVENTS[event]
            if any(under_root(args[i]) for i in positions if i < len(args)):
                other = os.fsdecode(args[1]) if len(positions) == 2 else None
                refuse(args[positions[0]], other)

    return hook


# ---------------------------------------------------------------------- init, as Lambda reports it


def fault(kind: str, message: str, trace: list[str] | None = None) -> dict[str, Any]:
    return {"errorType": kind, "errorMessage": message, "stackTrace": trace or []}


def import_fault(module_name: str, exc: BaseException) -> dict[str, Any]:
    """What the python3.12 runtime reports when the handler's module does not import."""
    if isinstance(exc, ImportError):
        return fault("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {exc}")
    if isinstance(exc, SyntaxError):
        trace = [f'  File "{exc.filename}" Line {exc.lineno}\n    {exc.text}']
        return fault("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}", trace)
    return error_payload(exc)


def load_handler(name: str) -> tuple[Callable[[Any, Any], Any] | None, dict[str, Any] | None]:
    """The handler, or the fault Lambda answers every invocation with."""
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        return None, fault("Runtime.MalformedHandlerName", f"Bad handler '{name}': not enough values to unpack")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        return None, import_fault(module_name, exc)
    handler = getattr(module, attr, None)
    if handler is None:
        return None, fault("Runtime.HandlerNotFound", f"Handler '{attr}' missing on module '{module_name}'")
    return handler, None


def error_payload(exc: BaseException) -> dict[str, Any]:
    return {
        "errorType": type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_exception(type(exc), exc, exc.__traceback__),
    }


def check_imports(modules: list[str]) -> int:
    """Import each module as the function would; report the first that fails, on one marked line."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
            report = {"module": name, "missing": missing, **import_fault(name, exc)}
            report.pop("stackTrace", None)
            print(CHECK_MARKER + json.dumps(report), flush=True)
            return 1
    print(CHECK_MARKER + json.dumps({"module": None}), flush=True)
    return 0


# ---------------------------------------------------------------------- invocations


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
    handler, init_error = load_handler(args.handler)
    if init_error is not None:
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
            answer["error"] = {**(init_error or {}), "requestId": request["id"]}
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


# ---------------------------------------------------------------------- the template (fork server)


def preload(modules: list[str]) -> None:
    """Import the runtime's libraries once, for every fork to share.

    A library that fails is left to fail again in the fork that imports it, where the handler's
    import reports it as Lambda would.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            continue


def tell(control: socket.socket, message: dict[str, Any]) -> None:
    control.send(json.dumps(message).encode())


def reap(children: set[int], control: socket.socket) -> None:
    """Report every child that has ended, with its exit code as Popen reports it (-N: signal N)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        tell(control, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def become_instance(request: dict[str, Any], fds: list[int], template: int, inherited: list[int]) -> None:
    """In a fresh fork: drop the template's channels, take the request's pipes, serve. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        os.setsid()  # its own session, as the pool starts a process: a terminal's Ctrl-C is not its
        stdin_fd, reply_fd = fds
        os.dup2(stdin_fd, 0)
        os.close(stdin_fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115  # the process's own stdin
        args = argparse.Namespace(
            handler=request["handler"],
            function_name=request["function_name"],
            memory=int(request["memory"]),
            reply_fd=reply_fd,
        )
        sys.argv = [sys.argv[0], "--handler", args.handler, "--function-name", args.function_name]
        watch_parent(template)
        code = serve(args)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def fork_instance(request: dict[str, Any], fds: list[int], inherited: list[int]) -> int:
    """The new environment's pid. The template keeps none of the request's pipes: a reply pipe
    it held open would hide the environment's death from the supervisor."""
    sys.stdout.flush()
    sys.stderr.flush()
    template = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            become_instance(request, fds, template, inherited)
        return pid
    finally:
        for fd in fds:
            os.close(fd)


def serve_template(control: socket.socket, parent: int | None) -> int:
    """Fork an environment per spawn request and report its end, until the supervisor is gone.

    A retired template (the function's code changed) forks no more and leaves once its last
    environment has ended: its environments watch it as their parent.
    """
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    signal.set_wakeup_fd(wake_w)  # a child's end wakes the select below
    children: set[int] = set()
    retiring = False
    tell(control, {"ready": True, "pid": os.getpid()})
    while not (retiring and not children):
        if parent and os.getppid() != parent:
            return 1
        ready, _, _ = select.select([control.fileno(), wake_r], [], [], 0.25)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        reap(children, control)
        if control.fileno() not in ready:
            continue
        data, fds, _flags, _addr = socket.recv_fds(control, 65536, 2)
        if not data:
            return 0  # the supervisor closed its end: stopping
        request = json.loads(data)
        if request.get("retire"):
            retiring = True
        elif len(fds) == 2 and not retiring:
            pid = fork_instance(request, fds, [control.fileno(), wake_r, wake_w])
            children.add(pid)
            tell(control, {"spawned": request["spawn"], "pid": pid})
        else:
            for fd in fds:
                os.close(fd)
            tell(control, {"spawned": request.get("spawn"), "error": "the template forks no more"})
    return 0


def module_names(text: str) -> list[str]:
    """``--check-imports`` and ``--preload``: comma-separated, blanks ignored."""
    return [name.strip() for name in text.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bootstrap")
    parser.add_argument("--handler")
    parser.add_argument("--function-name", default="")
    parser.add_argument("--memory", type=int, default=128)
    parser.add_argument("--reply-fd", type=int)
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument("--check-imports", default=None, help="comma-separated modules to import, then exit")
    parser.add_argument("--template", action="store_true", help="fork environments on request (--control-fd)")
    parser.add_argument("--control-fd", type=int, default=None, help="the template's socket to the supervisor")
    parser.add_argument("--preload", default="", help="comma-separated libraries the template imports")
    args = parser.parse_args(argv)
    task_root = os.environ.get("LAMBDA_TASK_ROOT", "")
    runtime_dir = os.environ.get("LAMBDA_RUNTIME_DIR", "")
    use_package(task_root, runtime_dir)
    if task_root:
        sys.addaudithook(read_only_guard(read_only_roots(task_root, runtime_dir)))
    if args.check_imports is not None:
        return check_imports(module_names(args.check_imports))
    if args.template:
        if args.control_fd is None:
            parser.error("--template needs --control-fd")
        preload(module_names(args.preload))
        with socket.socket(fileno=args.control_fd) as control:
            return serve_template(control, args.parent_pid)
    if not args.handler or args.reply_fd is None:
        parser.error("--handler and --reply-fd are needed to serve invocations")
    if args.parent_pid:
        watch_parent(args.parent_pid)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
