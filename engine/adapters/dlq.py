"""The dead-letter queue, read: peek at parked messages and delete the ones dealt with.

Sending to the DLQ stays in ``SqsQueue.send_dead_letter``; this adapter is what the
control plane's ``/dlq`` endpoints use to look at and work off what was parked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from engine.adapters.aws_errors import mapped
from engine.dead_letters import DeadLetter

# Long enough for a redrive pass to deal with a batch before it reappears; a peek
# sets its messages visible again at once.
WORK_VISIBILITY = 30
PEEK_VISIBILITY = 5


def _parse(body: str) -> Any:
    try:
        return json.loads(body)
    except (TypeError, ValueError):
        return body


class SqsDeadLetters:
    """Implements ``engine.dead_letters.DeadLetterBox`` on an SQS queue."""

    def __init__(self, client: Any, dlq_url: str, *, wait_seconds: int = 1) -> None:
        self._sqs = client
        self.dlq_url = dlq_url
        # Short polls sample a few SQS hosts and may come back empty while messages
        # exist; a one-second long poll asks them all.
        self._wait = wait_seconds

    def approximate_count(self) -> int:
        with mapped(f"queue {self.dlq_url}"):
            attrs = self._sqs.get_queue_attributes(
                QueueUrl=self.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
        return int(attrs.get("ApproximateNumberOfMessages", 0))

    def receive(self, limit: int, visibility: int = WORK_VISIBILITY) -> Iterator[DeadLetter]:
        """Up to ``limit`` distinct messages, each hidden for ``visibility`` seconds."""
        seen: set[str] = set()
        while len(seen) < limit:
            with mapped(f"queue {self.dlq_url}"):
                answer = self._sqs.receive_message(
                    QueueUrl=self.dlq_url,
                    MaxNumberOfMessages=min(10, limit - len(seen)),
                    VisibilityTimeout=visibility,
                    WaitTimeSeconds=self._wait,
                    MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                )
            fresh = [m for m in answer.get("Messages", []) if m["MessageId"] not in seen]
            if not fresh:
                return
            for m in fresh:
                seen.add(m["MessageId"])
                attrs = m.get("Attributes", {})
                yield DeadLetter(
                    message_id=m["MessageId"],
                    receipt=m["ReceiptHandle"],
                    body=_parse(m.get("Body", "")),
                    sent_at=int(attrs.get("SentTimestamp", 0)) / 1000.0,
                    receive_count=int(attrs.get("ApproximateReceiveCount", 1)),
                )

    def peek(self, limit: int) -> list[DeadLetter]:
        """Look without taking: the messages are made visible again before returning."""
        letters = list(self.receive(limit, PEEK_VISIBILITY))
        self.release([d.receipt for d in letters])
        return letters

    def release(self, receipts: list[str]) -> None:
        for start in range(0, len(receipts), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                for i, r in enumerate(receipts[start : start + 10])
            ]
            with mapped(f"queue {self.dlq_url}"):
                self._sqs.change_message_visibility_batch(QueueUrl=self.dlq_url, Entries=entries)

    def delete(self, receipt: str) -> None:
        with mapped(f"queue {self.dlq_url}"):
            self._sqs.delete_message(QueueUrl=self.dlq_url, ReceiptHandle=receipt)
