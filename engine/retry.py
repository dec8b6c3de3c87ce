"""Retry policy as pure functions: an error and an attempt number in, a decision out."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from engine.errors import NonRetryableError, WaitTimeout, WorkerLost, WorkflowDefinitionError

Jitter = Literal["none", "full", "equal"]
JITTERS: tuple[str, ...] = ("none", "full", "equal")


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay: float = 0.0
    reason: str = ""

    @classmethod
    def give_up(cls, reason: str) -> RetryDecision:
        return cls(retry=False, delay=0.0, reason=reason)

    @classmethod
    def after(cls, delay: float, reason: str = "retry") -> RetryDecision:
        return cls(retry=True, delay=max(0.0, float(delay)), reason=reason)


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with jitter.

    ``attempt`` counts from 1; the delay before attempt ``n + 1`` is
    ``min(max_delay, base * rate ** (n - 1))`` with the chosen jitter applied.
    """

    max_attempts: int = 6
    base: float = 1.0
    rate: float = 2.0
    max_delay: float = 300.0
    jitter: Jitter = "full"
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    no_retry_on: tuple[type[BaseException], ...] = ()
    decide: Callable[[BaseException, int], RetryDecision | None] | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise WorkflowDefinitionError("max_attempts must be at least 1")
        if self.base < 0 or self.max_delay < 0 or self.rate < 1:
            raise WorkflowDefinitionError("base and max_delay must be >= 0 and rate >= 1")
        if self.jitter not in JITTERS:
            raise WorkflowDefinitionError(f"jitter must be one of {JITTERS}")
        # Accept a single class as well as a tuple.
        for name in ("retry_on", "no_retry_on"):
            value = getattr(self, name)
            if isinstance(value, type):
                object.__setattr__(self, name, (value,))


def backoff(policy: RetryPolicy, attempt: int, rng: random.Random) -> float:
    """The delay after failed attempt ``attempt`` (1-based)."""
    ceiling = min(policy.max_delay, policy.base * policy.rate ** max(0, attempt - 1))
    if policy.jitter == "full":
        return rng.uniform(0.0, ceiling)
    if policy.jitter == "equal":
        return ceiling / 2 + rng.uniform(0.0, ceiling / 2)
    return ceiling


def decide(policy: RetryPolicy, error: BaseException, attempt: int, rng: random.Random) -> RetryDecision:
    """Whether and when to run attempt ``attempt + 1`` after ``error``."""
    if isinstance(error, NonRetryableError):
        return RetryDecision.give_up("non_retryable")
    if policy.decide is not None:
        custom = policy.decide(error, attempt)
        if custom is not None:
            if custom.retry and attempt >= policy.max_attempts:
                return RetryDecision.give_up("max_attempts")
            return custom
    if policy.no_retry_on and isinstance(error, policy.no_retry_on):
        return RetryDecision.give_up("no_retry_on")
    # A lost worker says nothing about the step's own errors: retry_on does not apply.
    if not isinstance(error, WorkerLost) and not isinstance(error, policy.retry_on):
        return RetryDecision.give_up("not_in_retry_on")
    if attempt >= policy.max_attempts:
        return RetryDecision.give_up("max_attempts")
    return RetryDecision.after(backoff(policy, attempt, rng))


def retries_timeouts(policy: RetryPolicy) -> bool:
    """Whether a wait's timeout under ``policy`` starts another attempt (its description says)."""
    return policy.max_attempts > 1 and not any(issubclass(WaitTimeout, kind) for kind in policy.no_retry_on)


def for_wait(policy: RetryPolicy) -> RetryPolicy:
    """The policy of a wait whose step names none: ``policy``, except that the wait's timeout
    (a callback's, a heartbeat's, a signal's, a poll's) is not retried. A retry would wait the
    whole timeout again, so a "3-day" approval under the default six attempts lasted 18 days;
    an author who wants that passes ``retry=`` to the wait (DESIGN.md, "Waits"). The wait's own
    body (a callback's submit, a poll's check) still retries under ``policy``."""
    if not retries_timeouts(policy):
        return policy
    return replace(policy, no_retry_on=(*policy.no_retry_on, WaitTimeout))
