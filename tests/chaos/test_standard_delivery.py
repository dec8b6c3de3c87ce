"""The kit turns standard-queue delivery on for a block (duplicate_delivery uses it) and reports what it did."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.target import Target
from loom.local.lambdas.standard_queue import StandardQueueChaos

pytestmark = pytest.mark.chaos


class FakeStack:
    """The two LocalStack methods the kit calls, over a real StandardQueueChaos."""

    def __init__(self, rate: float) -> None:
        self.chaos = StandardQueueChaos(rate, seed=5)

    @property
    def info(self) -> dict[str, Any]:
        return {"sqs_standard_chaos": self.chaos.rate}

    def set_sqs_standard_chaos(self, rate: float) -> float:
        previous = self.chaos.rate
        self.chaos.set_rate(rate)
        return previous

    def sqs_chaos_counts(self) -> dict[str, int]:
        return dict(self.chaos.counts().__dict__)


def target(kind: str, stack: Any = None) -> Target:
    return Target(kind=kind, region="us-east-1", endpoint_url=None, table="t", queue_url="q", dlq_url="d", stack=stack)


def deliver(chaos: StandardQueueChaos, n: int) -> None:
    for b in range(n):
        chaos.arrange([{"MessageId": f"m{b}-{i}", "ReceiptHandle": f"r{b}-{i}"} for i in range(10)], 10)


def test_on_for_the_block_then_back_to_the_runs_own_rate() -> None:
    stack = FakeStack(0.0)
    deliver(stack.chaos, 3)  # before the block: strict order, not counted in the block's report
    with target("embedded", stack).standard_delivery(0.3) as report:
        assert stack.chaos.rate == 0.3
        deliver(stack.chaos, 20)
    assert stack.chaos.rate == 0.0
    assert report["mode"] == "local-esm"
    assert report["duplicated"] > 0 and report["reordered"] > 0 and report["held"] > 0


def test_a_higher_rate_for_the_whole_run_is_kept() -> None:
    stack = FakeStack(0.5)  # `loom chaos ... --sqs-standard-chaos 0.5`
    with target("embedded", stack).standard_delivery(0.3):
        assert stack.chaos.rate == 0.5
    assert stack.chaos.rate == 0.5


def test_aws_and_stacks_the_kit_does_not_drive_are_left_alone() -> None:
    with target("aws").standard_delivery(0.3) as report:
        pass
    assert report == {"mode": "sqs"}  # AWS's standard queues reorder and duplicate by themselves
    with target("embedded").standard_delivery(0.3) as report:
        pass
    assert report == {"mode": "as-is"}
