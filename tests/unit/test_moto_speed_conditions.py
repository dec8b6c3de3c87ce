"""moto's ConditionExpression parse, kept per text, names and value types (loom.local.emulator.moto_speed):
every answer, error and item the same as moto's own, with the same texts met again and again
under other values, value types, names and placeholders."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from loom.local.emulator import moto_speed
from tests.unit.test_moto_speed_expressions import install

pytestmark = pytest.mark.unit

ADVANCE = "version = :v AND current_step = :s"
RANGE = "n BETWEEN :lo AND :hi"
MIX = "(attribute_not_exists(wt) OR wt <> :wt) AND #s IN (:a, :b) AND begins_with(tag, :p) AND size(tag) > :n"


def key(pk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}}


def n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def s(value: str) -> dict[str, str]:
    return {"S": value}


ITEM = {**key("e1"), "version": n(1), "current_step": n(0), "n": n(5), "status": s("RUNNING"), "tag": s("run-1")}

# (operation, arguments beyond TableName). The same texts come back with values that flip the
# outcome, with another value type, other names, a value missing or unused, a NULL bound, a text that does not parse.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("put_item", {"Item": ITEM}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(1), ":s": n(0), ":nv": n(2)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(1), ":s": n(0), ":nv": n(3)},
                     "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(2), ":s": n(0), ":nv": n(3)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": s("3"), ":s": n(0), ":nv": n(4)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(3), ":nv": n(4)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(3), ":s": n(0), ":nv": n(4), ":spare": n(9)}}),
    ("put_item", {"Item": {**ITEM, "version": n(7)}, "ConditionExpression": RANGE,
                  "ExpressionAttributeValues": {":lo": n(1), ":hi": n(4)}}),
    ("put_item", {"Item": {**ITEM, "version": n(7)}, "ConditionExpression": RANGE,
                  "ExpressionAttributeValues": {":lo": {"NULL": True}, ":hi": n(9)}}),
    ("put_item", {"Item": {**ITEM, "version": n(7)}, "ConditionExpression": RANGE,
                  "ExpressionAttributeValues": {":lo": n(1), ":hi": n(9)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET wt = :wt", "ConditionExpression": MIX,
                     "ExpressionAttributeNames": {"#s": "status"},
                     "ExpressionAttributeValues": {":wt": s("t1"), ":a": s("RUNNING"), ":b": s("DONE"),
                                                   ":p": s("run"), ":n": n(2)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET wt = :wt", "ConditionExpression": MIX,
                     "ExpressionAttributeNames": {"#s": "status"},
                     "ExpressionAttributeValues": {":wt": s("t1"), ":a": s("RUNNING"), ":b": s("DONE"),
                                                   ":p": s("run"), ":n": n(2)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET wt = :wt", "ConditionExpression": MIX,
                     "ExpressionAttributeNames": {"#s": "tag"},
                     "ExpressionAttributeValues": {":wt": s("t2"), ":a": s("run-1"), ":b": s("DONE"),
                                                   ":p": s("ru"), ":n": n(9)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET wt = :wt", "ConditionExpression": MIX,
                     "ExpressionAttributeNames": {"#s": "tag"},
                     "ExpressionAttributeValues": {":wt": s("t2"), ":a": s("run-1"), ":b": s("DONE"),
                                                   ":p": s("ru"), ":n": n(3)}}),
    # One transaction, one condition text, two items with other values: one passes, one does not.
    ("transact_write_items", {"TransactItems": [
        {"Update": {"TableName": "t", "Key": key("e1"), "UpdateExpression": "SET version = :nv",
                    "ConditionExpression": ADVANCE,
                    "ExpressionAttributeValues": {":v": n(7), ":s": n(0), ":nv": n(8)}}},
        {"Put": {"TableName": "t", "Item": {**key("e2"), "version": n(1)}, "ConditionExpression": ADVANCE,
                 "ExpressionAttributeValues": {":v": n(6), ":s": n(0)}}},
    ]}),
    ("transact_write_items", {"TransactItems": [
        {"Update": {"TableName": "t", "Key": key("e1"), "UpdateExpression": "SET version = :nv",
                    "ConditionExpression": ADVANCE,
                    "ExpressionAttributeValues": {":v": n(7), ":s": n(0), ":nv": n(8)}}},
        {"Put": {"TableName": "t", "Item": {**key("e2"), "version": n(1)},
                 "ConditionExpression": "attribute_not_exists(PK) OR " + ADVANCE,
                 "ExpressionAttributeValues": {":v": n(6), ":s": n(0)}}},
    ]}),
    ("delete_item", {"Key": key("e2"), "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(2), ":s": n(0)}}),
    ("delete_item", {"Key": key("e2"), "ConditionExpression": ADVANCE,
                     "ExpressionAttributeValues": {":v": n(1), ":s": n(0)}}),
    ("scan", {"FilterExpression": RANGE, "ExpressionAttributeValues": {":lo": n(1), ":hi": n(9)}}),
    ("scan", {"FilterExpression": RANGE, "ExpressionAttributeValues": {":lo": n(6), ":hi": n(9)}}),
    ("update_item", {"Key": key("e1"), "UpdateExpression": "SET version = :nv", "ConditionExpression": "version = = :v",
                     "ExpressionAttributeValues": {":v": n(8), ":nv": n(9)}}),
]  # fmt: skip


def outcomes() -> list[Any]:
    """Each call's answer (or error) and the table after it, over two passes (the second meets kept trees)."""
    out: list[Any] = []
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for _ in range(2):
            for pk in ("e1", "e2"):
                db.delete_item(TableName="t", Key=key(pk))
            for operation, arguments in CALLS:
                call = getattr(db, operation)
                try:
                    answer = (
                        call(**arguments) if operation == "transact_write_items" else call(TableName="t", **arguments)
                    )
                    answer.pop("ResponseMetadata", None)
                    out.append(("ok", operation, answer))
                except ClientError as exc:
                    out.append(("error", operation, exc.response["Error"], exc.response.get("Item"),
                                exc.response.get("CancellationReasons")))  # fmt: skip
                except (KeyError, ValueError) as exc:  # what moto raises (its server answers 500)
                    out.append(("raised", operation, type(exc).__name__, str(exc)))
                out.append(("table", sorted(map(repr, db.scan(TableName="t")["Items"]))))
    return out


def test_conditional_writes_answer_fail_and_leave_the_table_as_moto_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = outcomes()
    codes = {o[2]["Code"] for o in expected if o[0] == "error"}
    assert {o[2] for o in expected if o[0] == "raised"} == {"KeyError", "IncorrectOperandType", "ValueError"}
    assert {"ConditionalCheckFailedException", "ValidationException", "TransactionCanceledException"} <= codes
    assert sum(1 for o in expected if o[0] == "ok" and o[1] == "update_item") >= 3, "the texts must pass too"
    install(monkeypatch)
    assert outcomes() == expected


def test_a_condition_is_parsed_once_per_text_names_and_value_types(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)
    parsed: list[tuple[Any, ...]] = []
    moto_parse = moto_speed._moto_condition_parse

    def counted(parser: Any) -> Any:
        parsed.append((parser.condition_expression, tuple(sorted((parser.expression_attribute_names or {}).items()))))
        return moto_parse(parser)

    monkeypatch.setattr(moto_speed, "_moto_condition_parse", counted)
    outcomes()
    advance = [p for p in parsed if p[0] == ADVANCE]
    # Kept once over both passes each: :v :s :nv as numbers (its first parse), :v a string, a spare
    # value, and :v :s alone (the transaction's put and the deletes). A parse that fails (a
    # placeholder missing, a text that does not parse) is made again every time.
    assert len(advance) == 4 + 2, advance
    assert [p[1] for p in parsed if p[0] == MIX] == [(("#s", "status"),), (("#s", "tag"),)]
    # A NULL bound fails every time; numbers are kept once for a write's condition and a scan's filter alike.
    assert len([p for p in parsed if p[0] == RANGE]) == 2 + 1
    assert len([p for p in parsed if p[0] == "version = = :v"]) == 2
