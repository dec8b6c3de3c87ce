"""Poll strategies, their delays and jitter, the not-yet decision, and the definition errors (pure)."""

from __future__ import annotations

import pytest

from engine.errors import WorkflowDefinitionError
from engine.poll_plan import PollVerdict, judge_not_yet
from engine.poll_strategy import Exponential, Fixed, ceiling, check_key, delay_after, jitter_fraction
from engine.state import Wait, WaitKind
from engine.workflow import NOT_YET, PollSpec, exponential, fixed, not_yet, wait_until


def test_fixed_gives_the_same_delay_after_every_check() -> None:
    s = fixed(30)
    assert [delay_after(s, n, f"k{n}") for n in range(1, 6)] == [30.0] * 5


def test_exponential_without_jitter_grows_by_its_factor_up_to_its_cap() -> None:
    s = exponential(5, factor=2, max=60, jitter="none")
    assert [delay_after(s, n, "k") for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert ceiling(exponential(1, 3, 1e9, "none"), 100_000) == 1e9  # no overflow on a long poll


def test_full_jitter_stays_under_the_ceiling_and_repeats_for_the_same_check() -> None:
    s = exponential(10, factor=2, max=300)
    seen = []
    for n in range(1, 40):
        key = check_key("ex-1", 2, 1, n)
        d = delay_after(s, n, key)
        assert 0.0 <= d < ceiling(s, n)
        assert d == delay_after(s, n, key)  # a re-run of the same check waits the same
        seen.append(d / ceiling(s, n))
    assert len(set(seen)) == len(seen), "the fractions differ from check to check"
    assert min(seen) < 0.25 and max(seen) > 0.75, "spread over [0, 1)"
    assert jitter_fraction(check_key("ex-1", 2, 1, 1)) != jitter_fraction(check_key("ex-2", 2, 1, 1))


@pytest.mark.parametrize(
    "build",
    [
        lambda: fixed(0),
        lambda: fixed(-1),
        lambda: fixed(float("inf")),
        lambda: fixed(True),
        lambda: exponential(0),
        lambda: exponential(5, factor=0.5),
        lambda: exponential(10, max=5),
        lambda: exponential(5, jitter="equal"),  # type: ignore[arg-type]
        lambda: exponential("5"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_strategy_is_refused_when_built(build) -> None:
    with pytest.raises(WorkflowDefinitionError):
        build()


def _check(ctx):
    return NOT_YET


def _stateful(ctx, state):
    return not_yet(state)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({}, "every= or strategy= is required"),
        ({"every": 5, "strategy": fixed(5)}, "not both"),
        ({"strategy": 5}, "strategy must be"),
        ({"every": 5, "max_checks": 0}, "max_checks"),
        ({"every": 5, "max_checks": 2.5}, "max_checks"),
        ({"every": 5, "max_checks": True}, "max_checks"),
        ({"every": 5, "initial_state": {1, 2}, "check": _stateful}, "initial_state must be JSON"),
        ({"every": 5, "initial_state": {"n": 0}}, "(ctx, state)"),
        ({"every": 5, "catch": "nope"}, "catch"),
    ],
)
def test_a_bad_poll_is_refused_at_definition(kwargs, says) -> None:
    with pytest.raises(WorkflowDefinitionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        wait_until(kwargs.pop("check", _check), **kwargs)


def test_a_stateful_check_must_take_the_state() -> None:
    with pytest.raises(WorkflowDefinitionError, match="pass initial_state"):
        wait_until(_stateful, every=5)
    spec = wait_until(_stateful, strategy=exponential(1, 2, 8), initial_state={"seen": []}, max_checks=4)
    assert spec.stateful and spec.initial_state() == {"seen": []} and spec.every == 1.0
    spec.initial_state()["seen"].append(1)
    assert spec.initial_state() == {"seen": []}, "the spec's state is a fresh copy each time"
    assert wait_until(_check, every=60).strategy == Fixed(60.0) and not wait_until(_check, every=60).stateful


def _wait(polls: int, deadline: float | None = None) -> Wait:
    return Wait(WaitKind.POLL, 0, 1, name="p", deadline=deadline, polls=polls)


def _spec(**kw) -> PollSpec:
    return wait_until(_check, **kw)


def test_the_decision_checks_again_until_max_checks_then_is_exhausted() -> None:
    st = _spec(strategy=exponential(2, 2, 100, jitter="none"), max_checks=3)
    first = judge_not_yet("e", _wait(0), st, now=0.0)
    assert (first.verdict, first.checks, first.delay) == (PollVerdict.AGAIN, 1, 2.0)
    second = judge_not_yet("e", _wait(1), st, now=0.0)
    assert (second.verdict, second.checks, second.delay) == (PollVerdict.AGAIN, 2, 4.0)
    third = judge_not_yet("e", _wait(2), st, now=0.0)
    assert (third.verdict, third.checks) == (PollVerdict.EXHAUSTED, 3)


def test_the_deadline_caps_the_delay_and_then_times_the_poll_out() -> None:
    st = _spec(strategy=Exponential(100, 2, 1000, "none"), timeout=150)
    capped = judge_not_yet("e", _wait(0, deadline=150.0), st, now=90.0)
    assert capped.verdict is PollVerdict.AGAIN and capped.delay == 60.0
    late = judge_not_yet("e", _wait(1, deadline=150.0), st, now=150.0)
    assert late.verdict is PollVerdict.TIMED_OUT
    # Both bounds spent at once: time is what ran out.
    both = _spec(every=10, timeout=150, max_checks=2)
    assert judge_not_yet("e", _wait(1, deadline=150.0), both, now=150.0).verdict is PollVerdict.TIMED_OUT


def test_the_poll_describes_its_strategy_and_bounds() -> None:
    from engine.workflow import build_spec

    spec = build_spec("w", [wait_until(_stateful, strategy=exponential(5, 3, 90), initial_state=0, max_checks=7)])
    [step] = spec.describe()["steps"]
    assert step["kind"] == "poll" and step["every"] == 5.0 and step["max_checks"] == 7 and step["stateful"]
    assert step["strategy"] == {"kind": "exponential", "initial": 5.0, "factor": 3.0, "max": 90.0, "jitter": "full"}


def test_a_retry_keeps_a_polls_checkpoint_and_nothing_else_of_its_wait() -> None:
    from engine.config import EngineConfig
    from engine.transitions import retry_state
    from tests.unit.test_transitions import execution

    cfg = EngineConfig()
    polled = Wait(WaitKind.POLL, 0, 1, name="p", deadline=50.0, polls=4, checkpoint={"state": None})
    new, _ = retry_state(execution(current_step=0, attempt=1, wait=polled), 5.0, 10.0, cfg)
    assert new.attempt == 2 and new.wait == Wait(WaitKind.POLL, 0, 1, name="p", checkpoint={"state": None})
    stateless = Wait(WaitKind.POLL, 0, 1, name="p", deadline=50.0, polls=4)
    assert retry_state(execution(current_step=0, wait=stateless), 5.0, 10.0, cfg)[0].wait is None
    signal = Wait(WaitKind.SIGNAL, 0, 1, name="s", checkpoint={"state": 1})
    assert retry_state(execution(current_step=0, wait=signal), 5.0, 10.0, cfg)[0].wait is None
