"""Retry policy: pure decisions from (error, attempt)."""

from __future__ import annotations

import random

import pytest

from engine import NonRetryableError, RetryPolicy
from engine.errors import WorkerLost, WorkflowDefinitionError
from engine.retry import RetryDecision, backoff, decide

pytestmark = pytest.mark.unit


class Boom(Exception):
    pass


class Other(Exception):
    pass


def test_defaults_follow_the_anchors():
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.jitter, policy.rate) == (6, "full", 2.0)


def test_no_jitter_is_capped_exponential():
    policy = RetryPolicy(base=2, rate=3, max_delay=50, jitter="none")
    rng = random.Random(1)
    assert [backoff(policy, n, rng) for n in range(1, 6)] == [2, 6, 18, 50, 50]


def test_full_jitter_is_uniform_below_the_ceiling_and_seeded():
    policy = RetryPolicy(base=4, max_delay=100, jitter="full")
    a = [backoff(policy, n, random.Random(42)) for n in range(1, 8)]
    b = [backoff(policy, n, random.Random(42)) for n in range(1, 8)]
    assert a == b
    for n, delay in enumerate(a, start=1):
        assert 0 <= delay <= min(100, 4 * 2 ** (n - 1))
    rng = random.Random(3)
    spread = {round(backoff(policy, 3, rng), 6) for _ in range(50)}
    assert len(spread) > 40, "full jitter actually varies"


def test_equal_jitter_keeps_at_least_half_the_ceiling():
    policy = RetryPolicy(base=10, max_delay=1000, jitter="equal")
    rng = random.Random(5)
    for n in range(1, 8):
        ceiling = min(1000, 10 * 2 ** (n - 1))
        for _ in range(20):
            assert ceiling / 2 <= backoff(policy, n, rng) <= ceiling


def test_gives_up_at_max_attempts():
    policy = RetryPolicy(max_attempts=3, base=1, jitter="none")
    rng = random.Random(0)
    assert decide(policy, Boom(), 1, rng) == RetryDecision(True, 1.0, "retry")
    assert decide(policy, Boom(), 2, rng) == RetryDecision(True, 2.0, "retry")
    assert decide(policy, Boom(), 3, rng) == RetryDecision.give_up("max_attempts")


def test_max_attempts_one_never_retries():
    assert not decide(RetryPolicy(max_attempts=1), Boom(), 1, random.Random(0)).retry


def test_non_retryable_error_always_fails_at_once():
    policy = RetryPolicy(max_attempts=10, retry_on=(Exception,), decide=lambda e, a: RetryDecision.after(1))
    assert decide(policy, NonRetryableError("no"), 1, random.Random(0)) == RetryDecision.give_up("non_retryable")


def test_retry_on_limits_which_errors_retry():
    policy = RetryPolicy(retry_on=Boom)  # a single class is accepted
    assert policy.retry_on == (Boom,)
    assert decide(policy, Boom(), 1, random.Random(0)).retry
    assert decide(policy, Other(), 1, random.Random(0)) == RetryDecision.give_up("not_in_retry_on")


def test_no_retry_on_wins_over_retry_on():
    policy = RetryPolicy(retry_on=(Exception,), no_retry_on=(Boom,))
    assert decide(policy, Boom(), 1, random.Random(0)) == RetryDecision.give_up("no_retry_on")
    assert decide(policy, Other(), 1, random.Random(0)).retry


def test_worker_lost_ignores_retry_on_but_not_max_attempts():
    policy = RetryPolicy(max_attempts=2, retry_on=(Boom,))
    assert decide(policy, WorkerLost("died"), 1, random.Random(0)).retry
    assert decide(policy, WorkerLost("died"), 2, random.Random(0)) == RetryDecision.give_up("max_attempts")


def test_custom_decide_overrides_and_none_falls_back():
    seen = []

    def custom(error, attempt):
        seen.append((type(error).__name__, attempt))
        if isinstance(error, Boom):
            return RetryDecision.after(123, "custom")
        if isinstance(error, Other):
            return RetryDecision.give_up("custom says no")
        return None

    policy = RetryPolicy(max_attempts=3, base=1, jitter="none", decide=custom)
    rng = random.Random(0)
    assert decide(policy, Boom(), 1, rng) == RetryDecision(True, 123.0, "custom")
    assert decide(policy, Other(), 1, rng) == RetryDecision.give_up("custom says no")
    assert decide(policy, KeyError("k"), 1, rng) == RetryDecision(True, 1.0, "retry")
    # A custom retry still stops at max_attempts.
    assert decide(policy, Boom(), 3, rng) == RetryDecision.give_up("max_attempts")
    assert seen[0] == ("Boom", 1)


def test_decision_delay_is_never_negative():
    assert RetryDecision.after(-5).delay == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"base": -1}, {"max_delay": -1}, {"rate": 0.5}, {"jitter": "sometimes"}],
)
def test_invalid_policies_are_definition_errors(kwargs):
    with pytest.raises(WorkflowDefinitionError):
        RetryPolicy(**kwargs)
