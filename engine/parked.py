"""The records the engine parks in the dead-letter queue, encoded to fit SQS's limit.

A malformed message's body is evidence: when its record would not fit, the head and the
tail are kept, and a marker says how many bytes the body had and their sha256, so the
original can be recognised (or matched against a copy) later.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.limits import SQS_MESSAGE_LIMIT

CUT_MARK = "\n...[cut by loom: see 'truncated']...\n"


def encode_record(record: dict[str, Any]) -> str:
    """The one encoding of a DLQ record. ASCII only: escaping is what makes a body grow."""
    return json.dumps(record, separators=(",", ":"), default=str)


def fits(record: dict[str, Any]) -> bool:
    return len(encode_record(record)) <= SQS_MESSAGE_LIMIT  # ASCII: characters are bytes


def malformed_record(body: str, error: dict[str, Any], message_id: str | None) -> dict[str, Any]:
    """The DLQ record of a message the worker cannot read: the whole body when it fits,
    else its head and tail around ``CUT_MARK``, with the original's size and hash."""
    record: dict[str, Any] = {"loom": "malformed", "message_id": message_id, "error": error, "body": body}
    if fits(record):
        return record
    raw = body.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(raw).hexdigest()

    def cut(keep: int) -> dict[str, Any]:
        head, tail = body[: keep - keep // 2], body[len(body) - keep // 2 :]
        truncated = {"original_bytes": len(raw), "sha256": digest, "head_chars": len(head), "tail_chars": len(tail)}
        return {**record, "body": head + CUT_MARK + tail, "truncated": truncated}

    # The most characters that fit once escaped: the encoded size grows with ``keep``.
    low, high = 0, len(body) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(cut(mid)):
            low = mid
        else:
            high = mid - 1
    return cut(low)
