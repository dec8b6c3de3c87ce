"""Time, injected. The engine never calls ``time.time()`` itself."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, value: float) -> None:
        self._now = float(value)


# Ten years either way: far enough for any timer a workflow sets, near enough that every
# timestamp written stays a valid date (a year past 9999 cannot be formatted, and an item
# written with one would answer 500 long after the clock is reset).
MAX_OFFSET_SECONDS = 10 * 365.25 * 86400


def valid_offset(seconds: float) -> bool:
    return math.isfinite(seconds) and abs(seconds) <= MAX_OFFSET_SECONDS


class OffsetClock:
    """Real time plus an offset read on every call.

    This is how local time travel works: ``loom time advance 2h`` raises the
    offset, and every process of the local stack reads it through this clock.
    An offset outside ``MAX_OFFSET_SECONDS`` (a hand-edited file) is ignored.
    """

    def __init__(self, offset: Callable[[], float], base: Clock | None = None) -> None:
        self._offset = offset
        self._base = base or SystemClock()

    def now(self) -> float:
        offset = self._offset()
        return self._base.now() + (offset if valid_offset(offset) else 0.0)
