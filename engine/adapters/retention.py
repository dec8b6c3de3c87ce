"""The retention part of the DynamoDB store: stamping an ended execution's items for TTL.

DynamoDB's TTL deletes an item some time after its ``expires_at`` (epoch seconds) has passed,
one item at a time, and knows nothing of executions: every item an execution left (its history,
fan-out join and item records, signals) carries the expiry itself. The execution item gets it in
its ending write; the rest are stamped here, by the sweeper, once no late write can land
(engine/retention.py). A stamp is an unconditional ``SET`` on an item that still exists, so a
sweep that dies half-way is finished by the next one: it skips what is already stamped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Protocol

from engine.adapters.paging import query_items
from engine.adapters.write_token import ALL_OLD, TOKEN, conditional, new_token
from engine.errors import ConflictError
from engine.ports import Stamped

PK, SK = "PK", "SK"
EXPIRES = "expires_at"
META_SK = "#META"


def ttl_value(expires_at: float) -> int:
    """The TTL attribute as DynamoDB wants it: whole epoch seconds, never before the expiry."""
    return math.ceil(expires_at)


class _Table(Protocol):
    _db: Any
    _table: str

    def _capacity(self) -> dict[str, str]: ...


class RetentionStore:
    def retain(self: _Table, execution_id: str, expires_at: float | None, limit: int) -> Stamped:
        """Give every item of the execution but its own ``expires_at`` (None: take it away, as a
        redrive does), at most ``limit`` writes; ``finished`` False leaves the rest for a next call."""
        want = None if expires_at is None else ttl_value(expires_at)
        written = 0
        for key in _stale_keys(self, execution_id, want):
            if written >= limit:
                return Stamped(written, finished=False)
            _stamp(self, key, want)
            written += 1
        return Stamped(written, finished=True)


def _stale_keys(table: _Table, execution_id: str, want: int | None) -> Iterator[dict[str, Any]]:
    """Keys of the execution's items whose expiry is not ``want``: its own partition, then the
    partitions of its fan-out items (one per shard of each join record found in the first)."""
    fans: list[str] = []
    for item in _partition(table, f"EXEC#{execution_id}", "#s"):
        sk = item[SK]["S"]
        if sk.startswith("FAN#") and "shards" in item:
            fans += [f"FAN#{execution_id}#{sk[4:]}#{s}" for s in range(int(item["shards"]["N"]))]
        if sk != META_SK and _expiry(item) != want:
            yield {PK: item[PK], SK: item[SK]}
    for pk in fans:
        for item in _partition(table, pk, None):
            if _expiry(item) != want:
                yield {PK: item[PK], SK: item[SK]}


def _expiry(item: dict[str, Any]) -> int | None:
    value = item.get(EXPIRES)
    return None if value is None else int(float(value["N"]))


def _partition(table: _Table, pk: str, shards_name: str | None) -> Iterator[dict[str, Any]]:
    """A partition's keys and expiries (and a join record's shard count), a page at a time."""
    names = {"#e": EXPIRES, "#pk": PK, "#sk": SK}
    projection = "#pk, #sk, #e"
    if shards_name is not None:
        names[shards_name] = "shards"
        projection += f", {shards_name}"
    kwargs: dict[str, Any] = {
        "TableName": table._table,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        "ExpressionAttributeNames": names,
        "ProjectionExpression": projection,
        "ConsistentRead": True,
        **table._capacity(),
    }
    return query_items(table._db, f"table {table._table}", kwargs)


def _stamp(table: _Table, key: dict[str, Any], want: int | None) -> None:
    """One stamp, through the one conditional write path: the condition keeps an item that TTL
    deleted meanwhile from coming back as a husk; the token (overwriting the item's, as no write
    of its own can be in flight past the grace) tells a lost answer from that deletion."""
    token = new_token()
    values: dict[str, Any] = {":wt": {"S": token}}
    expression = f"REMOVE #e SET {TOKEN} = :wt"
    if want is not None:
        expression = f"SET #e = :e, {TOKEN} = :wt"
        values[":e"] = {"N": str(want)}
    try:
        with conditional(f"table {table._table}", token):
            table._db.update_item(
                TableName=table._table,
                Key=key,
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeNames={"#e": EXPIRES},
                ExpressionAttributeValues=values,
                **ALL_OLD,
                **table._capacity(),
            )
    except ConflictError:
        pass  # deleted since the read: nothing left to stamp
