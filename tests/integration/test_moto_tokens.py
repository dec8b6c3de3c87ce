"""The emulator's TransactWriteItems honours ClientRequestToken as DynamoDB does (moto ignores it):
a resend within 10 minutes writes nothing again, other parameters under the token are refused,
and a cancelled transaction is not remembered."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.responses import DynamoHandler

from loom.local.emulator import moto_tokens

pytestmark = pytest.mark.integration


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DynamoHandler, "transact_write_items", moto_tokens.transact_write_items)
    moto_tokens.forget()


def _count(aws: dict[str, Any], token: str, *, by: int = 1, guard: bool = False) -> None:
    update: dict[str, Any] = {
        "TableName": aws["Table"],
        "Key": {"PK": {"S": "c"}, "SK": {"S": "c"}},
        "UpdateExpression": "ADD n :by",
        "ExpressionAttributeValues": {":by": {"N": str(by)}},
    }
    if guard:
        update["ConditionExpression"] = "attribute_exists(PK)"
    aws["dynamodb"].transact_write_items(TransactItems=[{"Update": update}], ClientRequestToken=token)


def _n(aws: dict[str, Any]) -> int:
    item = aws["dynamodb"].get_item(TableName=aws["Table"], Key={"PK": {"S": "c"}, "SK": {"S": "c"}}).get("Item")
    return int(item["n"]["N"]) if item else 0


def test_a_resend_with_the_same_token_writes_nothing_again(aws: dict[str, Any], tokens: None) -> None:
    _count(aws, "t1")
    _count(aws, "t1")  # botocore's resend of a request whose answer was lost
    assert _n(aws) == 1
    _count(aws, "t2")
    assert _n(aws) == 2


def test_the_same_token_with_other_parameters_is_refused(aws: dict[str, Any], tokens: None) -> None:
    _count(aws, "t1")
    with pytest.raises(ClientError) as refused:
        _count(aws, "t1", by=5)
    assert refused.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert _n(aws) == 1


def test_a_token_is_new_again_after_ten_minutes(
    aws: dict[str, Any], tokens: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(moto_tokens, "unix_time", lambda: now[0])
    _count(aws, "t1")
    now[0] += moto_tokens.WINDOW - 1
    _count(aws, "t1")
    assert _n(aws) == 1
    now[0] += 2
    _count(aws, "t1")
    assert _n(aws) == 2


def test_a_cancelled_transaction_is_not_remembered(aws: dict[str, Any], tokens: None) -> None:
    with pytest.raises(ClientError) as cancelled:
        _count(aws, "t1", guard=True)  # the item does not exist yet: cancelled, nothing written
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    _count(aws, "t0")
    _count(aws, "t1", guard=True)  # the same request, now able to land
    assert _n(aws) == 2


def test_without_the_patch_moto_applies_every_resend(aws: dict[str, Any]) -> None:
    """What the patch is for: moto's own answer to the same resend."""
    _count(aws, "t1")
    _count(aws, "t1")
    assert _n(aws) == 2
