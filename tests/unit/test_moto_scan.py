"""moto's table Scan and item order as the embedded emulator runs them (loom.local.emulator.moto_scan):
the same pages, counts, keys and errors as moto's own, the page's start found by bisection, and
only what the filter keeps copied."""

from __future__ import annotations

import math
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.models.table import Table

from loom.local.emulator import moto_scan

pytestmark = pytest.mark.unit

BIG = "x" * 90_000  # eleven of these fill a 1 MB page


def _tables(db: Any) -> None:
    db.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
            {"AttributeName": "G", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "byg",
                "KeySchema": [{"AttributeName": "G", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    db.create_table(  # numbers sort by value, not by text: 10 after 9, -1 first, 1.5 between
        TableName="n",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
        BillingMode="PAY_PER_REQUEST",
    )


def _fill(db: Any) -> None:
    for p in range(12):
        for s in range(9):
            item: dict[str, Any] = {"PK": {"S": f"p{p}"}, "SK": {"S": f"s{(s * 7) % 9}"}, "n": {"N": str(p * s)}}
            if (p + s) % 4 == 0:
                item["big"] = {"S": BIG}
            if s % 3 == 0:
                item["G"] = {"S": f"g{p % 2}"}
                item["expires_at"] = {"N": str(1000 + p)}
            db.put_item(TableName="t", Item=item)
    for value in ("-1", "0", "1.5", "2", "9", "10", "100", "1e3"):
        db.put_item(TableName="n", Item={"id": {"N": value}, "v": {"S": value}})


# Each a Scan, read page by page to its end.
SCANS: list[dict[str, Any]] = [
    {"TableName": "t"},
    {"TableName": "t", "Limit": 7},
    {"TableName": "t", "Limit": 1},
    {
        "TableName": "t",
        "FilterExpression": "#e <= :now",
        "ProjectionExpression": "PK, SK",
        "ExpressionAttributeNames": {"#e": "expires_at"},
        "ExpressionAttributeValues": {":now": {"N": "1005"}},
    },
    {"TableName": "t", "FilterExpression": "n > :z", "ExpressionAttributeValues": {":z": {"N": "20"}}, "Limit": 10},
    {"TableName": "t", "ScanFilter": {"G": {"ComparisonOperator": "NULL"}}},
    {"TableName": "t", "ScanFilter": {"G": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "g1"}]}}},
    {"TableName": "t", "Select": "COUNT", "FilterExpression": "attribute_exists(big)"},
    {"TableName": "t", "IndexName": "byg"},
    {"TableName": "t", "Segment": 1, "TotalSegments": 3},
    {"TableName": "n"},
    {"TableName": "n", "Limit": 3},
    {"TableName": "t", "ExclusiveStartKey": {"PK": {"S": "p3"}, "SK": {"S": "s45"}}},  # between two items
    {"TableName": "n", "ExclusiveStartKey": {"id": {"N": "5"}}, "Limit": 2},
    {"TableName": "n", "ExclusiveStartKey": {"id": {"S": "5"}}},  # the wrong type: moto's error
]


def _pages(db: Any, request: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    kwargs = dict(request)
    while True:
        try:
            page = db.scan(**kwargs)
        except ClientError as exc:
            return [*out, ("error", exc.response["Error"])]
        except TypeError as exc:  # moto in-process raises what its server answers with a 500
            return [*out, ("error", str(exc))]
        page.pop("ResponseMetadata", None)
        out.append(page)
        if "LastEvaluatedKey" not in page or len(out) > 200:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def outcomes() -> list[Any]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        _tables(db)
        _fill(db)
        return [_pages(db, request) for request in SCANS]


def _ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Table, "scan", moto_scan.scan)
    monkeypatch.setattr(Table, "all_items", moto_scan.all_items)


def test_every_scan_reads_the_same_pages_as_moto_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = outcomes()
    assert len(expected[0]) >= 3, "the big items split the whole table into pages"
    assert [page["Count"] for page in expected[11]] == [3, 3, 2]
    assert [item["id"]["N"] for page in expected[10] for item in page["Items"]][:4] == ["-1", "0", "1.5", "2"]
    assert expected[-1][-1][0] == "error"
    _ours(monkeypatch)
    assert outcomes() == expected


def test_a_page_starts_by_bisection_and_copies_only_what_the_filter_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    _ours(monkeypatch)
    tests = {"n": 0}
    copies = {"n": 0}
    before, copy_item = Table._item_comes_before_dct, Item.__deepcopy__

    def counted_test(self: Any, *args: Any) -> bool:
        tests["n"] += 1
        return bool(before(self, *args))

    def counted_copy(self: Any, memo: Any) -> Any:
        copies["n"] += 1
        return copy_item(self, memo)

    monkeypatch.setattr(Table, "_item_comes_before_dct", counted_test)
    monkeypatch.setattr(Item, "__deepcopy__", counted_copy)
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        _tables(db)
        _fill(db)
        pages = _pages(
            db,
            {
                "TableName": "t",
                "Limit": 5,
                "FilterExpression": "n = :z",
                "ExpressionAttributeValues": {":z": {"N": "0"}},
            },
        )
    kept = sum(page["Count"] for page in pages)
    assert len(pages) == math.ceil(108 / 5) and kept == 20
    assert tests["n"] <= len(pages) * (math.ceil(math.log2(108)) + 1), tests
    assert copies["n"] == kept
