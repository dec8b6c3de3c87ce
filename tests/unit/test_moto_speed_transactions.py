"""moto's TransactWriteItems with item-by-item backups (loom.local.emulator.moto_speed): the same
answers, errors and tables as moto's own whole-table copy, and no table copied."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models.table import Table

from loom.local.emulator import moto_speed
from tests.unit.moto_tables import pk_sk_table

pytestmark = pytest.mark.unit


def _s(v: str) -> dict[str, str]:
    return {"S": v}


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": _s(pk), "SK": _s(sk)}


def put(table: str, item: dict[str, Any], condition: str | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"TableName": table, "Item": item}
    if condition:
        op["ConditionExpression"] = condition
    return {"Put": op}


def update(table: str, k: dict[str, Any], expression: str, values: dict[str, Any], condition: str | None = None):
    op: dict[str, Any] = {"TableName": table, "Key": k, "UpdateExpression": expression}
    op["ExpressionAttributeValues"] = values
    if condition:
        op["ConditionExpression"] = condition
    return {"Update": op}


BUMP = "SET n = n + :one, l = list_append(l, :l)"
BUMP_VALUES = {":one": {"N": "1"}, ":l": {"L": [_s("x")]}}

# Each a transaction; between them, both tables are read whole.
TRANSACTIONS: list[list[dict[str, Any]]] = [
    [  # every write lands
        put("t", {**key("a", "1"), "n": {"N": "0"}, "l": {"L": []}}),
        put("t", {**key("a", "2"), "n": {"N": "0"}, "l": {"L": []}}),
        put("h", {"id": _s("h1"), "v": _s("one")}),
    ],
    [  # a new item and an update, then a failed condition: both undone
        put("t", {**key("b", "1"), "n": {"N": "9"}}),
        update("t", key("a", "1"), BUMP, BUMP_VALUES),
        {
            "ConditionCheck": {
                "TableName": "t",
                "Key": key("a", "2"),
                "ConditionExpression": "n > :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        },
    ],
    [  # an update in place (moto changes the item object itself) and a delete, then a failed put
        update("t", key("a", "2"), BUMP, BUMP_VALUES),
        {"Delete": {"TableName": "t", "Key": key("a", "1")}},
        {"Delete": {"TableName": "h", "Key": {"id": _s("h1")}}},
        put("t", {**key("a", "3")}, condition="attribute_exists(PK)"),
    ],
    [  # one item twice: a validation error after the first write
        put("t", {**key("c", "1"), "n": {"N": "1"}}),
        update("t", key("c", "1"), "SET n = :one", {":one": {"N": "1"}}),
    ],
    [  # a write moto cannot key (no sort key), after a good one
        put("h", {"id": _s("h2")}),
        put("t", {"PK": _s("d")}),
    ],
    [  # a failed condition on an item that does not exist, with a write to the other table
        put("h", {"id": _s("h3")}),
        update("t", key("zz", "0"), "SET n = :one", {":one": {"N": "1"}}, condition="attribute_exists(n)"),
    ],
    [  # every write lands again after the refusals
        update("t", key("a", "2"), BUMP, BUMP_VALUES),
        {"Delete": {"TableName": "t", "Key": key("a", "1")}},
        put("h", {"id": _s("h4")}),
    ],
]


def _tables() -> Any:
    """The PK/SK table "t" the expression tests use, and a table "h" keyed by its hash alone."""
    db = pk_sk_table()
    db.create_table(
        TableName="h",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return db


def _whole(db: Any, name: str) -> list[Any]:
    return sorted(db.scan(TableName=name, ConsistentRead=True)["Items"], key=repr)


def outcomes() -> list[Any]:
    out: list[Any] = []
    with mock_aws():
        db = _tables()
        for transaction in TRANSACTIONS:
            try:
                answer = db.transact_write_items(TransactItems=transaction)
                answer.pop("ResponseMetadata", None)
                out.append(("ok", answer))
            except ClientError as exc:
                out.append(("error", exc.response["Error"], exc.response.get("CancellationReasons")))
            out.append(("tables", _whole(db, "t"), _whole(db, "h")))
    return out


def test_transactions_answer_and_roll_back_as_moto_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = outcomes()
    codes = [o[1]["Code"] for o in expected if o[0] == "error"]
    assert "TransactionCanceledException" in codes and "ValidationException" in codes
    assert sum(o[0] == "ok" for o in expected) == 2

    def never(self: Any, memo: Any) -> Any:
        raise AssertionError("a whole table was copied")

    monkeypatch.setattr(dynamodb_models, "copy", moto_speed._TablesKept())
    monkeypatch.setattr(dynamodb_models.DynamoDBBackend, "transact_write_items", moto_speed.transact_write_items)
    monkeypatch.setattr(Table, "__deepcopy__", never, raising=False)
    assert outcomes() == expected


def test_a_table_with_a_stream_keeps_moto_s_whole_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stream's records roll back with the table: only moto's copy does that."""
    copied = {"n": 0}
    real = moto_speed._TablesKept.deepcopy

    def counted(self: Any, value: Any, memo: Any = None) -> Any:
        out = real(self, value, memo)
        copied["n"] += isinstance(value, Table) and out is not value
        return out

    monkeypatch.setattr(dynamodb_models, "copy", moto_speed._TablesKept())
    monkeypatch.setattr(moto_speed._TablesKept, "deepcopy", counted)
    monkeypatch.setattr(dynamodb_models.DynamoDBBackend, "transact_write_items", moto_speed.transact_write_items)
    with mock_aws():
        db = _tables()
        db.update_table(TableName="h", StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"})
        db.transact_write_items(TransactItems=[put("h", {"id": _s("s1")})])
        assert copied["n"] == 1
        db.transact_write_items(TransactItems=[put("t", {**key("s", "1")})])
        assert copied["n"] == 1, "no stream on t: its items alone are backed up"
