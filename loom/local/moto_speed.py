"""moto's SQS queue scans, made as cheap as the answers they give (the embedded emulator only).

moto 5 builds a queue's whole attribute dict (three approximate counts, each a pass over every
message reading the clock per message) for each message a ReceiveMessage hands out (its
retention check asks GetQueueAttributes for ``MessageRetentionPeriod``), and three times per
name a GetQueueAttributes asks for. Under a backlog of a thousand messages every receive then
costs tens of thousands of clock reads, and the emulator, not the engine, sets the pace: the
1,000-execution soak ran at under one step a second with moto's server at 80 % CPU, most of it
there. Its SendMessage builds the same attribute dict (to read ``ContentBasedDeduplication``),
and every scan of the messages (the visible list, the three counts) reads the clock twice per
message. The replacements return what moto's own code returns, from one pass at most, reading
the clock once per pass.

moto 5.2 also answers every DynamoDB call through its generic, shape-driven serializer, which
walks botocore's model member by member for each attribute of each item: a quarter of the
emulator's time in the 1,000-execution soak. An item's attribute values are already in their
wire form when they reach it, so a value made only of the types the serializer copies unchanged
(S, N, BOOL, NULL, SS, NS, L, M) is copied as is; anything else (binary, which it encodes) takes
moto's own path.

And its Query on a table (not an index) sorts every item of the table, then keeps the
partition asked for: a step's history read cost a pass over all 20,000 items the soak's
executions had written, and the soak's final check of 1,000 histories took minutes. The
replacement runs moto's own Query over a view of the table that holds only that partition.
"""

from __future__ import annotations

from typing import Any

from moto.core import serialize
from moto.core.utils import unix_time, unix_time_millis
from moto.dynamodb.models.table import Table
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


def visible_messages(self: Any) -> list[Any]:
    """moto's ``Queue.messages``: visible and not delayed, at one instant."""
    now = unix_time_millis()
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def count_not_visible(self: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if not now > m.visible_at)


def count_delayed(self: Any) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if now < m.delayed_until)


_SCALARS = {"S": str, "N": str, "BOOL": bool, "NULL": bool}


def is_wire_value(value: Any) -> bool:
    """An AttributeValue the JSON serializer would copy unchanged (no binary anywhere in it)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _SCALARS:
        return isinstance(inner, _SCALARS[kind])
    if kind in ("SS", "NS"):
        return isinstance(inner, list) and all(isinstance(x, str) for x in inner)
    if kind == "L":
        return isinstance(inner, list) and all(is_wire_value(x) for x in inner)
    if kind == "M":
        return isinstance(inner, dict) and all(isinstance(k, str) and is_wire_value(x) for k, x in inner.items())
    return False


_moto_structure = serialize.BaseJSONSerializer._serialize_type_structure


def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
    """moto's JSON structure serializer, with a DynamoDB attribute value in wire form copied."""
    if key and shape.name == "AttributeValue" and is_wire_value(value):
        self._default_serialize(serialized, value, shape, key)
        return
    _moto_structure(self, serialized, value, shape, key)


class _Partition:
    """A table as its Query reads it, holding one partition: the rest is the table's."""

    def __init__(self, table: Any, hash_key: Any) -> None:
        self._table = table
        found = table.items.get(hash_key)
        self.items = {} if found is None else {hash_key: found}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def all_items(self) -> list[Any]:
        return _moto_all_items(self)  # type: ignore[arg-type]  # moto reads only what the view has


_moto_query = Table.query
_moto_all_items = Table.all_items


def query_partition(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    """moto's Query; on the table itself (no index: the 8th argument) over one partition."""
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    if index_name or hash_key is None:
        return _moto_query(self, hash_key, *args, **kwargs)
    return _moto_query(_Partition(self, hash_key), hash_key, *args, **kwargs)  # type: ignore[arg-type]


def apply() -> None:
    """Install the replacements on moto's SQS backend (the emulator process calls it once)."""
    serialize.BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]
    Table.query = query_partition  # type: ignore[method-assign]
    models.Queue.messages = property(visible_messages)  # type: ignore[assignment,method-assign]
    models.Queue.approximate_number_of_messages_not_visible = property(count_not_visible)  # type: ignore[assignment,method-assign]
    models.Queue.approximate_number_of_messages_delayed = property(count_delayed)  # type: ignore[assignment,method-assign]
    models.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[method-assign]
    models.SQSBackend.get_queue_attributes = get_queue_attributes  # type: ignore[method-assign]
