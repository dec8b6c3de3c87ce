"""Two of moto's SQS calls, made as cheap as the answers they give (the embedded emulator only).

moto 5 builds a queue's whole attribute dict (three approximate counts, each a pass over every
message reading the clock per message) for each message a ReceiveMessage hands out (its
retention check asks GetQueueAttributes for ``MessageRetentionPeriod``), and three times per
name a GetQueueAttributes asks for. Under a backlog of a thousand messages every receive then
costs tens of thousands of clock reads, and the emulator, not the engine, sets the pace: the
1,000-execution soak ran at under one step a second with moto's server at 80 % CPU, most of it
there. The replacements return what moto's own code returns, from one pass at most.
"""

from __future__ import annotations

from typing import Any

from moto.core.utils import unix_time
from moto.sqs import models
from moto.sqs.exceptions import InvalidAttributeName


def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
    """moto's check, reading the one attribute it needs instead of building all of them."""
    retention_period = self.get_queue(queue_name).message_retention_period
    return bool(int(retention_period) + message.sent_timestamp / 1000 > unix_time())


def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
    """moto's GetQueueAttributes with the attribute dict built once, not three times a name."""
    queue = self.get_queue(queue_name)
    if not attribute_names:
        return {}
    valid_names = ["All", *queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES]
    invalid_name = next((name for name in attribute_names if name not in valid_names), None)
    if invalid_name or invalid_name == "":
        raise InvalidAttributeName(invalid_name)
    everything: dict[str, Any] = queue.attributes
    if "All" in attribute_names:
        return everything
    return {name: everything[name] for name in attribute_names if everything.get(name) is not None}


def apply() -> None:
    """Install both replacements on moto's SQS backend (the emulator process calls it once)."""
    models.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
    models.SQSBackend.get_queue_attributes = get_queue_attributes  # type: ignore[method-assign]
