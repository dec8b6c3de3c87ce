"""A malformed message is parked whole, or cut with a marker, and never acknowledged unparked."""

from __future__ import annotations

import hashlib
import json

import pytest

from engine import Registry
from engine.batch import process_batch
from engine.errors import TransientError
from engine.limits import SQS_MESSAGE_LIMIT
from tests.integration.engine_support import dead_letters

pytestmark = pytest.mark.integration


@pytest.fixture
def reg():
    return Registry()


def record(body: str, message_id: str = "bad-1") -> dict:
    # Built by hand: SQS itself refuses control characters, a Lambda test event does not.
    return {"messageId": message_id, "receiptHandle": "r-1", "body": body, "attributes": {}}


@pytest.mark.parametrize(
    "body",
    [
        "\x01" * 250_000,  # 250 KB of characters that JSON escapes to six bytes each (\\u0001)
        "é" * 125_000,  # 250 KB of UTF-8 that escapes to six bytes per character (\\u00e9)
        "<" + "\u2028" * 83_000 + ">",
    ],
)
def test_a_body_that_escapes_past_256_kb_is_parked_cut_with_its_size_and_hash(rig, aws, body):
    assert process_batch(rig.engine, {"Records": [record(body)]}) == {"batchItemFailures": []}
    (parked,) = dead_letters(aws)
    raw = body.encode("utf-8")
    assert parked["loom"] == "malformed" and parked["message_id"] == "bad-1"
    assert parked["error"]["type"] == "MalformedMessage"
    cut = parked["truncated"]
    assert cut["original_bytes"] == len(raw) and cut["sha256"] == hashlib.sha256(raw).hexdigest()
    head, tail = body[: cut["head_chars"]], body[len(body) - cut["tail_chars"] :]
    assert parked["body"].startswith(head) and parked["body"].endswith(tail) and "cut by loom" in parked["body"]
    assert cut["head_chars"] > 20_000 and cut["tail_chars"] > 20_000, "as much as fits is kept"
    encoded = json.dumps(parked, separators=(",", ":"))
    assert len(encoded.encode()) <= SQS_MESSAGE_LIMIT


def test_a_body_that_fits_is_parked_whole_without_a_marker(rig, aws):
    body = "{" + "x" * 240_000  # not JSON, and more than the 200,000 characters once kept
    assert process_batch(rig.engine, {"Records": [record(body)]}) == {"batchItemFailures": []}
    (parked,) = dead_letters(aws)
    assert parked["body"] == body and "truncated" not in parked


def test_a_failed_dlq_send_reports_the_record_so_sqs_delivers_it_again(rig, aws):
    def unavailable(body):
        raise TransientError("injected: dead-letter queue unavailable")

    rig.queue.send_dead_letter = unavailable
    response = process_batch(rig.engine, {"Records": [record("not json", "bad-2")]})
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-2"}]}
    assert dead_letters(aws) == []
