"""Machine stalls seen from the kit: moments when the whole machine stood still.

A scenario injects one fault and checks what the stack did about it, on timings it controls: a
4 s visibility against an 8 s step, a 6 s lease against forced sweeps. A sandboxed CI machine is
sometimes paused; every process stops, and on resume the wall clock has jumped (the monotonic
clock may not have). Every visibility timeout and lease then lapses at once, and SQS and the
sweeper do what they must: deliver again, re-drive. That is a second, unplanned fault, and a
check such as "with the heartbeat the step ran once" no longer says anything about the fault
the scenario planned.

So the kit watches for stalls (a thread that sleeps a quarter second and measures how long it
really took, on both clocks), records them in a scenario's evidence, and the runner runs a
scenario that failed during one once more (``verdict``). A failure without a stall is a failure.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

INTERVAL = 0.25  # seconds the watching thread sleeps between looks
# Stood still this long, a scenario's timings no longer hold: its shortest margin is a 4 s
# visibility of which the hand-off to a worker takes one to two seconds.
LIMIT = 2.0


@dataclass(frozen=True)
class Stall:
    """The kit stood still ``seconds`` (beyond its sleep) from wall time ``at``."""

    at: float
    seconds: float
    wall_gap: float
    monotonic_gap: float

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in asdict(self).items()}


def judge(
    wall_gap: float, monotonic_gap: float, at: float, *, interval: float = INTERVAL, limit: float = LIMIT
) -> Stall | None:
    """A look's verdict: a stall when either clock moved ``limit`` past the sleep.

    The wall clock is read too because a paused machine's monotonic clock may stand still; the
    monotonic clock because the wall clock may be stepped back.
    """
    seconds = max(wall_gap, monotonic_gap) - interval
    if seconds < limit:
        return None
    return Stall(at=at, seconds=seconds, wall_gap=wall_gap, monotonic_gap=monotonic_gap)


class Rerun(enum.Enum):
    """What the runner does with a scenario's result."""

    KEEP = "keep"  # passed, skipped, or failed with the machine running: the row stands
    AGAIN = "again"  # failed while the machine stood still: its planned fault was not the only one


def verdict(failed: bool, stalls: list[Stall], *, already_rerun: bool) -> Rerun:
    """Run a failed scenario once more only when the machine stood still during it, and only once."""
    if failed and stalls and not already_rerun:
        return Rerun.AGAIN
    return Rerun.KEEP


@dataclass
class StallWatch:
    """A thread recording every stall while the context is open."""

    interval: float = INTERVAL
    limit: float = LIMIT
    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    stalls: list[Stall] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> StallWatch:
        self._thread = threading.Thread(target=self._run, name="chaos-stall-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        wall, mono = self.wall(), self.monotonic()
        while not self._stop.wait(self.interval):
            now_wall, now_mono = self.wall(), self.monotonic()
            found = judge(now_wall - wall, now_mono - mono, wall, interval=self.interval, limit=self.limit)
            if found is not None:
                self.stalls.append(found)
            wall, mono = now_wall, now_mono

    def within(self, start: float, end: float) -> list[Stall]:
        """The stalls that overlap wall times ``start``..``end``."""
        return [s for s in list(self.stalls) if s.at <= end and s.at + s.wall_gap >= start]


def describe(stalls: list[Stall]) -> str:
    """One phrase for a row: how long the machine stood still, and how often."""
    longest = max(s.seconds for s in stalls)
    return f"the machine stood still {longest:.1f}s" + (f" ({len(stalls)} stalls)" if len(stalls) > 1 else "")


def evidence(stalls: list[Stall]) -> list[dict[str, Any]]:
    return [s.to_dict() for s in stalls]
