"""The emulator's index map (loom/local/emulator/moto_index.py) answers every index Query as moto does,
through every kind of write that moves an item in or out of the index, and reads only the matching items."""

from __future__ import annotations

import random
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table

from loom.local.emulator import moto_index, moto_speed
from tests.unit.test_moto_speed import create_gsi_table

pytestmark = pytest.mark.unit

SHARDS = 3


def _key(rng: random.Random) -> dict[str, Any]:
    return {"PK": {"S": f"EXEC#{rng.randrange(25):02d}"}, "SK": {"S": rng.choice(["#META", "STEP#000"])}}


def _item(rng: random.Random) -> dict[str, Any]:
    item = {**_key(rng), "n": {"N": str(rng.randrange(100))}}
    if rng.random() < 0.7:
        item["GSI1PK"] = {"S": f"SHARD#{rng.randrange(SHARDS)}"}
        if rng.random() < 0.8:
            item["GSI1SK"] = {"S": f"{rng.randrange(1000):03d}"}
    return item


def _update(rng: random.Random) -> dict[str, Any]:
    """Moves an item between shards, out of the index, or changes only what the index does not key on."""
    choice = rng.randrange(4)
    if choice == 0:
        values = {":p": {"S": f"SHARD#{rng.randrange(SHARDS)}"}, ":s": {"S": f"{rng.randrange(1000):03d}"}}
        return {"UpdateExpression": "SET GSI1PK = :p, GSI1SK = :s", "ExpressionAttributeValues": values}
    if choice == 1:
        return {"UpdateExpression": "REMOVE GSI1PK"}
    if choice == 2:
        return {"UpdateExpression": "SET n = :n", "ExpressionAttributeValues": {":n": {"N": str(rng.randrange(9))}}}
    # A conditional update that fails where the item exists: nothing may move.
    return {
        "UpdateExpression": "SET GSI1PK = :p",
        "ConditionExpression": "attribute_not_exists(PK)",
        "ExpressionAttributeValues": {":p": {"S": "SHARD#0"}},
    }


def _transaction(rng: random.Random) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(3)
        if kind == 0:
            ops.append({"Put": {"TableName": "g", "Item": _item(rng)}})
        elif kind == 1:
            ops.append({"Update": {"TableName": "g", "Key": _key(rng), **_update(rng)}})
        else:
            ops.append({"Delete": {"TableName": "g", "Key": _key(rng)}})
    keys = [next(iter(op.values())).get("Key") or _key_of(next(iter(op.values()))["Item"]) for op in ops]
    if len({str(k) for k in keys}) != len(keys):
        ops = ops[:1]  # one op per item, as DynamoDB requires
    if rng.random() < 0.4:  # cancelled: whatever it wrote is put back
        ops.append(
            {
                "ConditionCheck": {
                    "TableName": "g",
                    "Key": {"PK": {"S": "NONE"}, "SK": {"S": "x"}},
                    "ConditionExpression": "attribute_exists(PK)",
                }
            }
        )
    return ops


def _key_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"PK": item["PK"], "SK": item["SK"]}


def _query(ddb: Any, rng: random.Random) -> list[dict[str, Any]]:
    ask: dict[str, Any] = {
        "KeyConditionExpression": "GSI1PK = :s",
        "ExpressionAttributeValues": {":s": {"S": f"SHARD#{rng.randrange(SHARDS + 1)}"}},
        "ScanIndexForward": rng.random() < 0.5,
    }
    if rng.random() < 0.3:
        ask["Limit"] = 2
    pages = []
    page = ddb.query(TableName="g", IndexName="GSI1", **ask)
    while True:
        page.pop("ResponseMetadata")
        pages.append(page)
        if "LastEvaluatedKey" not in page:
            return pages
        page = ddb.query(TableName="g", IndexName="GSI1", ExclusiveStartKey=page["LastEvaluatedKey"], **ask)


def _one(ddb: Any, rng: random.Random) -> Any:
    kind = rng.randrange(7)
    try:
        if kind == 0:
            ddb.put_item(TableName="g", Item=_item(rng))
        elif kind == 1:
            ddb.update_item(TableName="g", Key=_key(rng), **_update(rng))
        elif kind == 2:
            ddb.delete_item(TableName="g", Key=_key(rng))
        elif kind == 3:
            ddb.transact_write_items(TransactItems=_transaction(rng))
        elif kind == 4:
            requests = [{"PutRequest": {"Item": _item(rng)}}, {"DeleteRequest": {"Key": _key(rng)}}]
            if str(_key_of(requests[0]["PutRequest"]["Item"])) == str(requests[1]["DeleteRequest"]["Key"]):
                requests = requests[:1]
            ddb.batch_write_item(RequestItems={"g": requests})
        else:
            return _query(ddb, rng)
    except ClientError as exc:
        return exc.response["Error"]["Code"]
    return "ok"


def _run(seed: int, steps: int = 160) -> list[Any]:
    rng = random.Random(seed)
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    create_gsi_table(ddb)
    return [_one(ddb, rng) for _ in range(steps)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_write_keeps_the_index_map_so_each_index_query_answers_as_moto_does(monkeypatch, seed: int) -> None:
    with mock_aws():
        moto_s = _run(seed)
    assert sum(isinstance(a, list) for a in moto_s) > 20 and "TransactionCanceledException" in moto_s
    assert "ConditionalCheckFailedException" in moto_s
    held: list[int] = []
    real = moto_speed._Matching.__init__

    def counted(self: Any, table: Any, conditions: Any) -> None:
        real(self, table, conditions)
        held.append(sum(len(v) for v in self.items.values()))

    monkeypatch.setattr(moto_speed._Matching, "__init__", counted)
    monkeypatch.setattr(Table, "query", moto_speed.query_partition)
    monkeypatch.setattr(dynamodb_models, "copy", moto_speed._TablesKept())
    monkeypatch.setattr(Table, "put_item", moto_index.put_item)
    monkeypatch.setattr(Table, "delete_item", moto_index.delete_item)
    monkeypatch.setattr(DynamoDBBackend, "update_item", moto_index.update_item)
    monkeypatch.setattr(DynamoDBBackend, "transact_write_items", moto_speed.transact_write_items)
    with mock_aws():
        assert _run(seed) == moto_s
    assert held and max(held) <= 25, "an index query's view held more than one shard's items"


def test_without_its_write_hooks_the_map_is_not_used(monkeypatch) -> None:
    """A process that patched the Query but not the writes (a stale map would answer wrong) looks at all items."""
    monkeypatch.setattr(Table, "query", moto_speed.query_partition)
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        create_gsi_table(ddb)
        item = {"PK": {"S": "a"}, "SK": {"S": "b"}, "GSI1PK": {"S": "SHARD#0"}, "GSI1SK": {"S": "1"}}
        ddb.put_item(TableName="g", Item=item)
        assert len(_query_all(ddb, "SHARD#0")) == 1
        ddb.update_item(TableName="g", Key=_key_of(item), UpdateExpression="REMOVE GSI1PK")
        assert _query_all(ddb, "SHARD#0") == []


def _query_all(ddb: Any, shard: str) -> list[Any]:
    page = ddb.query(
        TableName="g",
        IndexName="GSI1",
        KeyConditionExpression="GSI1PK = :s",
        ExpressionAttributeValues={":s": {"S": shard}},
    )
    return list(page["Items"])
