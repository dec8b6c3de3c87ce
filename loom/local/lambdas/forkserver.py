"""A function's template process: new execution environments by fork, not by a fresh interpreter.

A chaos run kills workers on purpose, and every replacement started cold: a new interpreter
that imported boto3 and the rest of the runtime before the handler's own init, about half of a
cold start's CPU (docs/notes/2026-12-07-fork-server.md). The template is started the way an
environment was (the same bootstrap, interpreter flags, environment, working directory and
read-only guard), imports the runtime's libraries once, and forks an environment per request.

What a fork shares with its siblings is only what the runtime's libraries did at import; the
handler's module and its init run in each fork, as Lambda runs them in each environment, so a
value a module draws at import (an id, a random seed) is still its own. ``random`` reseeds
itself in a fork. A fork's peak memory starts at the template's size, which is what importing
the same libraries costs a fresh process.

The supervisor talks to the template over a ``SOCK_SEQPACKET`` pair, one JSON object a packet:
a spawn request carries the environment's stdin and reply pipes as file descriptors, and the
template answers with the new pid, then with that pid's exit code when it has reaped it (the
supervisor cannot wait for a process it did not start). A template that dies takes its forks
with it: each watches its parent, and the supervisor kills any it still knew of.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

STARTUP_TIMEOUT = 60.0
KILLED = -signal.SIGKILL  # the code of a fork whose template died: the supervisor killed it


class Process(Protocol):
    """What the pool uses of a function process: a :class:`subprocess.Popen` or a fork's handle."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | Any: ...

    @property
    def stdin(self) -> IO[str] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class TemplateGone(RuntimeError):
    """The template could not start, or is no longer there to fork."""


class Template:
    """One function's template process, and the exit codes of the environments it forked."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str], cwd: Path, output: IO[Any] | None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [*command, "--control-fd", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=dict(env),
                cwd=str(cwd),
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._spawning = threading.Lock()  # one request in flight: answers come in order
        self._changed = threading.Condition()
        self._answers: dict[str, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._forks: set[int] = set()
        self._gone = False
        try:
            self._await_ready()
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name="template-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self._gone

    def spawn(self, handler: str, function_name: str, memory: int) -> tuple[ForkedProcess, int]:
        """A new environment serving ``handler``, and the read end of its reply pipe."""
        stdin_r, stdin_w = os.pipe()
        reply_r, reply_w = os.pipe()
        request_id = uuid.uuid4().hex
        request = {"spawn": request_id, "handler": handler, "function_name": function_name, "memory": memory}
        try:
            with self._spawning:
                if self._gone:
                    raise TemplateGone("the function's template process has ended")
                try:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [stdin_r, reply_w])
                except OSError as exc:
                    raise TemplateGone("the function's template process has ended") from exc
                answer = self._await_answer(request_id)
        except BaseException:
            for fd in (stdin_w, reply_r):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, reply_w):
                os.close(fd)
        pid = int(answer["pid"])
        return ForkedProcess(pid, os.fdopen(stdin_w, "w", encoding="utf-8"), self), reply_r

    def retire(self) -> None:
        """Fork no more; the template leaves once the environments it forked have ended."""
        with contextlib.suppress(OSError):
            self._sock.send(json.dumps({"retire": True}).encode())

    def close(self, grace: float = 2.0) -> None:
        """Stop at once: the template exits, and so does every environment still running."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self._mark_gone()

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._exits:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left)
            return self._exits[pid]

    # ------------------------------------------------------------ internals

    def _await_ready(self) -> None:
        ready, _, _ = select.select([self._sock], [], [], STARTUP_TIMEOUT)
        data = self._sock.recv(65536) if ready else b""
        if not data or not json.loads(data).get("ready"):
            raise TemplateGone(f"the template process {self.proc.pid} did not start")

    def _await_answer(self, request_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with self._changed:
            while request_id not in self._answers:
                left = deadline - time.monotonic()
                if self._gone or left <= 0:
                    raise TemplateGone("the function's template process did not fork")
                self._changed.wait(left)
            answer = self._answers.pop(request_id)
            if "pid" not in answer:
                raise TemplateGone(str(answer.get("error", "the template process did not fork")))
            self._forks.add(int(answer["pid"]))
            return answer

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._mark_gone()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)  # reaped now: a retired template leaves no zombie behind
                return
            message = json.loads(data)
            with self._changed:
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                    self._forks.discard(int(message["exit"]))
                elif "spawned" in message:
                    self._answers[str(message["spawned"])] = message
                self._changed.notify_all()

    def _mark_gone(self) -> None:
        """No more exit reports will come: a fork still known is killed (it would follow its template
        within a quarter second anyway) and counted as killed."""
        with self._changed:
            if self._gone:
                return
            self._gone = True
            for pid in self._forks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._exits.setdefault(pid, KILLED)
            self._forks.clear()
            self._changed.notify_all()
        with contextlib.suppress(OSError):
            self._sock.close()


class ForkedProcess:
    """A fork of a :class:`Template`, with the part of :class:`subprocess.Popen` the pool uses."""

    def __init__(self, pid: int, stdin: IO[str], template: Template) -> None:
        self.pid = pid
        self.stdin: IO[str] | None = stdin
        self._template = template

    @property
    def returncode(self) -> int | None:
        return self._template.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._template.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"function process {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        # Only while no exit was reported: the template reports a fork's end as soon as it reaps
        # it, so a pid that could name another process is one this test already knows is gone,
        # but for that one message's flight.
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
