"""Callback handles in loom.testing (the in-memory store, the virtual clock), the example
``order_sign_off``, the definition-time rules and the pure decisions of engine/handles.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import workflows  # noqa: F401  (registers the examples)
from engine.callbacks import Action
from engine.errors import WaitEnded, WorkflowDefinitionError
from engine.handles import HandleVerdict, WaitVerdict, check_handle_completion, decide_wait, ended_reason, timed_out
from engine.state import Execution, Handle, HandleStatus, Status
from engine.workflow import Registry, StepContext, build_spec, create_callback, step, wait_for_callbacks
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

pytestmark = pytest.mark.unit


def _requests(ledger: MemoryLedger, eid: str) -> dict[str, str]:
    found = [e for e in ledger.effects(eid).values() if e["kind"] == "sign_off_request"]
    return {e["to"]: e["callback_token"] for e in found}


@pytest.mark.parametrize("order", [("finance", "warehouse"), ("warehouse", "finance")])
def test_order_sign_off_waits_for_both_answers_in_either_order(
    test: WorkflowTest, ledger: MemoryLedger, order: tuple[str, str]
) -> None:
    eid = test.start("order_sign_off", {"order_id": "S-1"})
    ex = test.run(eid)
    assert ex.status.value == "WAITING" and ex.wait is not None and ex.wait.kind.value == "handles"
    tokens = _requests(ledger, eid)
    assert set(tokens) == {"finance", "warehouse"} and tokens["finance"] != tokens["warehouse"]
    answers = {"finance": {"approved": True}, "warehouse": {"dock": "D3"}}
    test.complete_callback(tokens[order[0]], answers[order[0]])
    assert test.run(eid).status.value == "WAITING"  # one still pending
    test.complete_callback(tokens[order[1]], answers[order[1]])
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["dock"] == "D3" and ex.context["finance"] == answers["finance"]


def test_order_sign_off_fails_when_the_warehouse_stops_heartbeating(test: WorkflowTest, ledger: MemoryLedger) -> None:
    eid = test.start("order_sign_off", {"order_id": "S-2"})
    test.run(eid)
    tokens = _requests(ledger, eid)
    test.complete_callback(tokens["finance"], {"approved": True})
    test.advance(5 * 3600)
    test.heartbeat(tokens["warehouse"])  # pushes its 6 h heartbeat deadline
    test.advance(5 * 3600)
    assert test.execution(eid).status.value == "WAITING"
    ex = test.run(eid, skip_waits=True)  # no more heartbeats: 6 h later it fails
    assert ex.status.value == "FAILED" and ex.error is not None and ex.error["type"] == "HandleHeartbeatTimeout"
    assert ex.attempt == 1


def test_a_handle_completed_while_the_creating_workflow_still_runs_is_kept(test: WorkflowTest) -> None:
    """On the virtual clock: completed by the very step that sends it, before the wait."""

    def send(ctx: StepContext) -> dict[str, Any]:
        test.complete_callback(ctx.callback_token("callback_0"), {"instant": True})
        return {}

    reg = Registry()
    reg.add(build_spec("instant", [create_callback(), step(send, name="send"), wait_for_callbacks()]))
    test.deploy(reg)
    eid = test.start("instant", {})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED" and ex.context["callback_0"] == {"instant": True}
    with pytest.raises(WaitEnded):
        test.complete_callback(test.store.get_handle(eid, 0).token, {"other": 1})  # type: ignore[union-attr]


def test_unnamed_handles_get_stable_names_and_a_bare_wait_takes_every_pending_one() -> None:
    spec = build_spec(
        "w",
        [create_callback(), create_callback("x"), wait_for_callbacks(), create_callback(), wait_for_callbacks()],
    )
    names = [s.name for s in spec.steps]
    assert names == ["callback_0", "x", "wait_callbacks_2", "callback_3", "wait_callbacks_4"]
    assert spec.steps[2].handles == ("callback_0", "x") and spec.steps[2].handle_steps == (0, 1)  # type: ignore[union-attr]
    assert spec.steps[4].handles == ("callback_3",)  # type: ignore[union-attr]
    again = build_spec("w", [create_callback(), create_callback("x"), wait_for_callbacks()])
    assert again.steps[0].name == "callback_0"


@pytest.mark.parametrize(
    "steps",
    [
        [wait_for_callbacks("a"), create_callback("a")],  # awaited before it is created
        [create_callback("a"), wait_for_callbacks("a"), wait_for_callbacks("a")],  # awaited twice
        [create_callback("a"), create_callback("a")],  # created twice
        [wait_for_callbacks()],  # nothing to wait for
        [create_callback("a"), wait_for_callbacks("b")],  # unknown
    ],
)
def test_bad_handle_definitions_fail_at_definition_time(steps: list[Any]) -> None:
    with pytest.raises(WorkflowDefinitionError):
        build_spec("bad", steps)


def test_bad_handle_arguments_fail_at_definition_time() -> None:
    for make in (
        lambda: create_callback("has space"),
        lambda: create_callback("a", timeout=-1),
        lambda: wait_for_callbacks("a", "a"),
        lambda: wait_for_callbacks("a", catch="nope"),  # type: ignore[arg-type]
    ):
        with pytest.raises(WorkflowDefinitionError):
            make()


def _handle(**kw: Any) -> Handle:
    return Handle(execution_id="e", step=0, name="a", secret="s" * 24, created_at=0.0, **kw)


def test_completion_verdicts() -> None:
    h = _handle(deadline=100.0)
    ok = h.token_hash

    def verdict(
        handle: Handle | None, token: str, digest: str, action: Action, now: float, **kw: bool
    ) -> HandleVerdict:
        return check_handle_completion(handle, token, digest, action, now, **{"ended": False, "registered": True, **kw})

    assert verdict(None, ok, "d", Action.SUCCEED, 1) is HandleVerdict.UNKNOWN
    assert verdict(h, "0" * 64, "d", Action.SUCCEED, 1) is HandleVerdict.UNKNOWN
    assert verdict(h, ok, "d", Action.SUCCEED, 1) is HandleVerdict.ACCEPT
    assert verdict(h, ok, "d", Action.SUCCEED, 100) is HandleVerdict.LATE
    assert verdict(h, ok, "d", Action.SUCCEED, 1, ended=True) is HandleVerdict.ENDED
    done = _handle(status=HandleStatus.SUCCEEDED, body="d")
    assert verdict(done, ok, "d", Action.SUCCEED, 1, ended=True) is HandleVerdict.REPEAT
    assert verdict(done, ok, "e", Action.SUCCEED, 1) is HandleVerdict.ENDED
    assert verdict(done, ok, "d", Action.HEARTBEAT, 1) is HandleVerdict.ENDED


def test_a_live_handle_of_a_workflow_not_registered_is_refused_and_only_a_live_one() -> None:
    """UNREGISTERED only for a handle a completion could still move: a forged secret still
    learns nothing (UNKNOWN), a repeat stays a repeat, an ended or late one is ENDED/LATE."""
    h = _handle(deadline=100.0)
    ok = h.token_hash
    done = _handle(status=HandleStatus.SUCCEEDED, body="d")
    for action in Action:
        assert (
            check_handle_completion(h, ok, "d", action, 1, ended=False, registered=False) is HandleVerdict.UNREGISTERED
        )
    gone = {"ended": False, "registered": False}
    assert check_handle_completion(h, "0" * 64, "d", Action.SUCCEED, 1, **gone) is HandleVerdict.UNKNOWN
    assert check_handle_completion(done, ok, "d", Action.SUCCEED, 1, **gone) is HandleVerdict.REPEAT
    assert check_handle_completion(done, ok, "e", Action.SUCCEED, 1, **gone) is HandleVerdict.ENDED
    assert check_handle_completion(h, ok, "d", Action.SUCCEED, 100, **gone) is HandleVerdict.LATE
    assert check_handle_completion(h, ok, "d", Action.SUCCEED, 1, ended=True, registered=False) is HandleVerdict.ENDED


def test_an_ended_handle_says_what_ended_it() -> None:
    ex = Execution(
        id="e",
        workflow="w",
        status=Status.WAITING,
        current_step=2,
        version=3,
        input={},
        context={},
        created_at=0.0,
        updated_at=0.0,
    )
    done = _handle(status=HandleStatus.SUCCEEDED, body="d")
    assert ended_reason(ex, done) == "the callback has already ended: callback 'a' was completed already"
    failed = _handle(status=HandleStatus.FAILED, error={"type": "Declined", "message": "card"})
    assert "callback 'a' failed already (Declined: card)" in ended_reason(ex, failed)
    late = _handle(status=HandleStatus.TIMED_OUT, error={"type": "CallbackTimeout", "message": "not in time"})
    assert "callback 'a' timed out (not in time)" in ended_reason(ex, late)
    cancelled = replace(ex, status=Status.CANCELLED)
    assert ended_reason(cancelled, _handle()).endswith("callback 'a' was still pending; execution 'e' is CANCELLED")


def test_wait_decisions() -> None:
    pending = _handle(deadline=50.0, heartbeat_timeout=10.0, heartbeat_deadline=10.0)
    done = _handle(status=HandleStatus.SUCCEEDED, result={})
    failed = _handle(status=HandleStatus.FAILED, error={"type": "X", "message": ""})
    assert decide_wait([done, done], 0).verdict is WaitVerdict.DONE
    assert decide_wait([pending, done], 0) == decide_wait([done, pending], 0)
    assert (
        decide_wait([pending, done], 0).wake_at == 10.0
        and decide_wait([done, pending], 0).verdict is WaitVerdict.PENDING
    )
    assert decide_wait([pending, failed], 20).verdict is WaitVerdict.FAILED  # a failure before a timeout
    assert decide_wait([pending, done], 20).verdict is WaitVerdict.EXPIRE
    assert decide_wait([None], 0).verdict is WaitVerdict.FAILED
    assert decide_wait([_handle(), done], 0).wake_at is None  # no deadline: only a completion moves it
    assert timed_out(pending, 20).error["type"] == "HeartbeatTimeout"  # type: ignore[index]
    assert timed_out(pending, 60).error["type"] == "HeartbeatTimeout"  # type: ignore[index]  # hb came first
    assert timed_out(_handle(deadline=50.0), 60).error["type"] == "CallbackTimeout"  # type: ignore[index]


def test_the_test_reads_a_handles_token_by_name(test: WorkflowTest) -> None:
    """What loom/testing/README.md shows: ``WorkflowTest.callback_token``."""
    eid = test.start("order_sign_off", {"order_id": "S-3"})
    assert test.run(eid).status.value == "WAITING"
    test.complete_callback(test.callback_token(eid, "warehouse"), {"dock": "D3"})
    test.complete_callback(test.callback_token(eid, "finance"), {"approved": True})
    assert test.run(eid).status.value == "COMPLETED"
    with pytest.raises(KeyError):
        test.callback_token(eid, "reservation")


def test_a_redrive_of_a_failed_handles_wait_fails_again_at_once(test: WorkflowTest, ledger: MemoryLedger) -> None:
    """DESIGN.md, "Callback handles" 5: the handle is read again, not created again."""
    eid = test.start("order_sign_off", {"order_id": "S-4"})
    test.run(eid)
    test.fail_callback(test.callback_token(eid, "finance"), "Declined", "over budget")
    assert test.run(eid).error["type"] == "HandleFailed"  # type: ignore[index]
    test.engine.redrive_failed(eid)
    ex = test.run(eid)
    assert ex.status.value == "FAILED" and ex.error is not None and ex.error["type"] == "HandleFailed"
    assert len(_requests(ledger, eid)) == 2  # no new tokens were sent
