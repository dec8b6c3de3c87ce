"""What the embedded emulator authorises each request as (loom.local.emulator.moto_iam): AWS's mapping, pure."""

from __future__ import annotations

import pytest

from loom.local.emulator.moto_iam import dynamodb_checks, glob_match, sqs_checks

pytestmark = pytest.mark.unit

R, A = "us-east-1", "123456789012"
TABLE = f"arn:aws:dynamodb:{R}:{A}:table/loom-dev"


def checks(action: str, params: dict) -> list[tuple[str, str]]:
    return list(dynamodb_checks(action, params, R, A))


def test_a_dynamodb_call_is_checked_against_its_table_or_index():
    assert checks("GetItem", {"TableName": "loom-dev"}) == [("GetItem", TABLE)]
    assert checks("Query", {"TableName": "loom-dev", "IndexName": "GSI1"}) == [("Query", f"{TABLE}/index/GSI1")]
    assert checks("Scan", {"TableName": "loom-dev", "IndexName": "GSI2"}) == [("Scan", f"{TABLE}/index/GSI2")]
    assert checks("Query", {"TableName": "loom-dev"}) == [("Query", TABLE)]
    assert checks("ListTables", {}) == [("ListTables", "*")]


def test_a_transaction_is_each_items_own_action_and_a_batch_its_action_per_table():
    items = [
        {"Put": {"TableName": "loom-dev"}},
        {"Update": {"TableName": "loom-dev"}},
        {"ConditionCheck": {"TableName": "other"}},
        {"Delete": {"TableName": "loom-dev"}},
    ]
    assert checks("TransactWriteItems", {"TransactItems": items}) == [
        ("PutItem", TABLE),
        ("UpdateItem", TABLE),
        ("ConditionCheckItem", f"arn:aws:dynamodb:{R}:{A}:table/other"),
        ("DeleteItem", TABLE),
    ]
    assert checks("TransactGetItems", {"TransactItems": [{"Get": {"TableName": "loom-dev"}}]}) == [("GetItem", TABLE)]
    assert checks("BatchGetItem", {"RequestItems": {"loom-dev": {}, "b": {}}}) == [
        ("BatchGetItem", TABLE),
        ("BatchGetItem", f"arn:aws:dynamodb:{R}:{A}:table/b"),
    ]


def test_an_sqs_batch_is_its_single_action():
    q = f"arn:aws:sqs:{R}:{A}:loom-dev-steps"
    assert list(sqs_checks("SendMessageBatch", q)) == [("SendMessage", q)]
    assert list(sqs_checks("DeleteMessageBatch", q)) == [("DeleteMessage", q)]
    assert list(sqs_checks("ChangeMessageVisibilityBatch", q)) == [("ChangeMessageVisibility", q)]
    assert list(sqs_checks("ReceiveMessage", q)) == [("ReceiveMessage", q)]


@pytest.mark.parametrize(
    ("pattern", "value", "fold", "matches"),
    [
        (TABLE, TABLE, False, True),
        (TABLE[:-1] + "?", TABLE, False, True),  # moto read '?' as a regex quantifier: no match
        (TABLE.replace("loom-dev", "loom.dev"), TABLE, False, False),  # moto read '.' as any character
        (TABLE.replace("loom-dev", "loom-*"), TABLE, False, True),
        ("*", TABLE, False, True),
        (TABLE, TABLE + "/index/GSI1", False, False),
        (TABLE + "/*", TABLE + "/index/GSI1", False, True),
        ("dynamodb:getitem", "dynamodb:GetItem", True, True),  # actions are case-insensitive in IAM
        (TABLE.upper(), TABLE, False, False),  # resources are not
        ("a(b)+", "a(b)+", False, True),
    ],
)
def test_policy_wildcards_are_iams(pattern, value, fold, matches):
    assert glob_match(pattern, value, fold_case=fold) is matches
