"""A small pool of warm function processes: Lambda concurrency, locally.

Each process runs the local bootstrap from the function's package (see
:mod:`loom.local.lambdas.package`): it sees only the task root and the runtime's
boto3, imports its handler once and serves invocations one at a time. On Linux a
process is forked from the function's template (:mod:`loom.local.lambdas.forkserver`),
which has imported the runtime's boto3 already; elsewhere it is a fresh interpreter. An
invocation that runs past the function's Timeout is SIGKILLed, as Lambda does;
so is one whose process passes the function's MemorySize. A process that dies
(killed, ``os._exit``, crashed interpreter) is replaced. Every invocation
becomes an :class:`Invocation` record.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from loom.jsonvalue import loads_object
from loom.local import private
from loom.local.lambdas.forkserver import Process, Template
from loom.local.lambdas.package import FunctionPackage

STARTUP_TIMEOUT = 60.0
MEMORY_POLL_SECONDS = 0.05  # how often a running invocation's peak memory is read
# What a template imports before it forks: the runtime's library every function imports (boto3
# brings botocore, urllib3, dateutil and jmespath). No more: a fork's peak memory starts at the
# template's size, and a library the handler never imports would count against its MemorySize.
PRELOAD = ("boto3",)


def forks_by_default() -> bool:
    """Linux forks cleanly from a single-threaded template; macOS's system frameworks do not
    promise that (Python's multiprocessing spawns there for the same reason)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def runtime_command(package: FunctionPackage, *args: str) -> list[str]:
    """The bootstrap under this interpreter, isolated (-I: no PYTHON* variables, no cwd or user site;
    -S: no site-packages), unbuffered and without bytecode writes (the task root is read-only)."""
    return [sys.executable, "-I", "-S", "-B", "-u", str(package.bootstrap), *args]


def template_command(package: FunctionPackage, parent: int) -> list[str]:
    return runtime_command(package, "--template", "--preload", ",".join(PRELOAD), "--parent-pid", str(parent))


def package_env(env: Mapping[str, str], package: FunctionPackage) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    out["LAMBDA_TASK_ROOT"] = str(package.task_root)
    out["LAMBDA_RUNTIME_DIR"] = str(package.runtime_dir)
    return out


def peak_memory_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM) in MB, or None where /proc cannot say.

    The peak, not the current size: an allocation freed between two polls still
    counts, as it would have hit Lambda's cgroup limit when it happened.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def over_memory(peak_mb: float | None, limit_mb: int) -> bool:
    return peak_mb is not None and peak_mb > limit_mb


def out_of_memory_error(request_id: str) -> dict[str, Any]:
    # Lambda's report when the sandbox passes MemorySize (older runtimes said Runtime.ExitError).
    return {
        "errorType": "Runtime.OutOfMemory",
        "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: signal: killed",
    }


def _start_process(
    function: str, handler: str, memory: int, env: Mapping[str, str], package: FunctionPackage, output: IO[Any] | None
) -> tuple[subprocess.Popen[str], int]:
    """A fresh interpreter running the bootstrap, and the read end of its reply pipe."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            runtime_command(
                package,
                "--handler",
                handler,
                "--function-name",
                function,
                "--memory",
                str(memory),
                "--reply-fd",
                str(write_fd),
                "--parent-pid",
                str(os.getpid()),
            ),
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=output,
            env=package_env(env, package),
            cwd=str(package.task_root),
            pass_fds=(write_fd,),
            text=True,
            # Its own process group: a Ctrl-C in the terminal reaches the supervisor only,
            # which then stops the pool in order.
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return proc, read_fd


class PoolClosed(Exception):
    """The pool is stopping; no more invocations."""


@dataclass(frozen=True)
class Invocation:
    function: str
    request_id: str
    pid: int
    started_at: float
    duration_ms: float
    outcome: str  # ok | error | crash | timeout | oom
    result: Any = None
    error: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("result")
        return out


class Runtime:
    """One function process and its pipes."""

    def __init__(
        self,
        *,
        function: str,
        handler: str,
        memory: int,
        env: Mapping[str, str],
        package: FunctionPackage,
        output: IO[Any] | None,
        template: Template | None = None,
    ) -> None:
        self.function = function
        self.eof = False
        self.proc: Process
        if template is not None:
            self.proc, self._reply_fd = template.spawn(handler, function, memory)
        else:
            self.proc, self._reply_fd = _start_process(function, handler, memory, env, package, output)
        self._buffer = b""
        self.init_error: dict[str, Any] | None = None
        self.generation = 0  # which recycle() of its pool it was started after

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def read_line(self, deadline: float) -> dict[str, Any] | None:
        """The next reply line, or None on EOF (process died) or when the deadline passes."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ready, _, _ = select.select([self._reply_fd], [], [], left)
                if not ready:
                    return None
                chunk = os.read(self._reply_fd, 65536)
            except (OSError, ValueError):  # closed under us: the pool is stopping
                self.eof = True
                return None
            if not chunk:
                self.eof = True
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return loads_object(line, "a message from the function process")

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        hello = self.read_line(time.monotonic() + timeout)
        if hello is None or not hello.get("ready"):
            self.kill()
            raise RuntimeError(f"{self.function}: function process {self.pid} did not start")
        self.init_error = hello.get("init_error")

    def send(self, request: dict[str, Any]) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.reap()

    def close(self, grace: float = 2.0) -> None:
        """Ask the process to exit (stdin EOF), then kill it if it does not."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
        self.reap()

    def reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(OSError):
            os.close(self._reply_fd)
        self._reply_fd = -1


class FunctionPool:
    """``size`` warm processes of one function; ``invoke`` waits for a free one."""

    def __init__(
        self,
        *,
        function: str,
        handler: str,
        env: Mapping[str, str],
        timeout: float,
        size: int = 1,
        package: FunctionPackage,
        memory: int = 128,
        output: IO[Any] | None = None,
        on_invocation: Callable[[Invocation], None] | None = None,
        on_change: Callable[[FunctionPool], None] | None = None,
        history: int = 2000,
        fork: bool | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a function pool needs at least one process")
        self.function = function
        self.handler = handler
        self.env = dict(env)
        self.timeout = float(timeout)
        self.size = size
        self.memory = memory
        self.package = package
        self._output = output
        self._on_invocation = on_invocation
        self._on_change = on_change
        self._idle: queue.Queue[Runtime] = queue.Queue()
        self._all: dict[int, Runtime] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        self.invocations: deque[Invocation] = deque(maxlen=history)
        self.replaced = 0
        self.generation = 0  # bumped by recycle(): processes of an older one are replaced
        self._fork = forks_by_default() if fork is None else fork
        self._template: Template | None = None
        self._template_generation = 0
        self._retired: list[Template] = []
        self._template_lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FunctionPool:
        runtimes = [self._spawn() for _ in range(self.size)]
        try:
            for rt in runtimes:
                rt.wait_ready()
        except BaseException:
            for rt in runtimes:
                rt.kill()
            raise
        for rt in runtimes:
            self._register(rt)
            self._idle.put(rt)
        self._changed()
        self._monitor = threading.Thread(target=self._watch, name=f"pool-{self.function}", daemon=True)
        self._monitor.start()
        return self

    def stop(self) -> None:
        self._closed.set()
        with self._lock:
            runtimes = list(self._all.values())
            self._all.clear()
        for rt in runtimes:
            # A busy process is killed; an idle one is asked to leave.
            rt.close(grace=1.0)
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        with self._template_lock:
            templates = [*self._retired, *([self._template] if self._template is not None else [])]
            self._template, self._retired = None, []
        for template in templates:
            template.close(grace=1.0)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(self._all)

    def recycle(self) -> None:
        """New code: replace every process with a fresh one that imports the handler again.

        Idle processes go at once; a busy one finishes its invocation on the code it has
        (as Lambda does when a function is updated) and is replaced when it comes back.
        """
        with self._lock:
            self.generation += 1
        idle: list[Runtime] = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for rt in idle:
            self._retire(rt)

    def wait_recycled(self, timeout: float) -> bool:
        """Wait until no process of an older generation is left (a busy one is replaced when
        its invocation ends); False if one still ran after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                old = [rt for rt in self._all.values() if rt.generation < self.generation]
            if not old:
                return True
            if time.monotonic() > deadline or self._closed.is_set():
                return False
            time.sleep(0.05)

    # ------------------------------------------------------------ invoke

    def invoke(
        self, event: Any, *, request_id: str | None = None, wait: float | None = None, trace_id: str | None = None
    ) -> Invocation:
        request_id = request_id or str(uuid.uuid4())
        rt = self._acquire(wait)
        started = time.time()
        t0 = time.monotonic()
        timeout_ms = int(self.timeout * 1000)
        outcome, result, error = "crash", None, None
        healthy = False
        request = {"id": request_id, "event": event, "timeout_ms": timeout_ms, "trace_id": trace_id}
        if rt.send(request):
            reply, oom = self._await_reply(rt, t0 + self.timeout)
            if oom:
                outcome, error = "oom", out_of_memory_error(request_id)
            elif reply is not None and reply.get("id") == request_id:
                healthy = True
                if reply.get("error") is not None:
                    outcome, error = "error", reply["error"]
                else:
                    outcome, result = "ok", reply.get("result")
            elif reply is None and rt.alive() and time.monotonic() - t0 >= self.timeout:
                outcome = "timeout"
                error = {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"Task timed out after {self.timeout:.2f} seconds",
                }
        if outcome == "crash":
            with contextlib.suppress(subprocess.TimeoutExpired):
                rt.proc.wait(timeout=2)  # EOF comes a moment before the exit status
            code = rt.proc.returncode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
            error = {"errorType": "Runtime.ExitError", "errorMessage": f"function process {how}"}
        inv = Invocation(
            function=self.function,
            request_id=request_id,
            pid=rt.pid,
            started_at=started,
            duration_ms=round((time.monotonic() - t0) * 1000, 1),
            outcome=outcome,
            result=result,
            error=error,
        )
        if healthy:
            self._release(rt)
        else:
            self._replace(rt)
        self.invocations.append(inv)
        if self._on_invocation is not None:
            self._on_invocation(inv)
        return inv

    def _await_reply(self, rt: Runtime, deadline: float) -> tuple[dict[str, Any] | None, bool]:
        """The reply (None on timeout or death), and whether the process passed MemorySize first.

        The peak is read while waiting and once more after the reply: an answer
        from a process that went over the limit is never delivered, as Lambda's
        sandbox would have been killed before it could send it.
        """
        reply = None
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            reply = rt.read_line(min(deadline, now + MEMORY_POLL_SECONDS))
            if reply is not None or rt.eof:
                break
            if over_memory(peak_memory_mb(rt.pid), self.memory):
                rt.kill()
                return None, True
        if over_memory(peak_memory_mb(rt.pid), self.memory):
            rt.kill()
            return None, True
        return reply, False

    # ------------------------------------------------------------ internals

    def _spawn(self) -> Runtime:
        generation = self.generation
        rt = Runtime(
            function=self.function,
            handler=self.handler,
            memory=self.memory,
            env=self.env,
            package=self.package,
            output=self._output,
            template=self._current_template(generation),
        )
        rt.generation = generation
        return rt

    def _current_template(self, generation: int) -> Template | None:
        """The template that forks this generation's processes: a new one after recycle() (new code,
        new environment) or after the last one died; None where processes are not forked."""
        if not self._fork:
            return None
        with self._template_lock:
            if self._closed.is_set():
                raise PoolClosed(self.function)
            current = self._template
            if current is not None and current.alive and self._template_generation == generation:
                return current
            if current is not None:
                current.retire()  # its processes finish their invocations on the old code
                self._retired.append(current)
            self._retired = [t for t in self._retired if t.proc.poll() is None]
            self._template = None
            self._template = Template(
                template_command(self.package, os.getpid()),
                env=package_env(self.env, self.package),
                cwd=self.package.task_root,
                output=self._output,
            )
            self._template_generation = generation
            return self._template

    def _retire(self, rt: Runtime) -> None:
        """Close a healthy process of an older generation and start its replacement."""
        rt.close(grace=1.0)
        with self._lock:
            self._all.pop(rt.pid, None)
        self._replace(rt, count=False)

    def _register(self, rt: Runtime) -> None:
        # Only ready processes are listed: pids() is what a chaos kill may aim at.
        with self._lock:
            self._all[rt.pid] = rt

    def _acquire(self, wait: float | None) -> Runtime:
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            if self._closed.is_set():
                raise PoolClosed(self.function)
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"{self.function}: no free function process")
            try:
                rt = self._idle.get(timeout=left)
            except queue.Empty:
                continue
            if not rt.alive():
                self._replace(rt)  # died while idle (killed from outside)
            elif rt.generation < self.generation:
                self._retire(rt)  # missed by recycle() (the monitor held it): still old code
            else:
                return rt

    def _release(self, rt: Runtime) -> None:
        if self._closed.is_set():
            rt.close(grace=1.0)
        elif rt.generation < self.generation:
            self._retire(rt)
        else:
            self._idle.put(rt)

    def _replace(self, rt: Runtime, count: bool = True) -> None:
        rt.kill()
        with self._lock:
            self._all.pop(rt.pid, None)
        if self._closed.is_set():
            return
        if count:  # a death, not a reload
            self.replaced += 1
        self._changed()  # the dead pid leaves the stack file at once
        while not self._closed.is_set():
            try:
                new = self._spawn()
                new.wait_ready()
            except PoolClosed:
                return
            except RuntimeError:  # it did not start (nor its template): try again
                time.sleep(0.5)
                continue
            with self._lock:
                closed = self._closed.is_set()
                if not closed:
                    self._all[new.pid] = new
            if closed:
                new.close(grace=1.0)
                return
            self._idle.put(new)
            self._changed()
            break

    def _watch(self) -> None:
        """Replace idle processes that died (a chaos kill while no invocation ran)."""
        while not self._closed.wait(0.25):
            dead: list[Runtime] = []
            kept: list[Runtime] = []
            while True:
                try:
                    rt = self._idle.get_nowait()
                except queue.Empty:
                    break
                (kept if rt.alive() else dead).append(rt)
            for rt in kept:
                if rt.generation < self.generation:
                    self._retire(rt)  # held here while recycle() ran: still the old code
                else:
                    self._idle.put(rt)
            for rt in dead:
                self._replace(rt)

    def _changed(self) -> None:
        if self._on_change is not None and not self._closed.is_set():
            self._on_change(self)


def output_file(path: Path) -> IO[Any]:
    return private.open_append(path)  # the functions' output may hold anything they print
