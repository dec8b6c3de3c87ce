"""The embedded emulator's data on disk, so that a restart of ``loom up`` keeps the executions.

moto's server keeps everything in memory and has no persistence of its own (its recorder
replays every request, receives included, which is neither fast nor faithful). So:

- **capture** runs inside the emulator process: under the lock that already serialises
  every DynamoDB request, it copies each table's items (DynamoDB JSON, as a Scan returns
  them), so a snapshot is one point in time, never half a transaction. Queue messages are
  copied with their remaining delay. The emulator captures every couple of seconds while
  requests arrive, and once more when the supervisor goes away (even by SIGKILL: its stdin
  closes).
- **restore** runs in the supervisor with public APIs only, after the template's resources
  are created and before any function starts: BatchWriteItem for the items, SendMessageBatch
  for the messages.

The capture reads moto's backends (``table.all_items()``, ``queue._messages``): there is no
public call that reads a table under our lock. tests/integration/test_local_persistence.py
pins that, so a moto upgrade that moves them fails there, not on a user's laptop.
"""

from __future__ import annotations

import base64
import json
import math
import os
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from loom.local import private

FILENAME = "emulator-state.json"
FORMAT = 1


class SnapshotError(RuntimeError):
    """The state file cannot be read back; nothing was restored and nothing was overwritten."""


# ---------------------------------------------------------------------- in the emulator


def capture(dynamodb_lock: AbstractContextManager[Any] | threading.Lock) -> dict[str, Any]:
    from moto.backends import get_backend

    tables: dict[str, list[dict[str, Any]]] = {}
    with dynamodb_lock:
        for regions in get_backend("dynamodb").values():
            for backend in regions.values():
                for name, table in backend.tables.items():
                    tables[name] = [item.to_json()["Attributes"] for item in table.all_items()]
    queues: dict[str, list[dict[str, Any]]] = {}
    now_ms = time.time() * 1000
    for sqs_regions in get_backend("sqs").values():
        for sqs in sqs_regions.values():
            for name, queue in sqs.queues.items():
                with queue._messages_lock:
                    messages = list(queue._messages)
                queues[name] = [
                    {
                        "body": m.body,
                        "attributes": m.message_attributes,
                        "delay_seconds": max(0.0, (m.delayed_until - now_ms) / 1000),
                        "group_id": m.group_id,
                        "deduplication_id": m.deduplication_id,
                    }
                    for m in messages
                ]
    return {"format": FORMAT, "taken_at": time.time(), "tables": tables, "queues": queues}


def _wire(value: Any) -> Any:
    """moto keeps binary attributes as bytes; DynamoDB JSON carries them as base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot save a {type(value).__name__} in the state file")


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with private.open_write(tmp) as fh:  # every item, callback tokens included: owner-only
        json.dump(data, fh, separators=(",", ":"), default=_wire)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)  # a crash mid-write leaves the previous snapshot whole


# ---------------------------------------------------------------------- in the supervisor


def read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(
            f"the saved state {path} is unreadable ({exc}); move it away, or `loom up --fresh` to start empty"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SnapshotError(f"the saved state {path} is not format {FORMAT}; `loom up --fresh` starts empty")
    return data


def _binary(value: Any) -> Any:
    """DynamoDB JSON on the wire carries binary as base64; boto3's client wants bytes."""
    if isinstance(value, dict) and len(value) == 1:
        kind, inner = next(iter(value.items()))
        if kind == "B":
            return {"B": base64.b64decode(inner)}
        if kind == "BS":
            return {"BS": [base64.b64decode(v) for v in inner]}
        if kind == "M":
            return {"M": {k: _binary(v) for k, v in inner.items()}}
        if kind == "L":
            return {"L": [_binary(v) for v in inner]}
    return value


def _put_items(dynamodb: Any, table: str, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), 25):  # BatchWriteItem takes 25 at most
        requests = [
            {"PutRequest": {"Item": {k: _binary(v) for k, v in item.items()}}} for item in items[start : start + 25]
        ]
        pending: dict[str, Any] = {table: requests}
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def _send_messages(sqs: Any, url: str, messages: list[dict[str, Any]]) -> None:
    for start in range(0, len(messages), 10):  # SendMessageBatch takes ten at most
        entries = []
        for i, m in enumerate(messages[start : start + 10]):
            entry: dict[str, Any] = {
                "Id": str(i),
                "MessageBody": m["body"],
                "DelaySeconds": min(900, math.ceil(float(m.get("delay_seconds") or 0))),
            }
            attributes = {k: v for k, v in (m.get("attributes") or {}).items() if "StringValue" in v}
            if attributes:
                entry["MessageAttributes"] = attributes
            if m.get("group_id"):
                entry.pop("DelaySeconds")  # per-message delays do not exist on FIFO queues
                entry["MessageGroupId"] = m["group_id"]
                entry["MessageDeduplicationId"] = m.get("deduplication_id") or f"restore-{start + i}"
            entries.append(entry)
        failed = sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed") or []
        if failed:
            raise SnapshotError(f"{len(failed)} saved messages were not restored to {url}: {failed[0]}")


def restore(session: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Put the saved items and messages back into the (new, empty) resources of the same names.

    A table or queue the template no longer has is skipped and named in the summary.
    """
    dynamodb, sqs = session.client("dynamodb"), session.client("sqs")
    existing = set(dynamodb.list_tables().get("TableNames") or [])
    summary: dict[str, Any] = {"items": 0, "messages": 0, "skipped": []}
    for table, items in (data.get("tables") or {}).items():
        if table not in existing:
            summary["skipped"].append(table)
            continue
        _put_items(dynamodb, table, items)
        summary["items"] += len(items)
    for name, messages in (data.get("queues") or {}).items():
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            summary["skipped"].append(name)
            continue
        _send_messages(sqs, url, messages)
        summary["messages"] += len(messages)
    return summary
