"""Step messages, size limits, ids, shards, config and logging."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.config import EngineConfig, shard_of
from engine.error_report import error_info
from engine.errors import InvalidExecutionId, InvalidInput, MalformedMessage, PayloadTooLarge
from engine.limits import (
    DYNAMODB_ITEM_LIMIT,
    ERROR_RESERVE,
    ITEM_OVERHEAD_RESERVE,
    SQS_MESSAGE_LIMIT,
    check_execution_id,
    check_item,
    check_message,
    meta_item_size,
    utf8_len,
)
from engine.messages import StepMessage
from engine.state import Attempt, canonical_json

pytestmark = pytest.mark.unit


def test_message_round_trip_and_guard():
    msg = StepMessage("abc-1", 3, 2, "retry")
    assert StepMessage.decode(msg.encode()) == msg
    assert msg.needs_guard and StepMessage("a", 0, 1, "redrive").needs_guard
    assert not StepMessage("a", 0).needs_guard and not StepMessage("a", 0, 1, "wake").needs_guard
    assert StepMessage.decode(json.dumps({"execution_id": "x", "step": 0})) == StepMessage("x", 0, 1, "step")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("", "not JSON"),
        ("{nope", "not JSON"),
        ("[1]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        (json.dumps({"step": 1}), "execution_id"),
        (json.dumps({"execution_id": "x"}), "step"),
        (json.dumps({"execution_id": "bad id", "step": 0}), "execution id"),
        (json.dumps({"execution_id": 7, "step": 0}), "execution id"),
        (json.dumps({"execution_id": "x", "step": "0"}), "step"),
        (json.dumps({"execution_id": "x", "step": True}), "step"),
        (json.dumps({"execution_id": "x", "step": -1}), "step"),
        (json.dumps({"execution_id": "x", "step": 0, "attempt": 0}), "attempt"),
        (json.dumps({"execution_id": "x", "step": 0, "kind": "boom"}), "kind"),
    ],
)
def test_malformed_bodies_are_malformed_messages(body, fragment):
    with pytest.raises(MalformedMessage) as err:
        StepMessage.decode(body)
    assert fragment in str(err.value)


def test_none_body_is_malformed():
    with pytest.raises(MalformedMessage):
        StepMessage.decode(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["a", "A-b_9", "x" * 128])
def test_valid_ids(good):
    assert check_execution_id(good) == good


@pytest.mark.parametrize("bad", ["", "x" * 129, "a b", "a/b", "é", None, 5, "a\n"])
def test_invalid_ids(bad):
    with pytest.raises(InvalidExecutionId):
        check_execution_id(bad)


def test_item_limit_counts_utf8_bytes_plus_reserve():
    assert utf8_len("é") == 2
    size = meta_item_size("{}", "é")
    assert size == 2 + 2 + ITEM_OVERHEAD_RESERVE + ERROR_RESERVE, "room for the error a FAILED write adds"
    check_item(DYNAMODB_ITEM_LIMIT, "x")
    with pytest.raises(PayloadTooLarge) as err:
        check_item(DYNAMODB_ITEM_LIMIT + 1, "the result")
    assert "the result" in str(err.value) and "400 KB" in str(err.value)
    assert err.value.details == {"size": DYNAMODB_ITEM_LIMIT + 1, "limit": DYNAMODB_ITEM_LIMIT}


def test_message_limit():
    check_message("x" * SQS_MESSAGE_LIMIT)
    with pytest.raises(PayloadTooLarge, match="256 KB"):
        check_message("x" * (SQS_MESSAGE_LIMIT + 1))
    with pytest.raises(PayloadTooLarge):  # bytes, not characters
        check_message("é" * (SQS_MESSAGE_LIMIT // 2 + 1))


def test_shard_of_is_stable_across_processes_and_in_range():
    ids = [f"exec-{i}" for i in range(200)]
    here = [shard_of(i, 16) for i in ids]
    code = f"from engine.config import shard_of; print([shard_of(i, 16) for i in {ids!r}])"
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "123"}
    ).stdout
    assert json.loads(there) == here
    assert all(0 <= s < 16 for s in here) and len(set(here)) == 16
    assert shard_of("abc", 1) == 0


@pytest.mark.parametrize("kwargs", [{"shards": 0}, {"shards": 1001}, {"lease_seconds": 0}, {"max_sqs_delay": 901}])
def test_config_rejects_nonsense(kwargs):
    with pytest.raises(InvalidInput):
        EngineConfig(**kwargs)


def test_canonical_json_is_order_independent_and_refuses_nan():
    assert canonical_json({"b": 1, "a": [1, "é"]}) == canonical_json({"a": [1, "é"], "b": 1}) == '{"a":[1,"é"],"b":1}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_error_info_is_bounded():
    info = error_info(ValueError("x" * 10_000))
    assert info["type"] == "ValueError" and len(info["message"]) <= 1024 and "10000 bytes" in info["message"]


def test_attempt_round_trip():
    att = Attempt(2, 1.5, 2.5, "failed", {"type": "E", "message": "m"}, 4.0)
    assert Attempt.from_dict(json.loads(json.dumps(att.to_dict()))) == att
