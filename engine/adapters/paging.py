"""Every item a DynamoDB Query answers, one page at a time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from engine.adapters.aws_errors import mapped


def query_items(db: Any, resource: str, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The Query's items across its pages; a caller that stops early reads no further page.
    ``resource`` names the table (or index) in a mapped error."""
    kwargs = dict(request)
    while True:
        with mapped(resource):
            answer = db.query(**kwargs)
        yield from answer.get("Items", [])
        if "LastEvaluatedKey" not in answer:
            return
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
