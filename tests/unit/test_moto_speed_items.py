"""moto's item construction, in one pass (loom.local.emulator.moto_speed.item_init): the same
items and the same size errors as moto's, each attribute sized once."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models import dynamo_type

from loom.local.emulator import moto_speed
from tests.unit.moto_tables import pk_sk_table

pytestmark = pytest.mark.unit

KEYS = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "META"}}
ITEMS: list[dict[str, Any]] = [
    KEYS,
    {
        **KEYS,
        "n": {"N": "12.500"},
        "big": {"N": "-1E+30"},
        "s": {"S": "héllo"},
        "b": {"B": b"\x00\x01"},
        "ok": {"BOOL": True},
        "none": {"NULL": True},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "l": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"k": {"S": "v"}}}]},
        "m": {"M": {"a": {"M": {"b": {"N": "1"}}}, "c": {"L": []}}},
    },
    {**KEYS, **{f"attr{i:02d}": {"N": str(i * 1.5)} for i in range(20)}},
]
PADDING = len("PK") + len("EXEC#e1") + len("SK") + len("META") + len("big")  # all but the big string's value


def built(attrs: dict[str, Any]) -> Any:
    item = dynamo_type.Item(dynamo_type.DynamoType(attrs["PK"]), dynamo_type.DynamoType(attrs["SK"]), attrs)
    return item.hash_key, item.range_key, dict(item.attrs), type(item.attrs)


def outcome(attrs: dict[str, Any]) -> Any:
    try:
        return ("built", built(attrs))
    except dynamo_type.ItemSizeTooLarge as exc:
        return ("too large", str(exc))


def at_bound(extra: int) -> dict[str, Any]:
    return {**KEYS, "big": {"S": "x" * (moto_speed.ITEM_BOUND - PADDING + extra)}}


def test_an_item_is_built_as_moto_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [*ITEMS, at_bound(0), at_bound(1), {**at_bound(-5), "after": {"S": "123456"}}]
    expected = [outcome(attrs) for attrs in cases]
    assert [o[0] for o in expected[-3:]] == ["built", "too large", "too large"]
    monkeypatch.setattr(dynamo_type.Item, "__init__", moto_speed.item_init)
    assert [outcome(attrs) for attrs in cases] == expected


def test_each_attribute_is_sized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sized = {"n": 0}
    moto_size = dynamo_type.DynamoType.size

    def counted(self: Any) -> int:
        sized["n"] += 1
        return moto_size(self)

    monkeypatch.setattr(dynamo_type.DynamoType, "size", counted)
    built(ITEMS[2])
    by_moto, sized["n"] = sized["n"], 0
    monkeypatch.setattr(dynamo_type.Item, "__init__", moto_speed.item_init)
    built(ITEMS[2])
    assert sized["n"] == 22, "one size per attribute"
    assert by_moto == 22 * 23 // 2, "moto sums every attribute already in the item for each one it adds"


def put_answers() -> list[Any]:
    """PutItem at, just over and far over the bound, then what the table holds."""
    out: list[Any] = []
    with mock_aws():
        db = pk_sk_table()
        for attrs in (at_bound(0), at_bound(1), {**at_bound(0), "more": {"S": "x" * 1000}}, ITEMS[1]):
            try:
                db.put_item(TableName="t", Item=attrs)
                out.append(("ok", len(db.get_item(TableName="t", Key=KEYS)["Item"])))
            except ClientError as exc:
                out.append(("error", exc.response["Error"]))
    return out


def test_put_item_answers_and_refuses_as_moto_does(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = put_answers()
    assert [o[0] for o in expected] == ["ok", "error", "error", "ok"]
    monkeypatch.setattr(dynamo_type.Item, "__init__", moto_speed.item_init)
    assert put_answers() == expected
