"""The local event source with standard-queue delivery, over moto's SQS: out of order, some twice, none lost."""

from __future__ import annotations

from typing import Any

import pytest

from loom.local.lambdas.esm import EsmConfig, SqsEventSource
from loom.local.lambdas.pool import Invocation
from loom.local.lambdas.standard_queue import StandardQueueChaos

pytestmark = pytest.mark.integration

N = 60


class RecordingPool:
    """Stands in for the worker's processes: records each delivery, succeeds."""

    function = "WorkerFunction"
    size = 1

    def __init__(self) -> None:
        self.deliveries: list[tuple[str, str]] = []  # (MessageId, body) in delivery order

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.deliveries.extend((r["messageId"], r["body"]) for r in event["Records"])
        return Invocation(self.function, "r", 1, 0.0, 1.0, "ok", result={"batchItemFailures": []})


def drain(aws: dict[str, Any], chaos: StandardQueueChaos) -> RecordingPool:
    sqs = aws["sqs"]
    for i in range(N):
        sqs.send_message(QueueUrl=aws["StepQueue"], MessageBody=f"step-{i:03d}")
    pool = RecordingPool()
    esm = SqsEventSource(
        sqs,
        pool,  # type: ignore[arg-type]
        EsmConfig(queue_url=aws["StepQueue"], queue_arn=aws["StepQueue.Arn"], region="us-east-1"),
        chaos=chaos,
    )
    for _ in range(10 * N):  # the poller's loop, without its thread
        room = esm.config.batch_size - chaos.pending()
        batch = esm.chaos.arrange(esm.gather(wait=0, room=room) if room > 0 else [], esm.config.batch_size)
        if batch:
            esm.deliver(batch)
        elif not chaos.pending():
            break
    attrs = sqs.get_queue_attributes(QueueUrl=aws["StepQueue"], AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    return pool


def test_without_the_option_delivery_is_the_emulators_strict_order(aws: dict[str, Any]) -> None:
    pool = drain(aws, StandardQueueChaos())
    assert [body for _, body in pool.deliveries] == [f"step-{i:03d}" for i in range(N)]


def test_standard_queue_delivery_reorders_and_duplicates_and_loses_nothing(aws: dict[str, Any]) -> None:
    chaos = StandardQueueChaos(0.2, seed=11)
    pool = drain(aws, chaos)
    bodies = [body for _, body in pool.deliveries]
    assert set(bodies) == {f"step-{i:03d}" for i in range(N)}  # every message delivered
    first_seen = list(dict.fromkeys(bodies))
    assert first_seen != sorted(first_seen)  # not in send order
    assert len(bodies) - N == chaos.counts().duplicated > 0  # some delivered twice...
    ids_of = {}
    for message_id, body in pool.deliveries:
        assert ids_of.setdefault(body, message_id) == message_id  # ...as the same message (same MessageId)
