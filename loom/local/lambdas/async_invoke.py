"""Asynchronous invocation, as Lambda does it for EventBridge schedules.

EventBridge invokes the sweeper with InvocationType=Event: each tick is an
invocation of its own, whether or not the last one has finished, so a slow
run overlaps the next. When an asynchronous invocation fails (an error, a
timeout, a crashed runtime), Lambda retries it: by default twice, one minute
and then two minutes later, and never once the event is older than
MaximumEventAgeInSeconds (default six hours). The function's EventInvokeConfig
changes both numbers.

The policy is pure (:func:`decide`); :class:`AsyncInvoker` carries it out with
one thread per invocation and a heap of retries due on an injected clock, so
tests move the clock instead of sleeping.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine.log import get_logger
from loom.local.lambdas.pool import Invocation, PoolClosed

DEFAULT_RETRIES = 2
DEFAULT_MAX_AGE = 21600.0
RETRY_DELAYS = (60.0, 120.0)  # before the second and the third attempt
SCHEDULER_POLL = 0.5
# Lambda's async queue holds events for hours; locally each waiting event is a thread. Past this
# many at once (runs much slower than the tick, for long), new events are dropped and logged.
MAX_BACKLOG = 64


@dataclass(frozen=True)
class AsyncPolicy:
    max_retries: int = DEFAULT_RETRIES
    max_event_age: float = DEFAULT_MAX_AGE
    delays: tuple[float, ...] = RETRY_DELAYS

    @classmethod
    def from_event_invoke_config(cls, config: Mapping[str, Any]) -> AsyncPolicy:
        """The function's EventInvokeConfig (MaximumRetryAttempts, MaximumEventAgeInSeconds), defaults elsewhere."""
        return cls(
            max_retries=int(config.get("MaximumRetryAttempts", DEFAULT_RETRIES)),
            max_event_age=float(config.get("MaximumEventAgeInSeconds", DEFAULT_MAX_AGE)),
        )

    def delay(self, attempt: int) -> float:
        """Seconds between attempt ``attempt`` (1-based) failing and the next one."""
        return self.delays[min(attempt, len(self.delays)) - 1]


class Verdict(enum.Enum):
    DONE = "done"  # the invocation succeeded
    RETRY = "retry"  # run it again after the delay
    EXHAUSTED = "exhausted"  # failed, and no retry is left
    TOO_OLD = "too_old"  # failed, and the retry would start past MaximumEventAgeInSeconds


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    retry_at: float | None = None


def decide(outcome: str, attempt: int, first_at: float, now: float, policy: AsyncPolicy) -> Decision:
    """What Lambda does after attempt ``attempt`` of an event first queued at ``first_at`` ended in ``outcome``."""
    if outcome == "ok":
        return Decision(Verdict.DONE)
    if attempt > policy.max_retries:
        return Decision(Verdict.EXHAUSTED)
    retry_at = now + policy.delay(attempt)
    if retry_at - first_at > policy.max_event_age:
        return Decision(Verdict.TOO_OLD)
    return Decision(Verdict.RETRY, retry_at)


@dataclass(frozen=True)
class AsyncEvent:
    event_id: str
    event: Any
    first_at: float
    attempt: int = 1


@dataclass(frozen=True)
class AsyncAttempt:
    """One attempt's record: what ran and what Lambda decided next."""

    event_id: str
    attempt: int
    request_id: str
    outcome: str
    verdict: Verdict


class AsyncInvoker:
    """Runs each submitted event as its own invocation (overlapping freely) and retries failures by ``policy``."""

    def __init__(
        self,
        invoke: Callable[[Any], Invocation],
        policy: AsyncPolicy,
        *,
        clock: Callable[[], float],
        function: str = "function",
        history: int = 500,
    ) -> None:
        self._invoke = invoke
        self.policy = policy
        self._clock = clock
        self._function = function
        self._due: list[tuple[float, int, AsyncEvent]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._scheduler: threading.Thread | None = None
        self.attempts: deque[AsyncAttempt] = deque(maxlen=history)
        self.running = 0
        self.max_running = 0  # the most invocations that ran at once: overlap shows here
        self._log = get_logger(component="async_invoke", function=function)

    def submit(self, event: Any) -> AsyncEvent:
        """Queue ``event`` as an asynchronous invocation; it starts at once on a thread of its own."""
        item = AsyncEvent(event_id=str(uuid.uuid4()), event=event, first_at=self._clock())
        self._launch(item)
        return item

    def run_due(self) -> int:
        """Start every retry that is due by the clock; how many started."""
        now = self._clock()
        ready: list[AsyncEvent] = []
        with self._lock:
            while self._due and self._due[0][0] <= now:
                ready.append(heapq.heappop(self._due)[2])
        for item in ready:
            self._launch(item)
        return len(ready)

    def pending(self) -> list[tuple[float, AsyncEvent]]:
        with self._lock:
            return [(at, item) for at, _, item in sorted(self._due)]

    def start(self) -> AsyncInvoker:
        self._scheduler = threading.Thread(target=self._schedule, name=f"async-{self._function}", daemon=True)
        self._scheduler.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 5.0) -> None:
        for t in [self._scheduler, *self._threads]:
            if t is not None:
                t.join(timeout=timeout)

    # ------------------------------------------------------------ internals

    def _schedule(self) -> None:
        while not self._stop.wait(SCHEDULER_POLL):
            self.run_due()

    def _launch(self, item: AsyncEvent) -> None:
        if self._stop.is_set():
            return
        t = threading.Thread(target=self._attempt, args=(item,), name=f"async-{self._function}-run", daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            backlog = len(self._threads)
            if backlog < MAX_BACKLOG:
                self._threads.append(t)
        if backlog >= MAX_BACKLOG:
            self._log.error("async.event_dropped", reason="local_backlog", event_id=item.event_id, backlog=backlog)
            return
        t.start()

    def _attempt(self, item: AsyncEvent) -> None:
        with self._lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            inv = self._invoke(item.event)
        except PoolClosed:
            return
        finally:
            with self._lock:
                self.running -= 1
        decision = decide(inv.outcome, item.attempt, item.first_at, self._clock(), self.policy)
        self.attempts.append(AsyncAttempt(item.event_id, item.attempt, inv.request_id, inv.outcome, decision.verdict))
        fields = {"event_id": item.event_id, "attempt": item.attempt, "outcome": inv.outcome}
        if decision.verdict is Verdict.RETRY:
            assert decision.retry_at is not None
            with self._lock:
                again = replace(item, attempt=item.attempt + 1)
                heapq.heappush(self._due, (decision.retry_at, next(self._order), again))
            self._log.warning("async.retry_scheduled", retry_at=decision.retry_at, **fields)
        elif decision.verdict is not Verdict.DONE:
            self._log.error("async.event_dropped", reason=decision.verdict.value, **fields)
