"""DLQ records that always fit SQS's limit (engine/parked.py)."""

from __future__ import annotations

import hashlib

import pytest

from engine.limits import SQS_MESSAGE_LIMIT
from engine.parked import CUT_MARK, encode_record, fits, malformed_record

pytestmark = pytest.mark.unit

ERROR = {"type": "MalformedMessage", "message": "message body is not JSON"}


def test_a_body_that_fits_is_kept_whole() -> None:
    record = malformed_record("not json", ERROR, "m-1")
    assert record == {"loom": "malformed", "message_id": "m-1", "error": ERROR, "body": "not json"}


@pytest.mark.parametrize("char", ["\x01", '"', "é", "\U0001f600", "x"])
def test_a_cut_body_keeps_as_much_head_and_tail_as_fits_and_says_what_it_was(char: str) -> None:
    body = "<head>" + char * 300_000 + "<tail>"
    record = malformed_record(body, ERROR, "m-1")
    size = len(encode_record(record).encode("utf-8"))
    assert size <= SQS_MESSAGE_LIMIT
    cut = record["truncated"]
    raw = body.encode("utf-8")
    assert cut["original_bytes"] == len(raw) and cut["sha256"] == hashlib.sha256(raw).hexdigest()
    head, _, tail = record["body"].partition(CUT_MARK)
    assert body.startswith(head) and body.endswith(tail) and head.startswith("<head>") and tail.endswith("<tail>")
    assert (len(head), len(tail)) == (cut["head_chars"], cut["tail_chars"])
    # Maximal: one more character kept would not fit.
    keep = len(head) + len(tail) + 1
    bigger = {**record, "body": body[: keep - keep // 2] + CUT_MARK + body[len(body) - keep // 2 :]}
    bigger["truncated"] = {**cut, "head_chars": keep - keep // 2, "tail_chars": keep // 2}
    assert not fits(bigger)
