"""The workflow API and the registry."""

from __future__ import annotations

import pytest

from engine import Registry, RetryPolicy, StepContext, sleep, step, workflow
from engine.errors import UnknownWorkflow, WorkflowDefinitionError
from engine.workflow import SleepSpec, StepSpec, build_spec

pytestmark = pytest.mark.unit


def reserve(ctx):
    return {"r": 1}


def charge(ctx):
    return None


def test_decorator_registers_steps_sleeps_and_policies():
    reg = Registry()
    policy = RetryPolicy(max_attempts=5, base=2, max_delay=900)
    charge_policy = RetryPolicy(max_attempts=3)

    @workflow("order_fulfillment", registry=reg)
    class OrderFulfillment:
        steps = [reserve, step(charge, retry=charge_policy, semantics="at_most_once"), sleep(hours=1)]
        retry = policy

    spec = reg.get("order_fulfillment")
    assert OrderFulfillment.spec is spec
    first, second, third = spec.steps
    assert isinstance(first, StepSpec) and first.name == "reserve" and first.semantics == "at_least_once"
    assert second.semantics == "at_most_once" and spec.policy_for(second) is charge_policy
    assert spec.policy_for(first) is policy
    assert isinstance(third, SleepSpec) and third.seconds == 3600 and third.name == "sleep_1h"
    assert "order_fulfillment" in reg and [s.name for s in reg] == ["order_fulfillment"]
    assert spec.describe()["steps"][2] == {"index": 2, "name": "sleep_1h", "kind": "sleep", "seconds": 3600.0}


def test_default_policy_when_none_given():
    assert build_spec("w", [reserve]).retry == RetryPolicy()


def test_registering_the_same_name_twice_is_an_error_but_identical_is_idempotent():
    reg = Registry()
    reg.add(build_spec("w", [reserve]))
    reg.add(build_spec("w", [reserve]))  # a module imported twice
    with pytest.raises(WorkflowDefinitionError, match="registered twice"):
        reg.add(build_spec("w", [charge]))


def test_unknown_workflow_is_a_clear_error_listing_what_exists():
    reg = Registry()
    reg.add(build_spec("known", [reserve]))
    with pytest.raises(UnknownWorkflow) as err:
        reg.get("nope")
    assert "nope" in str(err.value) and "known" in str(err.value)
    assert err.value.code == "unknown_workflow" and err.value.details == {"workflow": "nope"}


@pytest.mark.parametrize(
    ("kwargs", "seconds", "name"),
    [
        ({"seconds": 30}, 30, "sleep_30s"),
        ({"minutes": 2}, 120, "sleep_2m"),
        ({"hours": 1, "minutes": 30}, 5400, "sleep_90m"),
        ({"days": 2}, 172800, "sleep_2d"),
        ({"seconds": 1.5}, 1.5, "sleep_1.5s"),
    ],
)
def test_sleep_durations(kwargs, seconds, name):
    spec = sleep(**kwargs)
    assert spec.seconds == seconds and spec.name == name and spec.is_sleep


def test_sleep_needs_a_positive_duration():
    with pytest.raises(WorkflowDefinitionError):
        sleep()
    with pytest.raises(WorkflowDefinitionError):
        sleep(seconds=-1)


def test_step_semantics_are_validated():
    with pytest.raises(WorkflowDefinitionError, match="semantics"):
        step(reserve, semantics="exactly_once")
    with pytest.raises(WorkflowDefinitionError, match="callable"):
        step("not a function")
    assert step(reserve, name="custom").name == "custom"


@pytest.mark.parametrize(("name", "steps"), [("bad name", [reserve]), ("empty", []), ("w", [42]), ("w", None)])
def test_invalid_workflow_definitions(name, steps):
    with pytest.raises(WorkflowDefinitionError):
        build_spec(name, steps)


def test_a_workflow_has_at_most_999_steps():
    with pytest.raises(WorkflowDefinitionError, match="999"):
        build_spec("long", [reserve] * 1000)


def test_idempotency_key_is_stable_across_attempts():
    def ctx(attempt):
        return StepContext("exec-1", "w", 3, "charge", attempt, {}, log=None)

    assert ctx(1).idempotency_key == ctx(5).idempotency_key == "exec-1:3"


def test_a_workflow_name_with_a_trailing_newline_is_refused():
    # "$" alone would accept "name\n"; the whole name must match.
    with pytest.raises(WorkflowDefinitionError):
        build_spec("order\n", [reserve])


def test_a_step_timeout_is_validated_and_described():
    spec = build_spec("timed", [step(reserve, timeout=20), step(charge), sleep(seconds=5)], step_timeout=45)
    assert spec.steps[0].timeout == 20.0 and spec.steps[1].timeout is None
    described = spec.describe()["steps"]
    assert [s.get("timeout") for s in described[:2]] == [20.0, 45.0]  # the workflow default fills in
    assert "timeout" not in described[2]
    assert build_spec("untimed", [reserve]).describe()["steps"][0]["timeout"] is None
    for bad in (0, -1, float("nan"), float("inf"), 901, True, "20"):
        with pytest.raises(WorkflowDefinitionError, match="timeout"):
            step(reserve, timeout=bad)
        with pytest.raises(WorkflowDefinitionError, match="step_timeout"):
            build_spec("w", [reserve], step_timeout=bad)


def test_the_workflow_decorator_reads_a_default_step_timeout():
    reg = Registry()

    @workflow("timed_default", registry=reg)
    class Timed:
        steps = [reserve, step(charge, timeout=5)]
        step_timeout = 30

    spec = reg.get("timed_default")
    assert spec.step_timeout == 30.0
    assert [spec.timeout_for(s) for s in spec.steps] == [30.0, 5.0]
