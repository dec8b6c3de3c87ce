"""Asynchronous invocation (the sweeper's schedule): overlap, and Lambda's retry policy on a moved clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from loom.local.lambdas.async_invoke import AsyncInvoker, AsyncPolicy, Verdict, decide
from loom.local.lambdas.pool import Invocation

pytestmark = pytest.mark.unit

WAIT = 10.0  # generous bound for a thread to reach a point; nothing here sleeps for timing


def inv(outcome: str, request_id: str = "r") -> Invocation:
    return Invocation("Sweeper", request_id, 1, 0.0, 1.0, outcome)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ the policy, pure


def test_default_policy_is_two_retries_one_then_two_minutes_apart() -> None:
    policy = AsyncPolicy()
    first = decide("error", 1, first_at=0.0, now=5.0, policy=policy)
    assert (first.verdict, first.retry_at) == (Verdict.RETRY, 65.0)
    second = decide("timeout", 2, first_at=0.0, now=70.0, policy=policy)
    assert (second.verdict, second.retry_at) == (Verdict.RETRY, 190.0)
    assert decide("crash", 3, first_at=0.0, now=200.0, policy=policy).verdict is Verdict.EXHAUSTED
    assert decide("ok", 1, first_at=0.0, now=1.0, policy=policy).verdict is Verdict.DONE


def test_event_invoke_config_sets_retries_and_age() -> None:
    policy = AsyncPolicy.from_event_invoke_config({"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60})
    assert decide("error", 1, 0.0, 1.0, policy).verdict is Verdict.EXHAUSTED
    aged = AsyncPolicy.from_event_invoke_config({"MaximumEventAgeInSeconds": 90})
    assert decide("error", 1, 0.0, 10.0, aged).verdict is Verdict.RETRY  # due at 70 s of age
    assert decide("error", 2, 0.0, 70.0, aged).verdict is Verdict.TOO_OLD  # would start at 190 s of age
    assert AsyncPolicy.from_event_invoke_config({}) == AsyncPolicy()


# ------------------------------------------------------------------ the invoker


def test_a_slow_run_overlaps_the_next_tick() -> None:
    """EventBridge does not wait for the last run: two ticks run at once."""
    release = threading.Event()
    both_in = threading.Barrier(3)

    def slow(event: Any) -> Invocation:
        both_in.wait(WAIT)  # passes only when two invocations are inside at the same moment
        release.wait(WAIT)
        return inv("ok", event["id"])

    invoker = AsyncInvoker(slow, AsyncPolicy(), clock=Clock(), function="Sweeper")
    invoker.submit({"id": "tick-1"})
    invoker.submit({"id": "tick-2"})
    both_in.wait(WAIT)  # a BrokenBarrierError here means the second tick waited for the first
    assert invoker.running == 2
    release.set()
    invoker.join()
    assert invoker.max_running == 2
    assert sorted(a.request_id for a in invoker.attempts) == ["tick-1", "tick-2"]
    assert {a.verdict for a in invoker.attempts} == {Verdict.DONE}


def test_a_failing_run_is_retried_after_one_then_two_minutes_then_dropped() -> None:
    clock = Clock()
    seen: list[Any] = []
    done = threading.Semaphore(0)

    def failing(event: Any) -> Invocation:
        seen.append(event)
        try:
            return inv("error", f"attempt-{len(seen)}")
        finally:
            done.release()

    invoker = AsyncInvoker(failing, AsyncPolicy(), clock=clock, function="Sweeper")
    invoker.submit({"id": "tick"})
    assert done.acquire(timeout=WAIT)
    invoker.join()
    assert [at for at, _ in invoker.pending()] == [1060.0]

    clock.now = 1059.0
    assert invoker.run_due() == 0  # not before the minute
    clock.now = 1060.0
    assert invoker.run_due() == 1
    assert done.acquire(timeout=WAIT)
    invoker.join()
    assert [at for at, _ in invoker.pending()] == [1180.0]  # two minutes after the second attempt

    clock.now = 1180.0
    assert invoker.run_due() == 1
    assert done.acquire(timeout=WAIT)
    invoker.join()
    assert invoker.pending() == []  # two retries, then the event is dropped
    assert [(a.attempt, a.verdict) for a in invoker.attempts] == [
        (1, Verdict.RETRY),
        (2, Verdict.RETRY),
        (3, Verdict.EXHAUSTED),
    ]
    assert seen == [{"id": "tick"}] * 3  # the same event each time, as Lambda re-sends it


def test_a_retry_that_succeeds_ends_the_event() -> None:
    clock = Clock()
    outcomes = iter(["timeout", "ok"])
    done = threading.Semaphore(0)

    def flaky(event: Any) -> Invocation:
        try:
            return inv(next(outcomes))
        finally:
            done.release()

    invoker = AsyncInvoker(flaky, AsyncPolicy(), clock=clock)
    invoker.submit({})
    assert done.acquire(timeout=WAIT)
    invoker.join()
    clock.now += 60
    assert invoker.run_due() == 1
    assert done.acquire(timeout=WAIT)
    invoker.join()
    assert [a.verdict for a in invoker.attempts] == [Verdict.RETRY, Verdict.DONE]
    assert invoker.pending() == []


def test_a_backlog_past_the_local_bound_drops_new_events_instead_of_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    from loom.local.lambdas import async_invoke

    monkeypatch.setattr(async_invoke, "MAX_BACKLOG", 2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def stuck(event: Any) -> Invocation:
        started.release()
        release.wait(WAIT)
        return inv("ok")

    invoker = AsyncInvoker(stuck, AsyncPolicy(), clock=Clock())
    for _ in range(4):
        invoker.submit({})
    assert started.acquire(timeout=WAIT) and started.acquire(timeout=WAIT)
    release.set()
    invoker.join()
    assert len(invoker.attempts) == 2  # the third and fourth were dropped, not queued without bound
