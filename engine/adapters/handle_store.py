"""The callback handles part of the DynamoDB store: one item per ``create_callback`` step.

    handle  PK=EXEC#<id>  SK=CB#<step:03d>  name, secret, status, created_at, deadline,
                                            heartbeat_timeout, heartbeat_deadline, result,
                                            error, body, completed_at, version, wt

Under the execution's partition, so that retention stamps it with the rest (engine/retention.py).
The creation is conditional on the item being absent (a second creation gets the first's
handle back: one token per handle); every later change on its version. Both carry a write
token (engine/adapters/write_token.py).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from engine.adapters.aws_errors import mapped
from engine.adapters.write_token import ALL_OLD, TOKEN, conditional, new_token
from engine.errors import ConflictError
from engine.limits import check_item, utf8_len
from engine.state import Handle, HandleStatus, canonical_json

PK, SK = "PK", "SK"
_NUMBERS = ("deadline", "heartbeat_timeout", "heartbeat_deadline", "completed_at")
_JSON = ("result", "error")


class _Table(Protocol):
    _db: Any
    _table: str

    def _capacity(self) -> dict[str, str]: ...


def handle_key(execution_id: str, step: int) -> dict[str, Any]:
    return {PK: {"S": f"EXEC#{execution_id}"}, SK: {"S": f"CB#{step:03d}"}}


def _n(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def handle_item(handle: Handle, token: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        **handle_key(handle.execution_id, handle.step),
        "name": {"S": handle.name},
        "secret": {"S": handle.secret},
        "status": {"S": handle.status.value},
        "created_at": _n(handle.created_at),
        "version": _n(handle.version),
        TOKEN: {"S": token},
    }
    for name in _NUMBERS:
        value = getattr(handle, name)
        if value is not None:
            item[name] = _n(float(value))
    for name in _JSON:
        value = getattr(handle, name)
        if value is not None:
            item[name] = {"S": canonical_json(value)}
    if handle.body is not None:
        item["body"] = {"S": handle.body}
    # A completion's result must fit the item it is kept in (the API answers 413 otherwise).
    check_item(sum(utf8_len(k) + utf8_len(json.dumps(v)) for k, v in item.items()), f"callback {handle.name!r}")
    return item


def handle_from(item: dict[str, Any]) -> Handle:
    def number(name: str) -> float | None:
        return float(item[name]["N"]) if name in item else None

    def decoded(name: str) -> Any:
        return json.loads(item[name]["S"]) if name in item else None

    return Handle(
        execution_id=item[PK]["S"].removeprefix("EXEC#"),
        step=int(item[SK]["S"].removeprefix("CB#")),
        name=item["name"]["S"],
        secret=item["secret"]["S"],
        created_at=float(item["created_at"]["N"]),
        deadline=number("deadline"),
        heartbeat_timeout=number("heartbeat_timeout"),
        heartbeat_deadline=number("heartbeat_deadline"),
        status=HandleStatus(item["status"]["S"]),
        result=decoded("result"),
        error=decoded("error"),
        body=item["body"]["S"] if "body" in item else None,
        completed_at=number("completed_at"),
        version=int(item["version"]["N"]),
    )


class HandleStore:
    """The callback handles (engine.ports.Store's handles part), mixed into DynamoStore."""

    def create_handle(self: _Table, handle: Handle) -> Handle:
        token = new_token()
        try:
            with conditional(f"table {self._table}", token, handle_from):
                self._db.put_item(
                    TableName=self._table,
                    Item=handle_item(handle, token),
                    ConditionExpression="attribute_not_exists(PK)",
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError as exc:
            if isinstance(exc.current, Handle):
                return exc.current  # created before (a crash, a redelivery): that one stands
            raise
        return handle

    def get_handle(self: _Table, execution_id: str, step: int) -> Handle | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table, Key=handle_key(execution_id, step), ConsistentRead=True, **self._capacity()
            )
        item = answer.get("Item")
        return None if item is None else handle_from(item)

    def put_handle(self: _Table, handle: Handle, *, expected_version: int) -> None:
        token = new_token()
        with conditional(f"table {self._table}", token, handle_from):
            self._db.put_item(
                TableName=self._table,
                Item=handle_item(handle, token),
                ConditionExpression="version = :v",
                ExpressionAttributeValues={":v": _n(expected_version)},
                **ALL_OLD,
                **self._capacity(),
            )
