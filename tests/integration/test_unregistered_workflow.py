"""An execution whose workflow the running stack does not register (issue #25, friction 2: a
restart of `loom up` without `--parameter WorkflowModules=...`) says so wherever it is shown:
the control plane's execution and history answers, `loom status`, `loom history`, and a
callback's answer (409 `workflow_not_registered`, not `callback_not_found`). Nothing is lost:
registered again, the same token completes the wait."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import pytest

from engine import Registry, definitions, workflow
from engine.state import Execution, Status
from engine.workflow import wait_for_callback
from functions import wiring
from loom.cli import executions as cli_executions
from loom.cli import timeline
from tests.integration.api_support import Functions

pytestmark = pytest.mark.integration

TOKENS: list[str] = []


def submit(ctx: Any, token: str) -> None:
    TOKENS.append(token)


def approve(ctx: Any) -> dict[str, Any]:
    return {"shipped": True}


def shop() -> Registry:
    reg = Registry()
    steps = [wait_for_callback("approval", submit=submit, timeout=3 * 86400), approve]
    workflow("shop", registry=reg)(type("Shop", (), {"steps": steps}))
    return reg


def deploy(fn: Functions, monkeypatch: pytest.MonkeyPatch, reg: Registry) -> None:
    """A restart of the functions with these workflows (the wiring builds its engine anew)."""
    wiring.reset()
    monkeypatch.setattr(wiring, "default_registry", reg)


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    TOKENS.clear()
    yield


class Answers:
    """A control plane client that answers what the handlers answered."""

    def __init__(self, fn: Functions) -> None:
        self.fn = fn

    def status(self, execution_id: str) -> dict[str, Any]:
        return self.fn.api("GET", f"/executions/{execution_id}")[1]

    def history(self, execution_id: str) -> dict[str, Any]:
        return self.fn.api("GET", f"/executions/{execution_id}/history")[1]


def test_an_execution_of_a_workflow_the_stack_lacks_says_so_everywhere_and_loses_nothing(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, shop())
    assert fn.api("POST", "/executions", {"workflow": "shop", "input": {}, "execution_id": "u-1"})[0] == 201
    fn.drain()
    assert fn.api("GET", "/executions/u-1")[1]["unregistered"] is None
    deploy(fn, monkeypatch, Registry())  # `loom up` again without --parameter WorkflowModules=...
    before = fn.counts()

    status, body = fn.api("GET", "/executions/u-1")
    assert status == 200 and body["status"] == "WAITING"
    missing = body["unregistered"]
    assert missing["code"] == "workflow_not_registered" and missing["workflow"] == "shop"
    assert "'shop' version 1 is not registered" in missing["message"] and "WorkflowModules" in missing["message"]
    status, history = fn.api("GET", "/executions/u-1/history")
    assert status == 200 and history["pending"] == [] and history["unregistered"] == missing

    status, answer = fn.api("POST", f"/callbacks/{TOKENS[-1]}/succeed", {"result": {"ok": True}})
    assert status == 409 and answer["error"]["code"] == "workflow_not_registered"
    assert "'shop'" in answer["error"]["message"] and "WorkflowModules" in answer["error"]["message"]
    forged = TOKENS[-1][:-4] + ("AAAA" if not TOKENS[-1].endswith("AAAA") else "BBBB")
    status, answer = fn.api("POST", f"/callbacks/{forged}/succeed", {"result": {"ok": True}})
    assert status == 404 and answer["error"]["code"] == "callback_not_found", "a wrong secret learns nothing"
    assert fn.counts() == before, "nothing written"

    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_executions.status(Answers(fn), argparse.Namespace(id="u-1", json=False)) == 0  # type: ignore[arg-type]
    [line] = [x for x in out.getvalue().splitlines() if x.startswith("not registered:")]
    assert line.split(":", 1)[1].strip() == missing["message"]
    page = timeline.render(Answers(fn).history("u-1"), 0.0)
    assert "NOT REGISTERED: workflow 'shop' version 1 is not registered" in page

    deploy(fn, monkeypatch, shop())  # registered again: the same token completes the wait
    status, _ = fn.api("POST", f"/callbacks/{TOKENS[-1]}/succeed", {"result": {"ok": True}})
    assert status == 200
    fn.drain()
    status, body = fn.api("GET", "/executions/u-1")
    assert body["status"] == "COMPLETED" and body["output"]["shipped"] is True and body["unregistered"] is None
    out = io.StringIO()
    with redirect_stdout(out):
        cli_executions.status(Answers(fn), argparse.Namespace(id="u-1", json=False))  # type: ignore[arg-type]
    assert "not registered" not in out.getvalue()


def _ex(**kw: Any) -> Execution:
    base = {"id": "e", "workflow": "shop", "status": Status.WAITING, "current_step": 0, "version": 1}
    base |= {"input": {}, "context": {}, "created_at": 0.0, "updated_at": 0.0}
    return Execution(**{**base, **kw})  # type: ignore[arg-type]


def test_registration_tells_a_missing_workflow_from_a_changed_shape() -> None:
    reg = shop()
    spec = reg.get("shop")
    assert definitions.registration(reg, _ex(fingerprint=spec.fingerprint, workflow_version=1)) is None
    changed = definitions.registration(reg, _ex(fingerprint="0" * 64, workflow_version=1))
    assert changed is not None and changed.code is definitions.Registration.SHAPE_CHANGED
    assert changed.registered == (1,) and "loom migrate" in changed.message
    gone = definitions.registration(Registry(), _ex(fingerprint=spec.fingerprint, workflow_version=1))
    assert gone is not None and gone.code.value == "workflow_not_registered" and gone.registered == ()
