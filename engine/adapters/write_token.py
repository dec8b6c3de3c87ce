"""The one path of every conditional write: a write token, and the winner when the condition fails.

A conditional write whose answer is lost is resent unchanged by botocore, and the resend
fails its own condition. Each write call stores a fresh token ``wt`` on the item it writes
and asks for the item back when its condition fails (``ALL_OLD``): a refusal by an item
that carries our token is our own earlier try, which landed (DESIGN.md, "Write tokens").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from engine.adapters.aws_errors import mapped
from engine.errors import ConflictError

TOKEN = "wt"
# In a condition: this write has not landed already (an update that appends must not append twice).
NOT_THIS_WRITE = f"(attribute_not_exists({TOKEN}) OR {TOKEN} <> :wt)"
ALL_OLD = {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}


def new_token() -> str:
    """One per write call: botocore's retries of that call resend it unchanged."""
    return uuid.uuid4().hex


def carries(item: Mapping[str, Any] | None, token: str) -> bool:
    return item is not None and item.get(TOKEN) == {"S": token}


@contextmanager
def conditional(resource: str, token: str, decode: Callable[[dict[str, Any]], object] | None = None) -> Iterator[None]:
    """Around one conditional write that carries ``token`` and asks for ``ALL_OLD``.

    The write counts as done if it landed, on this try or on an earlier one whose answer
    was lost. Otherwise ``ConflictError``, with the winning item decoded in ``current``
    (the raw item stays on the cause, a ``ClientError``).
    """
    try:
        with mapped(resource):
            yield
    except ConflictError as exc:
        winner = winner_of(exc)
        if carries(winner, token):
            return  # our own earlier try landed; only its answer was lost
        current = None if winner is None or decode is None else decode(winner)
        raise ConflictError(exc.message, current=current) from exc.__cause__


def winner_of(exc: ConflictError) -> dict[str, Any] | None:
    """The item that failed the condition (``ReturnValuesOnConditionCheckFailure=ALL_OLD``)."""
    cause = exc.__cause__
    if not isinstance(cause, ClientError):
        return None
    item = cause.response.get("Item")
    return item if isinstance(item, dict) and item else None
