"""The DynamoDB adapter's queries of one execution's items follow every page, and no further
than their caller needs (a scripted client: moto would need over 1 MB of items for a second page)."""

from __future__ import annotations

from typing import Any

from engine.adapters.dynamodb import DynamoStore


def signal_item(name: str, n: int) -> dict[str, Any]:
    return {
        "PK": {"S": "EXEC#e"},
        "SK": {"S": f"SIGNAL#{name}#{n:04d}"},
        "name": {"S": name},
        "payload": {"S": f'{{"n":{n}}}'},
        "received_at": {"N": str(n)},
    }


class ScriptedPages:
    """Answers each query with the next page; every page but the last says there is more."""

    def __init__(self, *pages: list[dict[str, Any]]) -> None:
        self.pages = pages
        self.queries: list[dict[str, Any]] = []

    def query(self, **kwargs: Any) -> dict[str, Any]:
        n = len(self.queries)
        self.queries.append(kwargs)
        answer: dict[str, Any] = {"Items": self.pages[n]}
        if n + 1 < len(self.pages):
            answer["LastEvaluatedKey"] = {"page": n + 1}
        return answer


def test_every_signal_is_read_across_pages() -> None:
    client = ScriptedPages([signal_item("go", 1), signal_item("go", 2)], [], [signal_item("stop", 3)])
    found = DynamoStore(client, "t", 4).signals("e")
    assert [(s.name, s.payload["n"]) for s in found] == [("go", 1), ("go", 2), ("stop", 3)]
    assert [q.get("ExclusiveStartKey") for q in client.queries] == [None, {"page": 1}, {"page": 2}]
    assert all(
        q["ConsistentRead"] and q["ExpressionAttributeValues"][":prefix"] == {"S": "SIGNAL#"} for q in client.queries
    )


def test_the_next_signal_reads_past_empty_pages_and_stops_at_the_first_found() -> None:
    # A page the filter emptied (only consumed signals) is not the end: the next one is read.
    client = ScriptedPages([], [signal_item("go", 2), signal_item("go", 3)], [signal_item("go", 4)])
    found = DynamoStore(client, "t", 4).next_signal("e", "go")
    assert found is not None and found.payload == {"n": 2} and found.key == "0002"
    assert len(client.queries) == 2, "no page after the one with the signal"
    assert client.queries[0]["FilterExpression"] == "attribute_not_exists(consumed_by)"
    assert client.queries[0]["ExpressionAttributeValues"][":prefix"] == {"S": "SIGNAL#go#"}


def test_no_unconsumed_signal_is_none_after_the_last_page() -> None:
    client = ScriptedPages([], [])
    assert DynamoStore(client, "t", 4).next_signal("e", "go") is None
    assert len(client.queries) == 2
