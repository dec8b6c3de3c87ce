"""Open doors, closed: forged list cursors, chaos knobs in a default deployment, the input limit
as callers meet it. Through the handlers, configured only by template.yaml, against moto."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from freezegun import freeze_time

from engine.adapters import cursor as cursors
from engine.adapters.dynamodb import DUE_CURSOR, LIST_CURSOR, DynamoStore
from engine.errors import PayloadTooLarge
from engine.limits import DYNAMODB_ITEM_LIMIT, INPUT, MAX_INPUT_BYTES, check_item, meta_item_size
from engine.state import Execution, Status, canonical_json
from functions import wiring
from functions.settings import Settings
from tests.integration.api_support import Functions, sqs_event

pytestmark = pytest.mark.integration


def start(fn: Functions, execution_id: str, input: Any, workflow: str = "pipeline") -> tuple[int, Any]:
    return fn.api("POST", "/executions", {"workflow": workflow, "input": input, "execution_id": execution_id})


def refused_400(fn: Functions, cursor: str) -> str:
    status, body = fn.api("GET", f"/executions?limit=1&cursor={cursor}")
    assert (status, body["error"]["code"]) == (400, "invalid_input"), body
    message = body["error"]["message"]
    assert fn.refs["Table"] not in message and "GSI" not in message
    return message


# ------------------------------------------------------------------ list cursors


@pytest.fixture
def listed(fn: Functions) -> dict[str, Any]:
    """Three executions, the first page's cursor and the stack's cursor key."""
    for i in range(3):
        with freeze_time(f"2026-01-01T00:00:0{i}Z"):
            assert start(fn, f"e{i}", {"i": i})[0] == 201
    status, page = fn.api("GET", "/executions?limit=1")
    assert status == 200 and page["next_cursor"]
    return {"cursor": page["next_cursor"], "secret": _secret(fn)}


def _secret(fn: Functions) -> bytes:
    fn.use("ControlPlaneFunction")
    key = wiring.cursor_key(Settings.from_env())
    assert key is not None, "the template gives the control plane a cursor secret"
    return key


@pytest.fixture
def no_queries(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused cursor must never reach DynamoDB (where it could fail with names, or slowly)."""
    fn.use("ControlPlaneFunction")
    client = wiring.engine(Settings.from_env()).store._db

    def query(**kwargs: Any) -> Any:
        raise AssertionError(f"a query ran with ExclusiveStartKey={kwargs.get('ExclusiveStartKey')}")

    monkeypatch.setattr(client, "query", query)


def test_the_cursor_pages_across_instances_of_the_control_plane(fn: Functions, listed: dict[str, Any]) -> None:
    wiring.reset()  # a cold start: another instance, same stack secret
    status, page = fn.api("GET", f"/executions?limit=1&cursor={listed['cursor']}")
    assert status == 200 and [e["id"] for e in page["executions"]] == ["e1"]


def test_a_tampered_cursor_answers_400(fn: Functions, listed: dict[str, Any], no_queries: None) -> None:
    body, tag = listed["cursor"].split(".")
    key = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    key["PK"] = {"S": "EXEC#e2"}
    forged = base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")
    refused_400(fn, f"{forged}.{tag}")


def test_a_forged_cursor_with_valid_json_answers_400(fn: Functions, listed: dict[str, Any], no_queries: None) -> None:
    good_key = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "#META"}, "GSI2PK": {"S": "EXECUTIONS"}, "GSI2SK": {"S": "0"}}
    unsigned = base64.urlsafe_b64encode(json.dumps(good_key).encode()).decode()
    refused_400(fn, unsigned)  # well-formed, as today's cursors were: unsigned
    refused_400(fn, cursors.encode(cursors.derive_key("another stack"), LIST_CURSOR, good_key))


def test_a_cursor_of_the_wrong_types_answers_400(fn: Functions, listed: dict[str, Any], no_queries: None) -> None:
    # Today this reached DynamoDB: a ValidationException answered 503 naming the table and index.
    wrong = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "#META"}, "GSI2PK": {"S": "EXECUTIONS"}, "GSI2SK": {"N": "1"}}
    refused_400(fn, base64.urlsafe_b64encode(json.dumps(wrong).encode()).decode())
    # Even signed with the stack's own key, a key that does not fit the index is refused.
    refused_400(fn, cursors.encode(listed["secret"], LIST_CURSOR, wrong))


def test_a_cursor_from_the_due_index_answers_400(fn: Functions, listed: dict[str, Any], no_queries: None) -> None:
    due_key = {"PK": {"S": "EXEC#e1"}, "SK": {"S": "#META"}, "GSI1PK": {"S": "DUE#0"}, "GSI1SK": {"N": "1"}}
    refused_400(fn, cursors.encode(listed["secret"], DUE_CURSOR, due_key))


@pytest.mark.parametrize("cut", [1, 10, 44])
def test_a_truncated_cursor_answers_400(fn: Functions, listed: dict[str, Any], no_queries: None, cut: int) -> None:
    refused_400(fn, listed["cursor"][:-cut])


# ------------------------------------------------------------------ chaos knobs


class Crashed(BaseException):
    """Stands for os._exit: the worker process would be gone."""


@pytest.fixture
def chaos_spies(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    from workflows import examples

    seen: dict[str, list[Any]] = {"exit": [], "sleep": []}

    def exit_(code: int) -> None:
        seen["exit"].append(code)
        raise Crashed(code)

    monkeypatch.setattr(examples.os, "_exit", exit_)
    monkeypatch.setattr(examples.time, "sleep", lambda s: seen["sleep"].append(s))
    return seen


KNOBS = {"chaos": {"crash": {"stage_0": "always"}, "hold": {"stage_0": 600}}}


def test_crash_and_hold_knobs_do_nothing_in_the_default_deployment(
    fn: Functions, chaos_spies: dict[str, list[Any]]
) -> None:
    assert start(fn, "knobs", KNOBS)[0] == 201
    fn.drain()
    assert chaos_spies == {"exit": [], "sleep": []}
    assert fn.api("GET", "/executions/knobs")[1]["status"] == "COMPLETED"


def test_the_chaos_switch_turns_the_knobs_on(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch, chaos_spies: dict[str, list[Any]]
) -> None:
    wiring.reset()
    fn = Functions(aws, monkeypatch, LOOM_CHAOS_CRASH_AFTER_CHECKPOINT="on")
    try:
        assert start(fn, "knobs", KNOBS)[0] == 201
        with pytest.raises(Crashed):
            fn.worker(sqs_event(fn.receive(), fn.refs["StepQueue.Arn"]))
        assert chaos_spies == {"exit": [137], "sleep": [600.0]}
    finally:
        wiring.reset()


# ------------------------------------------------------------------ the input limit


def blob(size: int) -> dict[str, str]:
    """An input whose canonical JSON is exactly ``size`` bytes."""
    value = {"blob": "x" * (size - len(canonical_json({"blob": ""})))}
    assert len(canonical_json(value).encode()) == size
    return value


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it (names plus values), measured by moto's own code."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    return sum(len(name.encode()) + DynamoType(value).size() for name, value in item.items())


def test_the_largest_input_fits_one_item_and_one_byte_more_does_not() -> None:
    assert MAX_INPUT_BYTES == 201_728  # (409,600 - 2,048 reserve - 4,096 error reserve) / 2: the input is stored twice
    at_max = canonical_json(blob(MAX_INPUT_BYTES))
    check_item(meta_item_size(at_max, at_max), INPUT)  # accepted
    over = canonical_json(blob(MAX_INPUT_BYTES + 1))
    with pytest.raises(PayloadTooLarge, match="the input is 201,729 bytes of JSON; the largest input is 201,728"):
        check_item(meta_item_size(over, over), INPUT)
    # The item the store writes for the largest input is within AWS's 409,600 bytes, with every
    # attribute the engine sets (an error and wake times included). Moto refuses items over
    # 405,000 bytes, which is why the API test below stays under that.
    ex = Execution(
        id="i" * 128,
        workflow="w" * 64,
        status=Status.RUNNING,
        current_step=999,
        version=10**9,
        input=json.loads(at_max),
        context=json.loads(at_max),
        created_at=1.7e9,
        updated_at=1.7e9,
        next_wake_at=1.7e9,
        ready_at=1.7e9,
        attempt_started_at=1.7e9,
        error={"type": "E" * 100, "message": "m" * 1024, "traceback": [{"file": "f" * 40, "line": 1}] * 40},
    )
    size = item_bytes(DynamoStore(None, "t", 4)._item(ex))
    assert 404_000 < size <= DYNAMODB_ITEM_LIMIT, "the largest input still fails with a full-sized error"


def test_an_input_under_the_largest_is_accepted_and_one_over_is_refused_by_loom(fn: Functions) -> None:
    status, body = start(fn, "under-max", blob(200_000))  # under moto's 405,000-byte item too
    assert status == 201 and len(body["input"]["blob"]) > 199_000

    status, body = start(fn, "over-max", blob(MAX_INPUT_BYTES + 1))
    assert (status, body["error"]["code"]) == (413, "payload_too_large")
    message = body["error"]["message"]
    assert "201,729 bytes" in message and "largest input is 201,728 bytes" in message
    assert fn.api("GET", "/executions/over-max")[0] == 404


@pytest.mark.parametrize("size", [300 * 1024, DYNAMODB_ITEM_LIMIT + 1, 600_000])
def test_inputs_past_the_item_limit_name_their_own_size(fn: Functions, size: int) -> None:
    # Sizes past AWS's 409,600 (and moto's 405,000): only Loom's check can be what refuses them.
    before = fn.counts()
    status, body = start(fn, "big", blob(size))
    assert (status, body["error"]["code"]) == (413, "payload_too_large")
    assert f"the input is {size:,} bytes" in body["error"]["message"]
    assert "largest input is 201,728 bytes" in body["error"]["message"]
    assert fn.counts() == before


def test_due_pages_resume_and_a_cursor_of_another_shard_is_refused(aws: dict[str, Any]) -> None:
    from engine.errors import InvalidInput

    store = DynamoStore(aws["dynamodb"], aws["Table"], 1, cursor_key=cursors.derive_key("s"))
    for i in range(3):
        store.create_execution(
            Execution(
                id=f"d{i}",
                workflow="pipeline",
                status=Status.SLEEPING,
                current_step=0,
                version=1,
                input={},
                context={},
                created_at=1.0,
                updated_at=1.0,
                next_wake_at=10.0 + i,
            )
        )
    seen, cursor = [], None
    for _ in range(4):
        ids, cursor = store.due(0, 100.0, 1, cursor)
        seen += ids
        if cursor is None:
            break
    assert sorted(seen) == ["d0", "d1", "d2"]
    _, first = store.due(0, 100.0, 1, None)
    assert first is not None
    with pytest.raises(InvalidInput, match="cursor is not one this API returned"):
        store.due(1, 100.0, 1, first)
    with pytest.raises(InvalidInput):
        DynamoStore(aws["dynamodb"], aws["Table"], 1).due(0, 100.0, 1, first)  # another key


def test_the_guide_states_the_same_maximum() -> None:
    from loom.template import ROOT

    page = ROOT / "docs" / "guide" / "workflows.md"
    assert f"at most **{MAX_INPUT_BYTES:,} bytes** of JSON" in page.read_text()
