"""Each table's items by their index hash key attributes, kept as moto writes them (moto keeps none).

moto answers a Query on a secondary index by looking at every item of the table. The sweeper
asks its due index a few times a second on the chaos stack, and a 1,000-execution soak's table
holds tens of thousands of items, so those passes grew with the table while the answers stayed
a handful (DESIGN.md, "Emulator speed"). Here every item's value of each index hash attribute
is kept in a map from value to the items' keys, changed where moto changes an item:

- ``Table.put_item`` and ``Table.delete_item`` (PutItem, DeleteItem, BatchWriteItem, PartiQL,
  and the item UpdateItem creates);
- ``DynamoDBBackend.update_item``, which changes the item in place;
- a cancelled transaction's rollback, which puts items back without either
  (``moto_speed._put_back`` calls ``reindex``).

A map is rebuilt from the whole table whenever it cannot be trusted: the table's items were
replaced (a restore, moto's own rollback copy), its indexes changed, or a key could not be
read. Only string and binary values are kept: a number's equality is moto's to decide.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

_STATE = "_loom_hash_index"
_KEPT_TYPES = ("S", "B")

Key = tuple[Any, Any]  # (hash DynamoType, range DynamoType or None)


class HashIndex:
    """For one table: value -> item keys, per index hash attribute, and each key's values."""

    def __init__(self, table: Any, attrs: frozenset[str]) -> None:
        self.items = table.items  # held, not its id: a replaced dict is told apart by identity
        self.attrs = attrs
        self.by_value: dict[str, dict[Any, set[Key]]] = {a: {} for a in attrs}
        self.value_of: dict[str, dict[Key, Any]] = {a: {} for a in attrs}
        for item in table.all_items():
            self.place((item.hash_key, item.range_key), item)

    def place(self, key: Key, item: Any) -> None:
        """Where ``key`` belongs now: ``item`` is what the table holds under it (None: nothing)."""
        attrs = getattr(item, "attrs", None) or {}
        for attr in self.attrs:
            old = self.value_of[attr].pop(key, None)
            if old is not None:
                held = self.by_value[attr][old]
                held.discard(key)
                if not held:
                    del self.by_value[attr][old]
            new = attrs.get(attr)
            if isinstance(new, DynamoType) and new.type in _KEPT_TYPES:
                self.value_of[attr][key] = new
                self.by_value[attr].setdefault(new, set()).add(key)


def hash_attrs(table: Any) -> frozenset[str]:
    """The hash key attributes of the table's secondary indexes."""
    return frozenset(
        key["AttributeName"] for index in table.all_indexes() for key in index.schema if key["KeyType"] == "HASH"
    )


def _current(table: Any, attrs: frozenset[str]) -> HashIndex | None:
    """The table's map if it still describes the table's items and indexes, else None."""
    state = table.__dict__.get(_STATE)
    if state is None or state.items is not table.items or state.attrs != attrs:
        return None
    return state  # type: ignore[no-any-return]


def candidates(table: Any, conditions: list[tuple[str, Any]]) -> list[Key] | None:
    """The keys of the items whose index hash attribute equals the asked value: a superset of what
    moto keeps (its own test runs on them); None when the map cannot answer (moto looks at all),
    which includes a process whose writes do not keep it (``apply`` not called)."""
    if Table.put_item is not put_item:
        return None
    asked = [(attr, value) for attr, value in conditions if isinstance(value, DynamoType)]
    attrs = hash_attrs(table)
    usable = [(a, v) for a, v in asked if a in attrs and v.type in _KEPT_TYPES]
    if not usable:
        return None
    state = _current(table, attrs)
    if state is None:
        state = HashIndex(table, attrs)
        table.__dict__[_STATE] = state
    attr, value = usable[0]
    return list(state.by_value[attr].get(value, ()))


def item_at(table: Any, key: Key) -> Any:
    hash_value, range_value = key
    held = table.items.get(hash_value)
    if held is None:
        return None
    if table.range_key_attr:
        return held.get(range_value)
    return held


def reindex(table: Any, keys: Iterable[Key | None]) -> None:
    """After a write: each key's place again; a key that could not be read drops the map. A map
    that no longer describes the table (items replaced, indexes changed) is rebuilt by the next
    Query (``candidates``), so a write does not check for that."""
    state = table.__dict__.get(_STATE)
    if state is None:
        return
    for key in keys:
        if key is None:
            table.__dict__.pop(_STATE, None)
            return
        state.place(key, item_at(table, key))


def key_of(table: Any, attrs: Any) -> Key | None:
    """The (hash, range) key in an item's or a key's wire attributes, or None."""
    try:
        hash_value = DynamoType(attrs[table.hash_key_attr])
        range_value = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    except (KeyError, TypeError, AttributeError):
        return None
    return hash_value, range_value


_moto_put_item = Table.put_item
_moto_delete_item = Table.delete_item
_moto_update_item = DynamoDBBackend.update_item


def put_item(self: Any, item_attrs: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _moto_put_item(self, item_attrs, *args, **kwargs)
    finally:
        reindex(self, [key_of(self, item_attrs)])


def delete_item(self: Any, hash_key: Any, range_key: Any) -> Any:
    try:
        return _moto_delete_item(self, hash_key, range_key)
    finally:
        reindex(self, [(hash_key, range_key if self.range_key_attr else None)])


def update_item(self: Any, table_name: str, key: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return _moto_update_item(self, table_name, key, *args, **kwargs)
    finally:
        table = self.tables.get(table_name)
        if table is not None:
            reindex(table, [key_of(table, key)])


def apply() -> None:
    """Keep the maps as moto writes (the emulator process calls it once, after moto_speed.apply)."""
    Table.put_item = put_item  # type: ignore[method-assign]
    Table.delete_item = delete_item  # type: ignore[method-assign]
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]
