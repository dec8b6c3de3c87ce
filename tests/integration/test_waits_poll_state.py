"""wait_until with state, a strategy and a bound on the real table (moto), and in-process
(loom.testing's memory backend): each check gets the state the last one checkpointed, a worker
that dies between or inside checks loses no state and applies none twice, the delays are the
strategy's on the virtual clock, and max_checks fails the attempt like any step failure."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from engine import Registry, RetryPolicy
from engine.poll_strategy import check_key, delay_after
from engine.ports import FaultPoint
from engine.workflow import NOT_YET, StepContext, build_spec, exponential, not_yet, wait_until
from loom.testing import WorkerDied, WorkflowTest
from loom.testing.runner import StillRunning

pytestmark = pytest.mark.integration

ONCE = RetryPolicy(max_attempts=1)


@dataclass
class Seen:
    """Every check as it ran: the state it got and the virtual time."""

    states: list[Any] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    die_inside: set[int] = field(default_factory=set)  # the check numbers whose worker dies after running
    caught: list[dict[str, Any]] = field(default_factory=list)


def counting(seen: Seen, done_at: int):
    """Adds one to a counter each check (the state), done when it reaches ``done_at``."""

    def pages(ctx: StepContext, state: dict[str, Any]) -> Any:
        seen.states.append(state)
        seen.times.append(ctx.services["clock"].now())
        n = state["n"] + 1
        if len(seen.states) in seen.die_inside:
            seen.die_inside.discard(len(seen.states))
            raise WorkerDied("after the check ran, before its state was written")
        if n >= done_at:
            return {"pages": n, "log": [*state["log"], n]}
        return not_yet({"n": n, "log": [*state["log"], n]})

    return pages


def registry(seen: Seen) -> Registry:
    reg = Registry()
    start = {"n": 0, "log": []}
    reg.add(build_spec("count", [wait_until(counting(seen, 4), every=60, initial_state=start, name="pages")]))
    backoff = exponential(5, factor=2, max=30, jitter="none")
    reg.add(build_spec("backoff", [wait_until(counting(seen, 6), strategy=backoff, initial_state=start)], ONCE))
    jittered = exponential(5, factor=2, max=300)
    reg.add(build_spec("jitter", [wait_until(counting(seen, 5), strategy=jittered, initial_state=start)], ONCE))

    def handled(ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
        seen.caught.append(error)
        return {"gave_up": error["type"]}

    twice = RetryPolicy(max_attempts=2, jitter="none")  # the wait's own: a workflow's does not retry a timeout
    never = wait_until(lambda ctx: NOT_YET, every=10, max_checks=3, name="never", catch=handled, retry=twice)
    reg.add(build_spec("bounded", [never, lambda ctx: {"after": True}], twice))
    flaky = counting(seen, 4)

    def raises_on_the_third(ctx: StepContext, state: dict[str, Any]) -> Any:
        if len(seen.states) == 2 and state["n"] == 2:
            seen.states.append(state)
            raise RuntimeError("the service answered 500")
        return flaky(ctx, state)

    once_more = RetryPolicy(max_attempts=2, base=1, jitter="none")
    reg.add(build_spec("flaky", [wait_until(raises_on_the_third, every=60, initial_state=start)], once_more))
    reg.add(build_spec("unbounded_fail", [wait_until(lambda ctx: NOT_YET, every=10, max_checks=2, name="n")], ONCE))
    return reg


@pytest.fixture(params=["moto", "memory"])
def t(request: pytest.FixtureRequest) -> Iterator[tuple[WorkflowTest, Seen]]:
    seen = Seen()
    with WorkflowTest(registry(seen), backend=request.param) as test:
        test.engine.services = {"clock": test.clock}
        yield test, seen


def test_each_check_gets_the_state_the_last_one_checkpointed(t: tuple[WorkflowTest, Seen]) -> None:
    test, seen = t
    test.start("count", {}, execution_id="s1")
    ex = test.run("s1")
    assert ex.status.value == "COMPLETED" and ex.context == {"pages": 4, "log": [1, 2, 3, 4]}
    assert seen.states == [{"n": n, "log": list(range(1, n + 1))} for n in range(4)]
    [record] = test.history("s1")
    assert [a.outcome.value for a in record.attempts] == ["completed"], "one attempt, four checks"


def test_a_worker_that_dies_between_checks_loses_no_state(t: tuple[WorkflowTest, Seen]) -> None:
    """Failure table: 'worker dies between two checks of a stateful poll'. The first check's
    state is written; the worker that takes the second check dies before it runs, and the
    one after that dies before it sends the next check's message (its state written)."""
    test, seen = t
    test.start("count", {}, execution_id="s2")
    with pytest.raises(StillRunning):
        test.run("s2", max_deliveries=1)
    held = test.execution("s2").wait
    assert held is not None and held.checkpoint == {"state": {"n": 1, "log": [1]}} and held.polls == 1
    test.crash(FaultPoint.BEFORE_STEP, step="pages", times=1)
    sent = test.queue.send
    dropped: list[Any] = []

    def die_once_sending(message: Any, delay: int = 0) -> None:
        if not dropped and len(seen.states) == 3:
            dropped.append(message)
            raise WorkerDied("after the third check's state write, before its message")
        sent(message, delay)

    test.queue.send = die_once_sending  # type: ignore[method-assign]
    ex = test.run("s2")
    assert test.faults.fired and dropped and test.deaths == 2
    assert ex.status.value == "COMPLETED" and ex.context["log"] == [1, 2, 3, 4]
    assert [s["n"] for s in seen.states] == [0, 1, 2, 3], "every check once, from the state before it"
    # The guarded redrive's worker was the one killed after its start mark: that attempt counts
    # as lost, and the retry goes on from the checkpoint, not from initial_state.
    [record] = test.history("s2")
    assert [(a.attempt, a.outcome.value) for a in record.attempts] == [(1, "worker_lost"), (2, "completed")]


def test_a_worker_that_dies_inside_a_check_reruns_it_from_the_state_before(t: tuple[WorkflowTest, Seen]) -> None:
    """The second check ran but its worker died before the state write: its state was never
    checkpointed, so the re-run starts from the first check's state and counts it once."""
    test, seen = t
    seen.die_inside = {2}
    test.start("count", {}, execution_id="s3")
    ex = test.run("s3")
    assert test.deaths == 1 and ex.status.value == "COMPLETED"
    assert ex.context["log"] == [1, 2, 3, 4], "no step of the count lost or counted twice"
    assert [s["n"] for s in seen.states] == [0, 1, 1, 2, 3]


def test_a_check_that_raises_is_retried_from_the_last_checkpoint(t: tuple[WorkflowTest, Seen]) -> None:
    test, seen = t
    test.start("flaky", {}, execution_id="s8")
    ex = test.run("s8")
    assert ex.status.value == "COMPLETED" and ex.context["log"] == [1, 2, 3, 4]
    assert [s["n"] for s in seen.states] == [0, 1, 2, 2, 3], "the retry's first check got the checkpoint"
    [record] = test.history("s8")
    assert [(a.attempt, a.outcome.value) for a in record.attempts] == [(1, "failed"), (2, "completed")]


def test_exponential_delays_are_seen_on_the_virtual_clock(t: tuple[WorkflowTest, Seen]) -> None:
    test, seen = t
    test.start("backoff", {}, execution_id="s4")
    assert test.run("s4").status.value == "COMPLETED"
    gaps = [b - a for a, b in zip(seen.times, seen.times[1:], strict=False)]
    assert gaps == pytest.approx([5, 10, 20, 30, 30])


def test_jittered_delays_are_the_hashed_ones_and_under_the_ceiling(t: tuple[WorkflowTest, Seen]) -> None:
    test, seen = t
    test.start("jitter", {}, execution_id="s5")
    assert test.run("s5").status.value == "COMPLETED"
    gaps = [b - a for a, b in zip(seen.times, seen.times[1:], strict=False)]
    strategy = exponential(5, factor=2, max=300)
    expected = [delay_after(strategy, n, check_key("s5", 0, 1, n)) for n in range(1, 5)]
    # A delay under SQS's 15 minutes rides a message, whose delay is whole seconds.
    assert gaps == pytest.approx([math.ceil(d) for d in expected])
    assert all(d < 5 * 2 ** (n - 1) for n, d in enumerate(expected, start=1))


def test_max_checks_fails_the_attempt_through_the_policy_then_the_catch(t: tuple[WorkflowTest, Seen]) -> None:
    test, seen = t
    test.start("bounded", {}, execution_id="s6")
    ex = test.run("s6")
    assert ex.status.value == "COMPLETED" and ex.context == {"gave_up": "PollExhausted", "after": True}
    [record] = [r for r in test.history("s6") if r.index == 0 and not r.name.endswith("#catch")]
    assert [a.error["type"] for a in record.attempts] == ["PollExhausted", "PollExhausted"]
    assert "after 3 checks" in record.attempts[0].error["message"]
    assert [e["type"] for e in seen.caught] == ["PollExhausted"]


def test_max_checks_without_a_catch_fails_the_execution(t: tuple[WorkflowTest, Seen]) -> None:
    test, _ = t
    test.start("unbounded_fail", {}, execution_id="s7")
    began = test.clock.now()
    ex = test.run("s7")
    assert ex.status.value == "FAILED" and ex.error["type"] == "PollExhausted"
    assert test.clock.now() - began == pytest.approx(10), "two checks, ten seconds apart"
    assert test.deliveries == 2
