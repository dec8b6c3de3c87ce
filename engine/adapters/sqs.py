"""The step queue and its dead-letter queue behind ``engine.ports.Queue``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.adapters.aws_errors import mapped
from engine.errors import TransientError
from engine.limits import SQS_MESSAGE_LIMIT, check_message
from engine.messages import DELAY_ATTRIBUTE, StepMessage
from engine.parked import encode_record


class SqsQueue:
    def __init__(self, client: Any, queue_url: str, dlq_url: str, *, visibility_client: Any = None) -> None:
        self._sqs = client
        # The heartbeat's calls hold its lock and delay the handler's return: give them a
        # client with short timeouts and few retries (a missed extension is retried next beat).
        self._visibility = visibility_client or client
        self.queue_url = queue_url
        self.dlq_url = dlq_url

    def send(self, message: StepMessage, delay_seconds: int = 0) -> None:
        delay = max(0, min(900, delay_seconds))
        extra: dict[str, Any] = {}
        if delay:
            extra["MessageAttributes"] = {DELAY_ATTRIBUTE: {"DataType": "Number", "StringValue": str(delay)}}
        with mapped(f"queue {self.queue_url}"):
            self._sqs.send_message(QueueUrl=self.queue_url, MessageBody=message.encode(), DelaySeconds=delay, **extra)

    def send_many(self, messages: Sequence[StepMessage]) -> None:
        for start in range(0, len(messages), 10):  # SendMessageBatch takes ten at most
            chunk = messages[start : start + 10]
            entries = [{"Id": str(i), "MessageBody": m.encode()} for i, m in enumerate(chunk)]
            with mapped(f"queue {self.queue_url}"):
                answer = self._sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            failed = answer.get("Failed") or []
            if failed:
                raise TransientError(f"{len(failed)} of {len(entries)} messages were not sent: {failed[0]}")

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        text = encode_record(body)
        if len(text.encode()) > SQS_MESSAGE_LIMIT:
            # Keep what identifies the execution; the full error is on the execution item.
            body = {k: v for k, v in body.items() if k != "body"} | {"truncated": True}
            text = encode_record(body)[: SQS_MESSAGE_LIMIT - 1024]
        check_message(text)
        with mapped(f"queue {self.dlq_url}"):
            self._sqs.send_message(QueueUrl=self.dlq_url, MessageBody=text)

    def backlog(self) -> int:
        with mapped(f"queue {self.queue_url}"):
            answer = self._sqs.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
            )
        return int(answer.get("Attributes", {}).get("ApproximateNumberOfMessages", "0"))

    def parked(self) -> int:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        with mapped(f"queue {self.dlq_url}"):
            answer = self._sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=names)
        attributes = answer.get("Attributes", {})
        return sum(int(attributes.get(name, "0")) for name in names)

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None:
        with mapped(f"queue {self.queue_url}"):
            self._visibility.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=timeout_seconds
            )

    def change_visibility_many(self, receipt_handles: Sequence[str], timeout_seconds: int) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(receipt_handles), 10):  # ChangeMessageVisibilityBatch takes ten at most
            chunk = receipt_handles[start : start + 10]
            entries = [
                {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": timeout_seconds} for i, r in enumerate(chunk)
            ]
            with mapped(f"queue {self.queue_url}"):
                answer = self._visibility.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
            failed += [chunk[int(f["Id"])] for f in answer.get("Failed") or []]
        return failed
