"""The schedules part of the DynamoDB store: one cursor item per scheduled workflow.

    cursor  PK=LOOM#SCHEDULES  SK=SCHED#<workflow>  workflow, expression, next_fire, pending,
                                                    last_fired, version, updated_at, wt

One partition for every cursor, so a sweep reads them all with one Query (a strongly
consistent read of a few hundred bytes each: 1 RCU per 4 KB). Writes are conditional on the
cursor's version and carry a write token, like every conditional write (DESIGN.md, "Write
tokens", engine/adapters/write_token.py): a refusal by an item holding our token was our own
earlier try.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from engine.adapters.aws_errors import mapped
from engine.adapters.write_token import ALL_OLD, TOKEN, conditional, new_token
from engine.state import ScheduleCursor

PK, SK = "PK", "SK"
SCHEDULES_PARTITION = "LOOM#SCHEDULES"


def schedule_key(workflow: str) -> dict[str, Any]:
    return {PK: {"S": SCHEDULES_PARTITION}, SK: {"S": f"SCHED#{workflow}"}}


class _Table(Protocol):
    _db: Any
    _table: str

    def _capacity(self) -> dict[str, str]: ...


def _n(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def _opt(item: dict[str, Any], name: str) -> float | None:
    return float(item[name]["N"]) if name in item else None


def cursor_from(item: dict[str, Any]) -> ScheduleCursor:
    return ScheduleCursor(
        workflow=item["workflow"]["S"],
        expression=item["expression"]["S"],
        next_fire=_opt(item, "next_fire"),
        version=int(item["version"]["N"]),
        pending=_opt(item, "pending"),
        last_fired=_opt(item, "last_fired"),
        updated_at=float(item["updated_at"]["N"]),
    )


def cursor_item(cursor: ScheduleCursor, token: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        **schedule_key(cursor.workflow),
        "workflow": {"S": cursor.workflow},
        "expression": {"S": cursor.expression},
        "version": _n(cursor.version),
        "updated_at": _n(cursor.updated_at),
        TOKEN: {"S": token},
    }
    for name in ("next_fire", "pending", "last_fired"):
        value = getattr(cursor, name)
        if value is not None:
            item[name] = _n(float(value))
    return item


class ScheduleStore:
    """The schedule cursors (engine.ports.Store's schedules part), mixed into DynamoStore."""

    def schedules(self: _Table) -> list[ScheduleCursor]:
        found: list[ScheduleCursor] = []
        for page in _pages(self):
            found.extend(cursor_from(item) for item in page)
        return sorted(found, key=lambda c: c.workflow)

    def put_schedule(self: _Table, cursor: ScheduleCursor, *, expected_version: int | None) -> None:
        token = new_token()
        if expected_version is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(PK)"}
        else:
            condition = {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": _n(expected_version)},
            }
        with conditional(f"table {self._table}", token, cursor_from):
            self._db.put_item(
                TableName=self._table, Item=cursor_item(cursor, token), **condition, **ALL_OLD, **self._capacity()
            )

    def delete_schedule(self: _Table, workflow: str, *, expected_version: int) -> None:
        # A delete leaves no item to carry its token: a resent delete finds nothing, which its
        # condition allows (the delete having happened), so only another writer's cursor refuses it.
        token = new_token()
        with conditional(f"table {self._table}", token, cursor_from):
            self._db.delete_item(
                TableName=self._table,
                Key=schedule_key(workflow),
                ConditionExpression="attribute_not_exists(PK) OR version = :v",
                ExpressionAttributeValues={":v": _n(expected_version)},
                **ALL_OLD,
                **self._capacity(),
            )


def _pages(table: _Table) -> Iterator[list[dict[str, Any]]]:
    start: dict[str, Any] | None = None
    while True:
        kwargs: dict[str, Any] = {
            "TableName": table._table,
            "KeyConditionExpression": "PK = :p",
            "ExpressionAttributeValues": {":p": {"S": SCHEDULES_PARTITION}},
            "ConsistentRead": True,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        with mapped(f"table {table._table}"):
            answer = table._db.query(**kwargs, **table._capacity())
        yield answer.get("Items", [])
        start = answer.get("LastEvaluatedKey")
        if not start:
            return
