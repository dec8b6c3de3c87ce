"""Page cursors: a DynamoDB key handed to callers, signed and checked when it comes back.

A cursor is ``base64url(json(key)) "." base64url(hmac)``. The MAC covers the index
name as well as the key, so a cursor from one index is refused by another. A
cursor that comes back is checked twice before it goes anywhere near DynamoDB:
the MAC (it is one this store handed out), then the key schema (exactly the
index's attributes, each of its type and within DynamoDB's key sizes). Either
failure is ``InvalidInput``: a 400 to the caller, never a DynamoDB error that
names the table, and never a query DynamoDB would reject only after retries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from engine.errors import InvalidInput

NOT_OURS = "cursor is not one this API returned"
MAX_CURSOR_CHARS = 4096  # a key of four short strings is a few hundred characters
MAX_KEY_VALUE_BYTES = 1024  # DynamoDB's sort-key limit; our partition keys are far shorter
KEY_BYTES = 32
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


@dataclass(frozen=True)
class KeyShape:
    """The attributes of one index's LastEvaluatedKey: name -> type, and checks on values."""

    index: str
    types: Mapping[str, str]
    checks: Mapping[str, Callable[[str], bool]]


def new_key() -> bytes:
    """A key of its own for a store not given one: its cursors are good only in this process."""
    return secrets.token_bytes(KEY_BYTES)


def derive_key(secret: str) -> bytes:
    """The signing key from a configured secret of any length."""
    return hashlib.sha256(b"loom-cursor-v1\n" + secret.encode("utf-8")).digest()


def _mac(key: bytes, index: str, payload: bytes) -> bytes:
    return hmac.new(key, index.encode("utf-8") + b"\n" + payload, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(key: bytes, shape: KeyShape, item_key: Mapping[str, Any]) -> str:
    payload = json.dumps(dict(item_key), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return f"{_b64(payload)}.{_b64(_mac(key, shape.index, payload))}"


def decode(key: bytes, shape: KeyShape, cursor: object) -> dict[str, Any]:
    """The key a cursor stands for, or ``InvalidInput`` if it is not one of ours for this index."""
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS or cursor.count(".") != 1:
        raise InvalidInput(NOT_OURS)
    body, tag = cursor.split(".")
    try:
        payload, mac = _unb64(body), _unb64(tag)
    except (ValueError, binascii.Error) as exc:
        raise InvalidInput(NOT_OURS) from exc
    if not hmac.compare_digest(mac, _mac(key, shape.index, payload)):
        raise InvalidInput(NOT_OURS)
    try:
        item_key = json.loads(payload)
    except ValueError as exc:
        raise InvalidInput(NOT_OURS) from exc
    if not isinstance(item_key, dict) or not fits(shape, item_key):
        raise InvalidInput(NOT_OURS)
    return item_key


def fits(shape: KeyShape, item_key: object) -> bool:
    """Exactly the index's key attributes, each a one-entry {type: str} of the right type."""
    if not isinstance(item_key, dict) or set(item_key) != set(shape.types):
        return False
    for name, kind in shape.types.items():
        value = item_key[name]
        if not isinstance(value, dict) or list(value) != [kind] or not isinstance(value[kind], str):
            return False
        text = value[kind]
        if not 0 < len(text.encode("utf-8")) <= MAX_KEY_VALUE_BYTES:
            return False
        if kind == "N" and not _dynamodb_number(text):
            return False
        check = shape.checks.get(name)
        if check is not None and not check(text):
            return False
    return True


def _dynamodb_number(text: str) -> bool:
    """Decimal digits within DynamoDB's number range (38 digits, 1E-130 to 1E+126)."""
    if not NUMBER.fullmatch(text):
        return False
    try:
        value = Decimal(text)
    except InvalidOperation:
        return False
    digits = value.as_tuple().digits
    return value == 0 or (len(digits) <= 38 and -130 <= value.adjusted() <= 125)
