"""DynamoDB's ``ClientRequestToken`` on TransactWriteItems, which moto ignores.

DynamoDB makes a TransactWriteItems with a token idempotent: a second request with the same
token within 10 minutes of the first one's completion has the same effect as one (nothing is
written again, and it answers success); the same token with other parameters in that window is
refused with ``IdempotentParameterMismatchException``; after it, the token is new again. moto
applies every request it gets, so botocore's resend of a transaction whose answer was lost
(the fan-out's item commit and join count, engine/adapters/fan_store.py) would count twice on
the local stack and never in AWS. A cancelled transaction wrote nothing and is not remembered:
its resend is evaluated again, as a first try would be.

The embedded emulator applies this (loom/local/emulator/moto_server.py); so can an in-process moto.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from moto.core.utils import unix_time
from moto.dynamodb.exceptions import DynamodbException
from moto.dynamodb.responses import DynamoHandler

WINDOW = 600.0  # seconds a token stays in use after its transaction completed


class IdempotentParameterMismatch(DynamodbException):
    def __init__(self) -> None:
        super().__init__(
            "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
            "The request uses the same client token as a previous, but non-identical request.",
        )


@dataclass(frozen=True)
class _Completed:
    digest: str
    at: float
    answer: Any


_completed: dict[str, _Completed] = {}
# One transaction at a time: the emulator serializes conditional writes anyway, and a token's
# check and its record must not interleave with the same token's resend.
_lock = threading.Lock()
_moto_transact_write_items = DynamoHandler.transact_write_items


def _digest(body: dict[str, Any]) -> str:
    rest = {k: v for k, v in body.items() if k != "ClientRequestToken"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()


def transact_write_items(self: Any) -> Any:
    """moto's TransactWriteItems, idempotent on ``ClientRequestToken`` as DynamoDB's is."""
    token = self.body.get("ClientRequestToken")
    if not token:
        return _moto_transact_write_items(self)
    digest, now = _digest(self.body), unix_time()
    with _lock:
        for old in [t for t, c in _completed.items() if now - c.at >= WINDOW]:
            del _completed[old]
        seen = _completed.get(token)
        if seen is not None:
            if seen.digest != digest:
                raise IdempotentParameterMismatch()
            return seen.answer
        answer = _moto_transact_write_items(self)
        _completed[token] = _Completed(digest, unix_time(), answer)
        return answer


def apply() -> None:
    DynamoHandler.transact_write_items = transact_write_items  # type: ignore[method-assign]


def forget() -> None:
    """Drop every remembered token (a reset of the emulator's data)."""
    with _lock:
        _completed.clear()
