"""Callback handles on the real table (moto): create_callback, steps in between, wait_for_callbacks.

Each test names the DESIGN.md failure-table row it proves, where a fault applies.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from engine.errors import CallbackNotFound, MalformedToken, PayloadTooLarge, WaitEnded
from engine.ports import FaultPoint
from engine.state import HandleStatus
from engine.workflow import (
    Registry,
    StepContext,
    build_spec,
    create_callback,
    step,
    wait_for_callbacks,
)
from loom.testing import WorkflowTest

pytestmark = pytest.mark.integration


class Outbox:
    """The outside world: the tokens a step sent, by handle name, and what ran after the wait."""

    def __init__(self) -> None:
        self.sent: dict[str, list[str]] = {}
        self.after: list[dict[str, Any]] = []
        self.caught: list[dict[str, Any]] = []
        # Handles the outside world answers at once, while the sending step still runs.
        self.early: tuple[str, ...] = ()
        self.t: WorkflowTest | None = None

    def send(self, ctx: StepContext) -> dict[str, Any]:
        for name in ("a", "b"):
            self.sent.setdefault(name, []).append(ctx.callback_token(name))
        return {"sent": True}

    def send_and_hear_back(self, ctx: StepContext) -> dict[str, Any]:
        self.send(ctx)
        assert self.t is not None
        for name in self.early:
            self.t.complete_callback(self.token(name), {name: "early"})
        return {"sent": True}

    def then(self, ctx: StepContext) -> dict[str, Any]:
        self.after.append({"a": ctx.data.get("a"), "b": ctx.data.get("b")})
        return {"after": True}

    def catch(self, ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
        self.caught.append(error)
        return {"fallback": error["type"]}

    def token(self, name: str) -> str:
        return self.sent[name][-1]


def registry(out: Outbox) -> Registry:
    reg = Registry()
    send, then = step(out.send, name="send"), step(out.then, name="then")
    reg.add(build_spec("two", [create_callback("a"), create_callback("b"), send, wait_for_callbacks("a", "b"), then]))
    early = step(out.send_and_hear_back, name="send")
    reg.add(build_spec("answered", [create_callback("a"), create_callback("b"), early, wait_for_callbacks(), then]))
    reg.add(
        build_spec(
            "timed",
            [
                create_callback("a", timeout=600),
                create_callback("b", heartbeat_timeout=100),
                send,
                wait_for_callbacks("a", "b", catch=out.catch),
                then,
            ],
        )
    )
    reg.add(build_spec("strict", [create_callback("a"), create_callback("b"), send, wait_for_callbacks(), then]))
    return reg


@pytest.fixture
def out() -> Outbox:
    return Outbox()


@pytest.fixture
def t(out: Outbox) -> Iterator[WorkflowTest]:
    with WorkflowTest(registry(out), backend="moto") as test:
        yield test


def waiting(t: WorkflowTest, workflow: str = "two", eid: str = "e1") -> str:
    t.start(workflow, {}, execution_id=eid)
    ex = t.run(eid)
    assert ex is not None and ex.status.value == "WAITING", ex
    return eid


def test_two_handles_are_pending_at_once_and_complete_in_either_order(t: WorkflowTest, out: Outbox) -> None:
    waiting(t)
    ex = t.execution("e1")
    assert ex.wait is not None and ex.wait.kind.value == "handles" and ex.next_wake_at is None
    assert ex.context["a"] == {"$loom": "callback", "name": "a", "step": 0}
    assert out.token("a") != out.token("b") and out.token("a").split(".")[:3] == ["lcb2", "e1", "0"]
    assert not t.complete_callback(out.token("b"), {"dock": 4}).repeat  # b first: a still pending
    assert t.run("e1").status.value == "WAITING"  # type: ignore[union-attr]
    t.complete_callback(out.token("a"), {"approved": True})  # the last one settles the wait
    ex = t.run("e1")
    assert ex is not None and ex.status.value == "COMPLETED"
    assert out.after == [{"a": {"approved": True}, "b": {"dock": 4}}]
    wait = next(r for r in t.history("e1") if r.name == "wait_callbacks_3")
    assert wait.result == {"a": {"approved": True}, "b": {"dock": 4}}


@pytest.mark.parametrize("early", [("a", "b"), ("b", "a"), ("b",), ()])
def test_completions_before_the_wait_starts_are_kept_on_the_handle(
    t: WorkflowTest, out: Outbox, early: tuple[str, ...]
) -> None:
    """Failure table: 'a handle completed before anyone waits for it'."""
    out.early, out.t = early, t
    t.start("answered", {}, execution_id="e1")
    ex = t.run("e1")
    assert ex is not None
    if len(early) < 2:
        assert ex.status.value == "WAITING"
        for name in ("a", "b"):
            if name not in early:
                t.complete_callback(out.token(name), {name: "late"})
        ex = t.run("e1")
    assert ex is not None and ex.status.value == "COMPLETED"
    assert out.after == [{n: {n: "early" if n in early else "late"} for n in ("a", "b")}]


def test_the_token_is_in_no_context_history_or_log(t: WorkflowTest, out: Outbox, capsys: Any) -> None:
    waiting(t)
    t.complete_callback(out.token("a"), {})
    t.complete_callback(out.token("b"), {})
    t.run("e1")
    secrets = [tok.rsplit(".", 1)[1] for tok in (out.token("a"), out.token("b"))]
    shown = json.dumps(t.execution("e1").context) + json.dumps([asdict(r) for r in t.history("e1")], default=str)
    shown += capsys.readouterr().out
    assert not any(s in shown for s in secrets)


def test_a_handle_timeout_fails_the_wait_for_good_and_catch_runs(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'a handle's timeout passes while the wait waits'."""
    waiting(t, "timed")
    for _ in range(6):  # heartbeats keep b alive; a's own timeout still passes
        t.clock.advance(90)
        t.heartbeat(out.token("b"))
        t.engine.sweep()
    assert t.execution("e1").status.value == "WAITING"
    t.clock.advance(60)  # 600 s after the creation
    t.heartbeat(out.token("b"))
    t.engine.sweep()
    ex = t.run("e1")
    assert ex is not None and ex.status.value == "COMPLETED" and ex.context["fallback"] == "HandleTimeout"
    # Caught: the handles' markers stay where their results would have landed.
    assert [e["type"] for e in out.caught] == ["HandleTimeout"] and out.after == [
        {"a": ex.context["a"], "b": ex.context["b"]}
    ]
    with pytest.raises(WaitEnded):
        t.complete_callback(out.token("a"), {"too": "late"})
    handle = t.store.get_handle("e1", 0)
    assert handle is not None and handle.status is HandleStatus.TIMED_OUT


def test_a_missed_heartbeat_fails_the_wait(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'no heartbeat for a handle within its heartbeat timeout'."""
    waiting(t, "timed")
    t.clock.advance(101)
    with pytest.raises(WaitEnded):
        t.heartbeat(out.token("b"))  # past its deadline, before the sweeper: refused all the same
    t.engine.sweep()
    ex = t.run("e1")
    assert ex is not None and ex.context["fallback"] == "HandleHeartbeatTimeout"


def test_a_failed_handle_fails_the_wait_with_its_error(t: WorkflowTest, out: Outbox) -> None:
    waiting(t, "strict")
    t.fail_callback(out.token("a"), "Rejected", "finance says no")
    ex = t.run("e1")
    assert ex is not None and ex.status.value == "FAILED" and ex.error is not None
    assert ex.error["type"] == "HandleFailed" and "finance says no" in ex.error["message"]
    assert ex.attempt == 1  # non-retryable: the same handle would be read again
    with pytest.raises(WaitEnded):
        t.complete_callback(out.token("b"), {"ok": True})  # its execution has ended


def test_a_duplicate_completion_is_a_repeat_and_a_different_one_is_refused(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'the same handle completed twice'."""
    waiting(t)
    assert not t.complete_callback(out.token("a"), {"v": 1}).repeat
    assert t.complete_callback(out.token("a"), {"v": 1}).repeat  # 200, nothing changes
    with pytest.raises(WaitEnded):
        t.complete_callback(out.token("a"), {"v": 2})
    with pytest.raises(WaitEnded):
        t.fail_callback(out.token("a"))
    handle = t.store.get_handle("e1", 0)
    assert handle is not None and handle.result == {"v": 1} and handle.version == 2


def test_forged_unknown_and_malformed_tokens_are_refused_and_write_nothing(t: WorkflowTest, out: Outbox) -> None:
    waiting(t)
    good = out.token("a")
    prefix, eid, step_, secret = good.split(".")
    forged = f"{prefix}.{eid}.{step_}.{'A' * len(secret)}"
    for token in (forged, f"lcb2.e1.2.{secret}", f"lcb2.nobody.0.{secret}"):
        with pytest.raises(CallbackNotFound):
            t.complete_callback(token, {"x": 1})
    with pytest.raises(MalformedToken):
        t.complete_callback("lcb2.e1.0.short", {})
    handle = t.store.get_handle("e1", 0)
    assert handle is not None and handle.status is HandleStatus.PENDING and handle.version == 1


def test_a_result_too_large_is_refused_with_413(t: WorkflowTest, out: Outbox) -> None:
    waiting(t)
    with pytest.raises(PayloadTooLarge):
        t.complete_callback(out.token("a"), {"blob": "x" * 500_000})
    handle = t.store.get_handle("e1", 0)
    assert handle is not None and handle.pending


def test_a_crash_between_creation_and_commit_keeps_one_token(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'the worker dies after keeping a handle, before committing its step'."""
    began = t.clock.now()
    t.start("two", {}, execution_id="e1")
    t.crash(FaultPoint.AFTER_STEP, step="a")
    waiting_after = t.run("e1")  # the worker dies; the redelivery creates it again: the first stands
    assert waiting_after is not None and waiting_after.status.value == "WAITING" and t.deaths == 1
    kept = t.store.get_handle("e1", 0)
    assert kept is not None and kept.created_at == began and kept.version == 1
    [record] = [r for r in t.history("e1") if r.name == "a"]
    assert record.attempts[0].finished_at > began  # committed by the redelivery, after the visibility timeout
    assert (record.attempts[0].detail or {})["token"] == kept.token_hash and out.sent["a"] == [kept.token]
    t.complete_callback(kept.token, {"once": True})
    t.complete_callback(out.token("b"), {})
    assert t.run("e1").status.value == "COMPLETED"  # type: ignore[union-attr]


def test_a_retry_of_the_sending_step_sends_the_same_token(t: WorkflowTest, out: Outbox) -> None:
    t.start("two", {}, execution_id="e1")
    t.crash(FaultPoint.AFTER_STEP, step="send")  # the step ran (sent) and died before its commit
    t.run("e1")
    assert t.deaths == 1
    assert len(out.sent["a"]) == 2 and len(set(out.sent["a"])) == 1


def test_racing_completions_of_the_two_handles_settle_the_wait_once(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'the last two handles are completed at the same time'. b's completion
    lands while a's is between its handle write and its settle: one of them advances it."""
    waiting(t)
    store = t.engine.store
    real = store.put_handle
    calls: list[int] = []

    def racing(handle: Any, *, expected_version: int) -> None:
        real(handle, expected_version=expected_version)
        calls.append(handle.step)
        if len(calls) == 1:
            t.complete_callback(out.token("b"), {"b": 2})

    store.put_handle = racing  # type: ignore[method-assign]
    try:
        t.complete_callback(out.token("a"), {"a": 1})
    finally:
        store.put_handle = real  # type: ignore[method-assign]
    ex = t.run("e1")
    assert ex is not None and ex.status.value == "COMPLETED" and len(out.after) == 1
    [wait] = [r for r in t.history("e1") if r.name == "wait_callbacks_3"]
    assert [a.outcome.value for a in wait.attempts] == ["completed"]


def test_a_completion_for_a_blocked_execution_is_kept_and_applies_on_resume(t: WorkflowTest, out: Outbox) -> None:
    """Failure table: 'a handle completed while its workflow's definition is not deployed'."""
    waiting(t)
    base = t.engine.registry
    changed = Registry()
    changed.add(build_spec("two", [create_callback("a"), wait_for_callbacks(), step(out.then, name="then")]))
    t.engine.registry = changed
    assert t.complete_callback(out.token("a"), {"a": 1}).kept  # 202: kept on the handle; it blocks
    assert t.complete_callback(out.token("b"), {"b": 2}).kept
    assert t.execution("e1").status.value == "BLOCKED"
    t.engine.registry = base
    t.advance(t.config.blocked_recheck_seconds)
    ex = t.run("e1")
    assert ex is not None and ex.status.value == "COMPLETED" and out.after == [{"a": {"a": 1}, "b": {"b": 2}}]
