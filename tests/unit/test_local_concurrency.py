"""The local stack's process counts: the template's caps, or an approximation that says so."""

from __future__ import annotations

from typing import Any

import pytest

from loom.local.lambdas.concurrency import LOCAL_PROCESS_LIMIT, CapSource, ConcurrencyError, plan
from loom.template import FunctionSpec

pytestmark = pytest.mark.unit


def spec(reserved: int | None = None, max_concurrency: int | None = None) -> FunctionSpec:
    props: dict[str, Any] = {"Queue": "arn:aws:sqs:us-east-1:123456789012:steps", "BatchSize": 10}
    if max_concurrency is not None:
        props["ScalingConfig"] = {"MaximumConcurrency": max_concurrency}
    return FunctionSpec(
        logical_id="WorkerFunction",
        handler="functions.worker.handler",
        timeout=60,
        memory=256,
        environment={},
        events={"Steps": {"Type": "SQS", "Properties": props}},
        reserved_concurrency=reserved,
    )


@pytest.mark.parametrize(("reserved", "maximum", "size"), [(5, None, 5), (None, 3, 3), (5, 3, 3), (2, 9, 2)])
def test_the_smaller_template_cap_is_the_process_count(reserved: int | None, maximum: int | None, size: int) -> None:
    p = plan(spec(reserved, maximum), "worker")
    assert (p.size, p.source, p.template_cap) == (size, CapSource.TEMPLATE, size)
    assert not p.approximate
    assert "as in AWS" in p.note


def test_without_caps_the_default_is_stated_as_an_approximation() -> None:
    p = plan(spec(), "worker")
    assert (p.size, p.source, p.template_cap) == (2, CapSource.DEFAULT, None)
    assert p.approximate
    assert "local concurrency is an approximation" in p.note


def test_an_override_wins_and_says_what_it_overrides() -> None:
    p = plan(spec(reserved=5, max_concurrency=3), "worker", override=1)
    assert (p.size, p.source, p.template_cap) == (1, CapSource.OVERRIDE, 3)
    assert "overriding the template's 3" in p.note and "MaximumConcurrency=3" in p.note
    bare = plan(spec(), "worker", override=4)
    assert bare.size == 4 and "approximation" in bare.note


def test_a_huge_cap_is_cut_to_what_a_laptop_runs_and_says_so() -> None:
    p = plan(spec(reserved=900), "worker")
    assert (p.size, p.source) == (LOCAL_PROCESS_LIMIT, CapSource.LIMITED)
    assert p.approximate and "900" in p.note


def test_zero_reserved_concurrency_and_bad_overrides_are_refused() -> None:
    with pytest.raises(ConcurrencyError, match="never runs"):
        plan(spec(reserved=0), "worker")
    with pytest.raises(ConcurrencyError, match="at least 1"):
        plan(spec(), "worker", override=0)
