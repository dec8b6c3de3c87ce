"""Page cursors are signed and checked against the index's key schema before any query."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from engine.adapters import cursor as cursors
from engine.adapters.dynamodb import DUE_CURSOR, LIST_CURSOR
from engine.errors import InvalidInput

pytestmark = pytest.mark.unit

KEY = cursors.derive_key("stack-a/")
LIST_KEY = {
    "PK": {"S": "EXEC#e1"},
    "SK": {"S": "#META"},
    "GSI2PK": {"S": "EXECUTIONS"},
    "GSI2SK": {"S": "00001767225600.000000#e1"},
}
DUE_KEY = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "#META"}, "GSI1PK": {"S": "DUE#3"}, "GSI1SK": {"N": "1767225600.5"}}


def b64(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def refused(cursor: object, shape: cursors.KeyShape = LIST_CURSOR, key: bytes = KEY) -> None:
    with pytest.raises(InvalidInput, match="cursor is not one this API returned"):
        cursors.decode(key, shape, cursor)


def test_round_trip_for_both_indexes() -> None:
    assert cursors.decode(KEY, LIST_CURSOR, cursors.encode(KEY, LIST_CURSOR, LIST_KEY)) == LIST_KEY
    assert cursors.decode(KEY, DUE_CURSOR, cursors.encode(KEY, DUE_CURSOR, DUE_KEY)) == DUE_KEY


def test_a_tampered_cursor_is_refused() -> None:
    good = cursors.encode(KEY, LIST_CURSOR, LIST_KEY)
    body, tag = good.split(".")
    other = dict(LIST_KEY, PK={"S": "EXEC#someone-else"})
    refused(f"{b64(other)}.{tag}")  # the key changed, the MAC kept
    flipped = ("A" if tag[0] != "A" else "B") + tag[1:]
    refused(f"{body}.{flipped}")  # the MAC changed


def test_a_forged_cursor_with_valid_json_is_refused() -> None:
    refused(b64(LIST_KEY))  # today's unsigned format
    refused(f"{b64(LIST_KEY)}.{b64(b'x' * 32)}")  # a MAC made up
    refused(cursors.encode(cursors.derive_key("stack-b/"), LIST_CURSOR, LIST_KEY))  # another stack's key


def test_a_cursor_from_another_index_is_refused() -> None:
    refused(cursors.encode(KEY, DUE_CURSOR, DUE_KEY), LIST_CURSOR)
    refused(cursors.encode(KEY, LIST_CURSOR, LIST_KEY), DUE_CURSOR)
    # Even with the list index's attributes, a MAC made for the due index does not verify.
    refused(cursors.encode(KEY, DUE_CURSOR, LIST_KEY), LIST_CURSOR)


@pytest.mark.parametrize("cut", [1, 5, 20, 43, 60])
def test_a_truncated_cursor_is_refused(cut: int) -> None:
    good = cursors.encode(KEY, LIST_CURSOR, LIST_KEY)
    refused(good[:-cut])
    refused(good[cut:])


@pytest.mark.parametrize(
    "key",
    [
        {**LIST_KEY, "GSI2SK": {"N": "1"}},  # wrong type
        {**LIST_KEY, "GSI2SK": {"S": 1}},  # not a string
        {**LIST_KEY, "GSI2SK": {"S": "x", "N": "1"}},  # two types
        {**LIST_KEY, "GSI2SK": {"S": ""}},  # empty key value
        {**LIST_KEY, "GSI2SK": {"S": "x" * 1025}},  # over DynamoDB's key size
        {**LIST_KEY, "GSI2PK": {"S": "OTHER"}},  # another partition
        {**LIST_KEY, "PK": {"S": "LEDGER#e1"}},  # not an execution
        {**LIST_KEY, "SK": {"S": "STEP#000#a"}},  # not the execution's item
        {k: v for k, v in LIST_KEY.items() if k != "SK"},  # an attribute missing
        {**LIST_KEY, "extra": {"S": "x"}},  # one too many
        [LIST_KEY],  # not a key at all
        "EXEC#e1",
    ],
)
def test_a_signed_key_that_does_not_fit_the_schema_is_refused(key: Any) -> None:
    # Signed with the right key: only the schema check stands between it and DynamoDB.
    payload = json.dumps(key).encode()
    tag = cursors._mac(KEY, LIST_CURSOR.index, payload)
    refused(f"{b64(payload)}.{b64(tag)}")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e999999", "twelve", "0x10"])
def test_a_due_cursor_needs_a_finite_number(number: str) -> None:
    payload = json.dumps({**DUE_KEY, "GSI1SK": {"N": number}}).encode()
    refused(f"{b64(payload)}.{b64(cursors._mac(KEY, DUE_CURSOR.index, payload))}", DUE_CURSOR)


@pytest.mark.parametrize("junk", ["", ".", "%%%", "a.b.c", "x" * 5000, None, 12, "é.é"])
def test_junk_is_refused(junk: object) -> None:
    refused(junk)


def test_a_store_without_a_key_makes_its_own() -> None:
    assert cursors.new_key() != cursors.new_key()
    assert cursors.derive_key("a") == cursors.derive_key("a") != cursors.derive_key("b")
