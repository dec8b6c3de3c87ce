"""How long a poll waits between checks: ``fixed(seconds)`` or ``exponential(initial, factor, max, jitter)``.

Values of the authoring API (frozen, checked when built) and the pure delay they give. Full
jitter draws from a hash of (execution, step, attempt, check number), never from ``random``:
a re-run of the same check waits the same time, and tests see the same delays every run.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

from engine.errors import WorkflowDefinitionError

PollJitter = Literal["full", "none"]
POLL_JITTERS: tuple[str, ...] = ("full", "none")


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise WorkflowDefinitionError(f"{what} must be a positive number of seconds, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Fixed:
    """The same delay after every not-yet."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _positive(self.seconds, "fixed(seconds)"))

    def describe(self) -> dict[str, object]:
        return {"kind": "fixed", "seconds": self.seconds}


@dataclass(frozen=True)
class Exponential:
    """``min(max, initial * factor ** (n - 1))`` after the n-th not-yet; full jitter draws in [0, that)."""

    initial: float
    factor: float = 2.0
    max: float = 300.0
    jitter: PollJitter = "full"

    def __post_init__(self) -> None:
        object.__setattr__(self, "initial", _positive(self.initial, "exponential(initial)"))
        object.__setattr__(self, "max", _positive(self.max, "exponential(max)"))
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
            raise WorkflowDefinitionError(f"exponential(factor) must be a number >= 1, not {factor!r}")
        object.__setattr__(self, "factor", float(factor))
        if self.max < self.initial:
            raise WorkflowDefinitionError(f"exponential(max={self.max:g}) is below initial={self.initial:g}")
        if self.jitter not in POLL_JITTERS:
            raise WorkflowDefinitionError(f"exponential(jitter) must be one of {POLL_JITTERS}, not {self.jitter!r}")

    def describe(self) -> dict[str, object]:
        return {"kind": "exponential", "initial": self.initial, "factor": self.factor, "max": self.max,
                "jitter": self.jitter}  # fmt: skip


PollStrategy = Fixed | Exponential


def fixed(seconds: float) -> Fixed:
    return Fixed(seconds)


def exponential(initial: float, factor: float = 2.0, max: float = 300.0, jitter: PollJitter = "full") -> Exponential:
    return Exponential(initial, factor, max, jitter)


def ceiling(strategy: PollStrategy, check: int) -> float:
    """The delay after not-yet number ``check`` (1-based) before jitter."""
    if isinstance(strategy, Fixed):
        return strategy.seconds
    # The exponent is capped so that a long poll cannot overflow a float on its way to ``max``.
    power = min(max(0, check - 1), 1024)
    try:
        grown = strategy.initial * strategy.factor**power
    except OverflowError:
        return strategy.max
    return min(strategy.max, grown)


def jitter_fraction(key: str) -> float:
    """A number in [0, 1) that depends only on ``key``."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def check_key(execution_id: str, step: int, attempt: int, check: int) -> str:
    return f"{execution_id}:{step}:{attempt}:{check}"


def delay_after(strategy: PollStrategy, check: int, key: str) -> float:
    """Seconds from not-yet number ``check`` to the next check."""
    top = ceiling(strategy, check)
    if isinstance(strategy, Exponential) and strategy.jitter == "full":
        return top * jitter_fraction(key)
    return top
