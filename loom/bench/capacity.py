"""DynamoDB's sizing rules, for capacity figures moto does not compute.

moto answers ``ReturnConsumedCapacity`` with a constant (1.0 for a write, 0.5
or 1.0 for a read) whatever the item's size, so the benchmark computes units
from item sizes the way DynamoDB bills them:

- an item's size is the UTF-8 length of every attribute name plus its value:
  strings their UTF-8 bytes, numbers 1 byte per two significant digits plus 1,
  booleans and nulls 1 byte, lists and maps 3 bytes plus 1 byte per element plus
  the elements (a map's keys count as names);
- a write costs 1 WCU per started KB of the larger of the item before and
  after it, and a failed conditional write still costs the existing item's size
  (at least 1);
- a global secondary index is written only when the write changes its key
  (or a projected attribute; Loom's indexes are KEYS_ONLY): 1 write when an item
  enters or leaves the index, 2 when its key changes (delete + put);
- a strongly consistent read costs 1 RCU per started 4 KB (a Query sums the
  items it returns first), an eventually consistent one half that; an empty
  answer still costs the minimum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

WRITE_UNIT = 1024
READ_UNIT = 4096


def number_size(text: str) -> int:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return len(text)
    digits = value.as_tuple().digits
    significant = "".join(str(d) for d in digits).strip("0") or "0"
    return math.ceil(len(significant) / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Size of one attribute value in DynamoDB's JSON form ({"S": ...}, {"N": ...}, ...)."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        return number_size(inner)
    if kind == "B":
        return len(inner) if isinstance(inner, (bytes, bytearray)) else len(str(inner).encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in inner)
    if kind == "NS":
        return sum(number_size(n) for n in inner)
    if kind == "BS":
        return sum(len(b) for b in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def write_units(before: int, after: int) -> int:
    return max(1, math.ceil(max(before, after) / WRITE_UNIT))


def failed_write_units(current: int) -> int:
    return max(1, math.ceil(current / WRITE_UNIT))


def read_units(total_bytes: int, *, consistent: bool) -> float:
    units = max(1, math.ceil(total_bytes / READ_UNIT))
    return float(units) if consistent else units / 2


def index_writes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, keys: tuple[str, ...]) -> int:
    """Writes to a KEYS_ONLY index whose key attributes are ``keys``, for one item write."""

    def key_of(item: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
        if not item or any(k not in item for k in keys):
            return None
        return tuple(repr(item[k]) for k in keys)

    old, new = key_of(before), key_of(after)
    if old == new:
        return 0
    if old is None or new is None:
        return 1
    return 2
