"""moto's table Scan and item order, at the cost of the answer they give (the embedded emulator only).

The local stack's TTL (loom/ttl.py) looks for expired items with a Scan of the whole table once a
minute, and the emulator serves DynamoDB one request at a time, so every page of that Scan holds
up every function's DynamoDB call. moto 5 made each page cost more than the table's size:

- it sorts every item of the table for every page, comparing moto's ``DynamoType`` objects (a
  Python call per comparison, a ``Decimal`` built per side for a number);
- it finds where the previous page ended by testing every item before it, in order, building two
  ``DynamoType`` objects per key attribute per item: a whole Scan is quadratic in its pages;
- it deep-copies every item of the page before applying the FilterExpression, and sizes each
  item twice.

The replacements keep moto's order, its pages (the 1 MB and ``Limit`` bounds count the items read,
before the filter, as DynamoDB's do), its filter and projection, and its errors: the order sorts on
each key's own value once per item (the same order: a table's key attributes have one type), the
previous page's end is found by bisection with moto's own test (monotone over that order), the
filter runs on the stored item and only what passes is copied, and each item is sized once. An
index Scan, or one with a ``Segment``, takes moto's own path.
"""

from __future__ import annotations

import copy
from typing import Any

from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, Table

_moto_all_items = Table.all_items
_moto_scan = Table.scan


def _order(item: Any) -> Any:
    # moto's key, on the values DynamoType compares (``cast_value``), computed once per item.
    if item.range_key:
        return (item.hash_key.cast_value, item.range_key.cast_value)
    return item.hash_key.cast_value


def all_items(self: Any) -> list[Any]:
    """moto's ``Table.all_items``: every item, in key order."""
    items: list[Any] = []
    for held in self.items.values():
        if self.range_key_attr:
            items.extend(held.values())
        else:
            items.append(held)
    return sorted(items, key=_order)


def _resume_at(table: Any, items: list[Any], start_key: dict[str, Any]) -> int:
    """The first item moto's page walk would not skip: its test says "at or before the start key"
    for a prefix of the ordered items, so bisect with it."""
    hash_attrs, range_attrs = [table.hash_key_attr], [table.range_key_attr]
    low, high = 0, len(items)
    while low < high:
        middle = (low + high) // 2
        if table._item_comes_before_dct(items[middle], start_key, hash_attrs, range_attrs, True):
            low = middle + 1
        else:
            high = middle
    return low


def _passes(item: Any, filters: dict[str, Any]) -> bool:
    """moto's legacy ScanFilter test, as its Scan loop runs it."""
    for name, (operator, values) in filters.items():
        attribute = item.attrs.get(name)
        if attribute:
            if not attribute.compare(operator, values):
                return False
        elif operator != "NULL":
            return False
    return True


def _page(
    table: Any, filters: dict[str, Any], limit: int, start_key: dict[str, Any] | None, filter_expression: Any
) -> tuple[list[Any], int, dict[str, Any] | None] | None:
    """One page of a whole-table Scan as moto's loop reads it (before the projection); None where
    moto would read ``results[-1]`` of an empty page, so that moto answers that itself."""
    items = all_items(table)
    start = 0 if start_key is None else _resume_at(table, items, start_key)
    kept: list[Any] = []
    read, size, scanned = 0, 0, 0
    last: Any = None  # the last item read that passed the ScanFilter: the page's end
    for item in items[start:]:
        item_size = item.size()
        if read == limit or size + item_size > RESULT_SIZE_LIMIT:
            if last is None:
                return None
            return kept, scanned, table._get_last_evaluated_key(last, None)
        if _passes(item, filters):
            read += 1
            size += item_size
            last = item
            if filter_expression is None or filter_expression.expr(item):
                kept.append(copy.deepcopy(item))
        scanned += 1
    return kept, scanned, None


def scan(
    self: Any,
    filters: dict[str, Any],
    limit: int,
    exclusive_start_key: dict[str, Any],
    filter_expression: Any = None,
    index_name: str | None = None,
    consistent_read: bool = False,
    projection_expression: list[list[str]] | None = None,
    segments: tuple[None, None] | tuple[int, int] = (None, None),
) -> tuple[list[Any], int, dict[str, Any] | None]:
    """moto's ``Table.scan`` for a whole table; an index, a segment or an empty page's edge goes to moto's own."""
    page = None
    if not index_name and segments == (None, None):
        page = _page(self, filters, limit, exclusive_start_key, filter_expression)
    if page is None:
        return _moto_scan(
            self, filters, limit, exclusive_start_key, filter_expression, index_name, consistent_read,
            projection_expression, segments,
        )  # fmt: skip
    kept, scanned, last_key = page
    if projection_expression:
        kept = [found.project(projection_expression) for found in kept]
    return kept, scanned, last_key


def install() -> None:
    """Put the replacements in moto's Table (the emulator process calls it once)."""
    Table.all_items = all_items  # type: ignore[method-assign]
    Table.scan = scan  # type: ignore[method-assign]
