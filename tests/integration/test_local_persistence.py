"""The embedded emulator's data survives a restart: saved from moto's backends, restored with
public APIs. This also pins the moto internals the capture reads (see loom.local.emulator.snapshot)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from loom.local.emulator import snapshot
from loom.local.emulator.backends import EmbeddedEmulator
from loom.local.stack import _EndpointSession
from loom.template import create_resources

pytestmark = pytest.mark.integration

REGION = "us-east-1"


def _boot(state_file: Path) -> tuple[EmbeddedEmulator, _EndpointSession, dict[str, Any]]:
    emulator = EmbeddedEmulator(port=0, state_file=state_file).start()
    session = _EndpointSession(emulator.endpoint_url, REGION, keys=emulator.keys)
    refs = create_resources(session)
    return emulator, session, refs


def _items(session: _EndpointSession, table: str) -> list[dict[str, Any]]:
    return session.client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]


def test_items_and_messages_survive_a_restart(tmp_path):
    state_file = tmp_path / snapshot.FILENAME
    emulator, session, refs = _boot(state_file)
    try:
        assert snapshot.read(state_file) is None
        emulator.persist()
        ddb, sqs = session.client("dynamodb"), session.client("sqs")
        item = {
            "PK": {"S": "EXEC#e-1"},
            "SK": {"S": "META"},
            "n": {"N": "42"},
            "blob": {"B": b"\x00\xffbytes"},
            "doc": {"M": {"inner": {"L": [{"S": "a"}, {"B": b"\x01"}, {"NULL": True}]}}},
        }
        ddb.put_item(TableName=refs["Table"], Item=item)
        for i in range(12):  # more than one SendMessageBatch
            sqs.send_message(QueueUrl=refs["StepQueue"], MessageBody=json.dumps({"n": i}))
        sqs.send_message(QueueUrl=refs["StepQueue"], MessageBody="later", DelaySeconds=600)
        sqs.send_message(QueueUrl=refs["DeadLetterQueue"], MessageBody="parked")
        in_flight = sqs.receive_message(QueueUrl=refs["StepQueue"], MaxNumberOfMessages=1, VisibilityTimeout=300)
        assert in_flight["Messages"]
    finally:
        emulator.stop()  # stdin closes: the last save
    saved = snapshot.read(state_file)
    assert saved is not None and len(saved["tables"][refs["Table"]]) == 1

    emulator, session, refs = _boot(state_file)
    try:
        summary = snapshot.restore(session, saved)
        assert summary == {"items": 1, "messages": 14, "skipped": []}
        assert _items(session, refs["Table"]) == [item]
        sqs = session.client("sqs")
        bodies = []
        for _ in range(5):
            got = sqs.receive_message(QueueUrl=refs["StepQueue"], MaxNumberOfMessages=10, VisibilityTimeout=60)
            bodies += [m["Body"] for m in got.get("Messages", [])]
        # The in-flight one is back (as after a visibility timeout); the delayed one keeps its delay.
        assert sorted(bodies) == sorted(json.dumps({"n": i}) for i in range(12))
        attrs = sqs.get_queue_attributes(QueueUrl=refs["StepQueue"], AttributeNames=["All"])["Attributes"]
        assert attrs["ApproximateNumberOfMessagesDelayed"] == "1"
        parked = sqs.receive_message(QueueUrl=refs["DeadLetterQueue"])["Messages"]
        assert [m["Body"] for m in parked] == ["parked"]
    finally:
        emulator.stop()


def test_the_data_is_saved_while_running_not_only_at_the_end(tmp_path):
    # Whatever kills the whole group (a reboot, kill -9 of everything) loses at most a couple of seconds.
    state_file = tmp_path / snapshot.FILENAME
    emulator, session, refs = _boot(state_file)
    try:
        emulator.persist()
        session.client("dynamodb").put_item(TableName=refs["Table"], Item={"PK": {"S": "p"}, "SK": {"S": "s"}})
        deadline = time.monotonic() + 15
        saved = None
        while time.monotonic() < deadline:
            saved = snapshot.read(state_file)
            if saved and saved["tables"].get(refs["Table"]):
                break
            time.sleep(0.2)
        assert saved and saved["tables"][refs["Table"]] == [{"PK": {"S": "p"}, "SK": {"S": "s"}}]
    finally:
        emulator.stop()


def test_nothing_is_saved_before_persist_so_an_empty_start_cannot_overwrite_the_saved_state(tmp_path):
    state_file = tmp_path / snapshot.FILENAME
    kept = {"format": snapshot.FORMAT, "taken_at": 1.0, "tables": {"loom-dev": [{"pk": {"S": "x"}}]}, "queues": {}}
    snapshot.write(state_file, kept)
    emulator, _session, _refs = _boot(state_file)
    time.sleep(2.5)  # longer than the save interval, with the tables just created
    emulator.stop()
    assert json.loads(state_file.read_text()) == kept


def test_an_unreadable_state_file_is_refused_not_overwritten(tmp_path):
    state_file = tmp_path / snapshot.FILENAME
    state_file.write_text("{not json")
    with pytest.raises(snapshot.SnapshotError, match="--fresh"):
        snapshot.read(state_file)
    assert state_file.read_text() == "{not json"


def test_saved_tables_the_template_no_longer_has_are_kept_aside_not_dropped(tmp_path):
    from loom.local.stack import LocalStack, StackOptions

    saved = {
        "format": snapshot.FORMAT,
        "taken_at": 1.0,
        "tables": {"loom-dev": [{"PK": {"S": "EXEC#kept"}, "SK": {"S": "META"}}], "loom-old": [{"PK": {"S": "x"}}]},
        "queues": {"loom-old-steps": [{"body": "b"}]},
    }
    snapshot.write(tmp_path / snapshot.FILENAME, saved)
    options = StackOptions(
        port=0, api_port=0, workers=1, api_workers=1, state_dir=tmp_path, persist=True, sweeper=False
    )
    with LocalStack(options) as stack:
        assert stack.restored is not None
        assert stack.restored["items"] == 1 and stack.restored["skipped"] == ["loom-old", "loom-old-steps"]
        assert json.loads(Path(stack.restored["backup"]).read_text()) == saved
        items = stack.client("dynamodb").scan(TableName="loom-dev")["Items"]
        assert items == [{"PK": {"S": "EXEC#kept"}, "SK": {"S": "META"}}]
