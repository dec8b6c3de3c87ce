"""Issue #24 against moto: a deploy that changes a workflow blocks its in-flight executions
(through the real handlers and DynamoDB), the API shows it, and migrate moves them on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import Registry, callbacks, step, workflow
from engine.errors import CompensationNotDeployed, ExecutionBlocked, WaitEnded
from engine.messages import StepMessage
from engine.state import Status, StepStatus
from engine.workflow import child, wait_for_callback
from functions import wiring
from loom.testing import WorkflowTest
from tests.integration.api_support import Functions, call

pytestmark = pytest.mark.integration

RAN: list[str] = []


def steps(*names: str) -> list[Any]:
    def make(name: str) -> Any:
        def fn(ctx: Any) -> dict[str, Any]:
            RAN.append(name)
            return {name: True}

        fn.__name__ = name
        return fn

    return [make(n) for n in names]


def versions(*shapes: tuple[str, ...]) -> Registry:
    reg = Registry()
    for i, names in enumerate(shapes, start=1):
        workflow("shop", registry=reg, version=i)(type("Shop", (), {"steps": steps(*names)}))
    return reg


def deploy(fn: Functions, monkeypatch: pytest.MonkeyPatch, reg: Registry) -> None:
    """A deploy: new function processes with these workflows (the wiring builds its engine anew)."""
    wiring.reset()
    monkeypatch.setattr(wiring, "default_registry", reg)


TOKENS: list[str] = []


def submit(ctx: Any, token: str) -> None:
    TOKENS.append(token)


def approvals(*shapes: tuple[str, ...]) -> Registry:
    """``shop`` versions whose step "approval" waits for a callback (an hour) and whose "reserve"
    has an undo: a saga, so that a cancel with compensate has something to undo."""
    reg = Registry()
    for i, names in enumerate(shapes, start=1):
        made = {s.__name__: s for s in steps(*names)}
        chain: list[Any] = []
        for name in names:
            if name == "approval":
                chain.append(wait_for_callback("approval", submit=submit, timeout=3600))
            elif name == "reserve":
                chain.append(step(made[name], compensate=lambda ctx: {"released": True}))
            else:
                chain.append(made[name])
        workflow("shop", registry=reg, version=i)(type("Shop", (), {"steps": chain}))
    return reg


OLD, NEW = ("reserve", "approval", "charge"), ("fraud_check", "reserve", "approval", "charge")


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    RAN.clear()
    TOKENS.clear()
    yield


def test_a_deploy_blocks_the_queued_execution_and_the_api_shows_it_and_migrate_moves_it(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, versions(("reserve", "charge")))
    status, body = fn.api("POST", "/executions", {"workflow": "shop", "input": {}, "execution_id": "v-1"})
    assert status == 201 and body["workflow_version"] == 1 and len(body["fingerprint"]) == 64
    # Version 1 replaced by a version 2 that checks fraud first, before the worker took the message.
    v2_only = Registry()
    workflow("shop", registry=v2_only, version=2)(
        type("Shop", (), {"steps": steps("fraud_check", "reserve", "charge")})
    )
    deploy(fn, monkeypatch, v2_only)
    fn.drain()
    assert RAN == [], "no step of either shape ran at index 0"
    status, body = fn.api("GET", "/executions/v-1")
    assert status == 200 and body["status"] == "BLOCKED" and body["blocked"]["reason"] == "definition_changed"
    assert body["state"]["kind"] == "blocked" and body.get("current_step_name") is None
    status, listed = fn.api("GET", "/workflows")
    (shop,) = [w for w in listed["workflows"] if w["name"] == "shop"]
    assert [(v["version"], v["registered"], v["open"]) for v in shop["versions"]] == [(2, True, 0), (1, False, 1)]

    status, refused = fn.api("POST", "/executions/v-1/migrate", {"map": {"reserve": "nope"}, "at": "reserve"})
    assert status == 400 and refused["error"]["code"] == "invalid_input"
    status, moved = fn.api("POST", "/executions/v-1/migrate", {"map": {}, "at": "reserve"})
    assert status == 200 and moved["status"] == "RUNNING" and moved["current_step_name"] == "reserve"
    fn.drain()
    status, done = fn.api("GET", "/executions/v-1")
    assert done["status"] == "COMPLETED" and RAN == ["reserve", "charge"], "fraud_check, before reserve, is skipped"
    status, again = fn.api("POST", "/executions/v-1/migrate", {"map": {}})
    assert status == 409 and again["error"]["code"] == "not_blocked"


def test_on_dynamodb_a_blocked_execution_resumes_when_its_version_is_deployed_again() -> None:
    old, new = ("reserve", "charge", "ship"), ("reserve", "ship")
    with WorkflowTest(backend="moto") as test:
        test.deploy(versions(old))
        eid = test.start("shop")
        test.deploy(versions(new))  # version 1 is now a removed step shorter
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.BLOCKED and RAN == []
        assert test.store.get_execution(eid) == ex, "fingerprint, version and blocked survive the round trip"
        assert test.advance(test.config.blocked_recheck_seconds).blocked == 1
        test.deploy(versions(old, new))  # both side by side: version 1 drains, new starts take 2
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and list(old) == RAN
        fresh = test.run(test.start("shop"))
        assert fresh is not None and fresh.workflow_version == 2 and [*old, *new] == RAN


def test_a_callback_completion_while_blocked_is_kept_and_applies_once_on_resume() -> None:
    with WorkflowTest(backend="moto") as test:
        test.deploy(approvals(OLD))
        eid = test.start("shop")
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.WAITING and RAN == ["reserve"]
        test.deploy(approvals(NEW))
        # The wait's deadline passes on the new shape: its timeout cannot be recorded, it blocks.
        assert test.advance(3600).blocked == 1
        assert (test.execution(eid).blocked or {}).get("from") == "WAITING"

        done = test.complete_callback(TOKENS[-1], {"approved": True})
        assert done.kept and not done.repeat, "accepted (202): committed, applied on resume"
        again = test.complete_callback(TOKENS[-1], {"approved": True})
        assert again.kept and again.repeat
        with pytest.raises(WaitEnded):
            test.complete_callback(TOKENS[-1], {"approved": False})  # another body: the first won
        with pytest.raises(ExecutionBlocked) as refused:
            test.fail_callback(TOKENS[-1])
        assert refused.value.details["retry_after"] == test.config.blocked_recheck_seconds
        blocked = test.execution(eid)
        assert blocked.status is Status.BLOCKED and blocked.current_step == 1 and RAN == ["reserve"]
        [record] = [r for r in test.history(eid) if r.name == "approval"]
        assert record.status is StepStatus.COMPLETED and record.result == {"approved": True}

        test.deploy(approvals(OLD, NEW))
        report = test.advance(test.config.blocked_recheck_seconds)
        assert report.resumed == 1, "resumed, and the kept completion moved it on in the same sweep"
        done_ex = test.run(eid)
        assert done_ex is not None and done_ex.status is Status.COMPLETED
        assert done_ex.context["approved"] is True and RAN == ["reserve", "charge"], "the wait's step once"
        [record] = [r for r in test.history(eid) if r.name == "approval"]
        assert [a.outcome.value for a in record.attempts] == ["completed"], "not timed out on resume"
        assert test.complete_callback(TOKENS[-1], {"approved": True}).repeat, "a late repeat: 200, nothing moves"


def test_a_kept_completion_is_rolled_forward_by_the_next_sweep_if_the_resuming_one_dies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with WorkflowTest(backend="moto") as test:
        test.deploy(approvals(OLD))
        eid = test.start("shop")
        test.run(eid)
        test.deploy(approvals(NEW))
        assert test.complete_callback(TOKENS[-1], {"approved": True}).kept  # the completion blocks it
        assert test.execution(eid).status is Status.BLOCKED
        test.deploy(approvals(OLD))
        monkeypatch.setattr(callbacks, "finish_kept", lambda parts, execution_id: False)  # died after the resume
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        resumed = test.execution(eid)
        assert resumed.status is Status.WAITING and resumed.next_wake_at == test.clock.now(), "due at once"
        monkeypatch.undo()
        test.advance(1)  # the next sweep: waits.expire finds the wait committed and rolls it forward
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and RAN == ["reserve", "charge"]
        [record] = [r for r in test.history(eid) if r.name == "approval"]
        assert [a.outcome.value for a in record.attempts] == ["completed"], "rolled forward, not timed out"


def test_while_blocked_the_api_keeps_a_success_refuses_a_failure_and_a_compensating_cancel_says_why(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, approvals(OLD))
    status, _ = fn.api("POST", "/executions", {"workflow": "shop", "input": {}, "execution_id": "v-cb"})
    assert status == 201
    fn.drain()
    deploy(fn, monkeypatch, approvals(NEW))
    before = fn.counts()
    status, answer, headers = call("POST", f"/callbacks/{TOKENS[-1]}/fail", {"error": {"type": "No", "message": ""}})
    assert status == 409 and answer["error"]["code"] == "execution_blocked" and headers["Retry-After"] == "300"
    assert "send it again once it resumes" in answer["error"]["message"]
    status, body = fn.api("GET", "/executions/v-cb")
    assert body["status"] == "BLOCKED" and fn.counts()["items"] == before["items"], "blocked, nothing recorded"

    status, refused = fn.api("POST", "/executions/v-cb/cancel", {"compensate": True})
    assert status == 409 and refused["error"]["code"] == "compensation_not_deployed"
    message = refused["error"]["message"]
    assert "compensations belong to the definition it started on" in message and "version 1" in message
    assert "Deploy that version again" in message and "migrate" in message and "without compensate" in message
    assert fn.api("GET", "/executions/v-cb")[1]["status"] == "BLOCKED", "the refusal wrote nothing"

    status, kept = fn.api("POST", f"/callbacks/{TOKENS[-1]}/succeed", {"result": {"approved": True}})
    assert status == 202 and kept["kept"] is True and kept["repeat"] is False
    status, cancelled = fn.api("POST", "/executions/v-cb/cancel", {})
    assert status == 200 and cancelled["status"] == "CANCELLED", "a plain cancel still ends it"
    assert RAN == ["reserve"]


def test_on_dynamodb_a_compensating_cancel_of_a_blocked_execution_is_refused_until_its_version_is_back() -> None:
    with WorkflowTest(backend="moto") as test:
        test.deploy(approvals(OLD))
        eid = test.start("shop")
        test.run(eid)
        test.deploy(approvals(NEW))
        test.advance(3600)
        with pytest.raises(CompensationNotDeployed, match="Deploy that version again"):
            test.engine.cancel(eid, compensate=True)
        test.deploy(approvals(OLD, NEW))  # back, before the recheck: the undo can run on it
        undoing = test.engine.cancel(eid, compensate=True)
        assert undoing.status is Status.COMPENSATING and undoing.blocked is None
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPENSATED and RAN == ["reserve"]


def test_a_resumed_child_wait_whose_redrive_is_lost_is_re_driven_after_a_lease() -> None:
    """The parent blocked on its child's end notice (taken): it resumes RUNNING with a lease,
    not WAITING on a notice that no longer comes, so even its lost redrive does not strand it."""
    with WorkflowTest(backend="moto") as test:

        def family(*first: str) -> Registry:
            reg = Registry()
            workflow("kid", registry=reg)(type("Kid", (), {"steps": steps("pick")}))
            workflow("parent", registry=reg)(type("P", (), {"steps": [*steps(*first), child("kid"), *steps("after")]}))
            return reg

        test.deploy(family())
        eid = test.start("parent")
        while (queued := test.queue.receive()) is not None:  # run the parent and its kid, not the notice
            test.engine.handle(StepMessage.decode(queued.body))
            test.queue.delete(queued)
            if test.execution(eid).status is Status.WAITING and RAN == ["pick"]:
                break
        test.deploy(family("audit"))
        blocked = test.run(eid)
        assert blocked is not None and blocked.status is Status.BLOCKED and blocked.blocked["from"] == "WAITING"  # type: ignore[index]
        test.deploy(family())
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        resumed = test.execution(eid)
        assert resumed.status is Status.RUNNING and resumed.next_wake_at == test.clock.now() + test.config.lease_seconds
        while (queued := test.queue.receive()) is not None:
            test.queue.delete(queued)  # the redrive is lost
        test.advance(test.config.lease_seconds)
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and RAN == ["pick", "after"]
