"""Watching executions from outside while faults fly: version trails and bounded waits."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from chaos.invariants import Snapshot
from engine.state import Execution


class Source(Protocol):
    """What a watcher reads (a chaos Target, or a test's fake); ``get_many`` is used when it has one."""

    def get(self, execution_id: str) -> Execution | None: ...


class Timeout(Exception):
    pass


class Watcher:
    """Polls executions in a background thread and keeps every distinct version it sees.

    The trail is what the version invariant is checked on; ``changed_at`` gives
    recovery times (the last time an execution moved).
    """

    # A pass over many executions waits this many times its own length before the next one, so
    # the observer takes at most a tenth of the emulator from the system it observes (a thousand
    # executions cost ten batch reads a pass, each up to a second on a busy emulator). At a fifth,
    # the soak's watcher was the emulator's costliest caller after the worker and the sweeper
    # (17 % of its request CPU in a 300-execution soak, docs/notes/2026-12-07-soak-time.md).
    # A scenario's handful of executions (one batch) keeps the plain interval and its resolution.
    SHARE = 9.0
    BATCH = 100

    def __init__(self, target: Source, interval: float = 0.15) -> None:
        self._target = target
        self._interval = interval
        self._ids: list[str] = []
        self._trails: dict[str, list[Snapshot]] = {}
        self._latest: dict[str, Execution] = {}
        self._done: set[str] = set()
        # Reads are numbered before they are sent, and an execution keeps the number of the read
        # it last recorded: a read that began before that one may hold an older item, and
        # recording it after the newer one would show a version going backwards that never did.
        self._reads = itertools.count(1)
        self._recorded_read: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-watcher", daemon=True)
        self.errors = 0

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def add(self, *execution_ids: str) -> None:
        with self._lock:
            for eid in execution_ids:
                if eid not in self._trails:
                    self._ids.append(eid)
                    self._trails[eid] = []

    def poll(self, execution_id: str) -> Execution | None:
        """Read one execution now and record it."""
        read = self._next_read()
        ex = self._target.get(execution_id)
        if ex is not None:
            self._record(ex, read)
        return ex

    def _next_read(self) -> int:
        with self._lock:
            return next(self._reads)

    def _record(self, ex: Execution, read: int) -> None:
        with self._lock:
            if read < self._recorded_read.get(ex.id, 0):
                return  # overtaken by a read that began later and is already recorded
            self._recorded_read[ex.id] = read
            trail = self._trails.setdefault(ex.id, [])
            snap = Snapshot.of(ex)
            if not trail or trail[-1].version != snap.version or trail[-1].state() != snap.state():
                trail.append(snap)
            self._latest[ex.id] = ex
            if ex.terminal:
                self._done.add(ex.id)

    def _run(self) -> None:
        many = getattr(self._target, "get_many", None)
        while not self._stop.is_set():
            began = time.monotonic()
            with self._lock:
                pending = [i for i in self._ids if i not in self._done]
            if many is not None:
                self._pass_batched(many, pending)
            else:
                for eid in pending:
                    if self._stop.is_set():
                        return
                    try:
                        self.poll(eid)
                    except Exception:  # an emulator hiccup must not end the observation
                        self.errors += 1
            spent = time.monotonic() - began if len(pending) > self.BATCH else 0.0
            self._stop.wait(max(self._interval, self.SHARE * spent))

    def _pass_batched(self, many: Callable[[list[str]], list[Execution]], pending: list[str]) -> None:
        for start in range(0, len(pending), self.BATCH):
            if self._stop.is_set():
                return
            try:
                read = self._next_read()
                for ex in many(pending[start : start + self.BATCH]):
                    self._record(ex, read)
            except Exception:  # an emulator hiccup must not end the observation
                self.errors += 1

    def wait_seen(
        self,
        execution_ids: Iterable[str],
        pred: Callable[[Execution], bool] = lambda ex: ex.terminal,
        *,
        timeout: float,
    ) -> dict[str, Execution]:
        """``wait`` on what the background thread sees, without polling each execution again
        (with a thousand executions that would double the observer's load on the emulator)."""
        ids = list(execution_ids)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = {e: ex for e in ids if (ex := self._latest.get(e)) is not None and pred(ex)}
            if len(found) == len(ids):
                return found
            if time.monotonic() > deadline or not self._thread.is_alive():
                late = [
                    f"{e}: {x.status.value} step {x.current_step}" if (x := self.latest(e)) else f"{e}: missing"
                    for e in ids
                    if e not in found
                ]
                raise Timeout(f"{len(late)} execution(s) did not reach a terminal state in {timeout:.0f}s: {late[:5]}")
            time.sleep(0.5)

    def trail(self, execution_id: str) -> list[Snapshot]:
        with self._lock:
            return list(self._trails.get(execution_id, []))

    def latest(self, execution_id: str) -> Execution | None:
        with self._lock:
            return self._latest.get(execution_id)

    def first_seen(self, execution_id: str, pred: Callable[[Snapshot], bool]) -> float | None:
        for snap in self.trail(execution_id):
            if pred(snap):
                return snap.seen_at
        return None

    def wait(
        self,
        execution_ids: Iterable[str],
        pred: Callable[[Execution], bool] = lambda ex: ex.terminal,
        *,
        timeout: float,
        what: str = "a terminal state",
        poll: float = 0.2,
    ) -> dict[str, Execution]:
        """Poll until every execution satisfies ``pred``; raises Timeout naming the laggards."""
        ids = list(execution_ids)
        deadline = time.monotonic() + timeout
        found: dict[str, Execution] = {}
        while True:
            for eid in ids:
                if eid in found:
                    continue
                ex = self.poll(eid)
                if ex is not None and pred(ex):
                    found[eid] = ex
            if len(found) == len(ids):
                return found
            if time.monotonic() > deadline:
                late = [_where(e, self.latest(e)) for e in ids if e not in found]
                raise Timeout(f"{len(late)} execution(s) did not reach {what} in {timeout:.0f}s: {late[:5]}")
            time.sleep(poll)


def wait_for(check: Callable[[], Any], *, timeout: float, what: str, poll: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"gave up waiting for {what} after {timeout:.0f}s")
        time.sleep(poll)


def _where(execution_id: str, ex: Execution | None) -> str:
    """Where a late execution was last seen, for the timeout's message."""
    if ex is None:
        return f"{execution_id}: missing step ?"
    return f"{execution_id}: {ex.status.value} step {ex.current_step}"
