"""An execution whose workflow the running stack does not register (issue #25, friction 2: a
restart of `loom up` without `--parameter WorkflowModules=...`) says so wherever it is shown:
the control plane's execution, history and list answers, `loom status`, `loom history`, `loom
list`, and the answer to a callback, a callback handle's completion or a signal (409
`workflow_not_registered` with the fix, not `callback_not_found` nor a silent 200 or 202).
Nothing is lost: nothing is written, and registered again, the same request succeeds."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import pytest

from engine import Registry, definitions, workflow
from engine.state import Execution, Status
from engine.workflow import StepContext, create_callback, wait_for_callback, wait_for_callbacks, wait_for_signal
from functions import wiring
from loom.cli import executions as cli_executions
from loom.cli import timeline
from tests.integration.api_support import Functions
from tests.integration.test_cli import moto_url, stack  # noqa: F401  (fixtures)
from tests.integration.test_waits_api import error, loom, snapshot

pytestmark = pytest.mark.integration

TOKENS: list[str] = []


def submit(ctx: Any, token: str) -> None:
    TOKENS.append(token)


def approve(ctx: Any) -> dict[str, Any]:
    return {"shipped": True}


def hand_out(ctx: StepContext) -> dict[str, Any]:
    TOKENS.append(ctx.callback_token("sign"))
    return {}


def shop() -> Registry:
    reg = Registry()
    steps = [wait_for_callback("approval", submit=submit, timeout=3 * 86400), approve]
    workflow("shop", registry=reg)(type("Shop", (), {"steps": steps}))
    return reg


def every() -> Registry:
    """``shop``, ``desk`` (a signal wait) and ``sign`` (a callback handle), all registered."""
    reg = shop()
    desk = [wait_for_signal("approval", timeout=3 * 86400), approve]
    workflow("desk", registry=reg)(type("Desk", (), {"steps": desk}))
    sign = [create_callback("sign", timeout=3 * 86400), hand_out, wait_for_callbacks("sign"), approve]
    workflow("sign", registry=reg)(type("Sign", (), {"steps": sign}))
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


def waiting(fn: Functions, workflow_name: str, execution_id: str, kind: str) -> None:
    assert (
        fn.api("POST", "/executions", {"workflow": workflow_name, "input": {}, "execution_id": execution_id})[0] == 201
    )
    fn.drain()
    body = fn.api("GET", f"/executions/{execution_id}")[1]
    assert body["status"] == "WAITING" and body["wait"]["kind"] == kind, body


def fix_of(fn: Functions, execution_id: str) -> str:
    """The fix the execution's page gives: what every refusal about it must say too."""
    missing = fn.api("GET", f"/executions/{execution_id}")[1]["unregistered"]
    assert missing["code"] == "workflow_not_registered" and "WorkflowModules" in missing["message"]
    return str(missing["message"])


def test_a_signal_to_an_execution_whose_workflow_is_not_registered_is_refused_and_kept_by_its_sender(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """409 with the callback's fix, nothing written (not kept and answered 200 as before), bad
    input still 400; WAITING or BLOCKED as workflow_not_registered alike; registered again, the
    same signal is delivered."""
    deploy(fn, monkeypatch, every())
    waiting(fn, "desk", "d-1", "signal")
    waiting(fn, "desk", "d-2", "signal")
    deploy(fn, monkeypatch, Registry())
    engine = wiring.engine()
    definitions.block(engine, engine.get("d-2"), definitions.WORKFLOW_NOT_REGISTERED)  # as a worker does
    assert engine.get("d-2").blocked["reason"] == "workflow_not_registered"
    before = snapshot(fn)
    for eid in ("d-1", "d-2"):
        status, answer = fn.api("POST", f"/executions/{eid}/signals/approval", {"payload": {"ok": True}})
        assert (status, answer["error"]["code"]) == (409, "workflow_not_registered"), answer
        assert answer["error"]["message"] == fix_of(fn, eid)
        assert error(fn.api("POST", f"/executions/{eid}/signals/approval", {"payload": [1]})) == (400, "invalid_input")
        assert error(fn.api("POST", f"/executions/{eid}/signals/bad%20name", {})) == (400, "invalid_input")
    assert snapshot(fn) == before, "nothing written: the sender still holds the signal"

    deploy(fn, monkeypatch, every())  # registered again: the same signal goes to its wait
    status, body = fn.api("POST", "/executions/d-1/signals/approval", {"payload": {"ok": True}})
    assert status == 200 and body["delivered"] is True
    fn.drain()
    done = fn.api("GET", "/executions/d-1")[1]
    assert done["status"] == "COMPLETED" and done["output"]["ok"] is True


def test_a_callback_handle_of_a_workflow_not_registered_is_refused_with_the_fix_and_nothing_written(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, every())
    waiting(fn, "sign", "s-1", "handles")
    token = TOKENS[-1]
    deploy(fn, monkeypatch, Registry())
    before = snapshot(fn)
    for action, body in (
        ("succeed", {"result": {"ok": True}}),
        ("fail", {"error": {"type": "No"}}),
        ("heartbeat", None),
    ):
        status, answer = fn.api("POST", f"/callbacks/{token}/{action}", body)
        assert (status, answer["error"]["code"]) == (409, "workflow_not_registered"), (action, answer)
        assert answer["error"]["message"] == fix_of(fn, "s-1")
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert error(fn.api("POST", f"/callbacks/{forged}/succeed", {"result": {}})) == (404, "callback_not_found")
    assert error(fn.api("POST", f"/callbacks/{token}/succeed", {"result": 7})) == (400, "invalid_input")
    assert snapshot(fn) == before, "the handle is still pending: nothing was kept on it"

    deploy(fn, monkeypatch, every())
    status, body = fn.api("POST", f"/callbacks/{token}/succeed", {"result": {"ok": True}})
    assert status == 200 and body["repeat"] is False and body["kept"] is False
    fn.drain()
    assert fn.api("GET", "/executions/s-1")[1]["status"] == "COMPLETED"


class Lister(Answers):
    def list(self, **filters: Any) -> dict[str, Any]:
        return self.fn.api("GET", "/executions")[1]


def test_the_list_marks_the_executions_whose_workflow_is_not_registered(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, every())
    waiting(fn, "shop", "l-shop", "callback")
    waiting(fn, "desk", "l-desk", "signal")
    only_desk = Registry()
    workflow("desk", registry=only_desk)(type("Desk", (), {"steps": [wait_for_signal("approval"), approve]}))
    deploy(fn, monkeypatch, only_desk)
    rows = {r["id"]: r for r in fn.api("GET", "/executions")[1]["executions"]}
    assert rows["l-shop"]["unregistered"] == fn.api("GET", "/executions/l-shop")[1]["unregistered"]
    assert rows["l-shop"]["unregistered"]["code"] == "workflow_not_registered"
    assert rows["l-desk"]["unregistered"] is None

    out = io.StringIO()
    args = argparse.Namespace(status=None, workflow=None, limit=50, cursor=None, json=False)
    with redirect_stdout(out):
        assert cli_executions.list_(Lister(fn), args) == 0  # type: ignore[arg-type]
    lines = [x for x in out.getvalue().splitlines() if not x.startswith("{")]  # the handler's own log lines
    assert "NOT REGISTERED" in lines[0]
    [shop_row] = [x for x in lines if x.startswith("l-shop")]
    [desk_row] = [x for x in lines if x.startswith("l-desk")]
    assert shop_row.rstrip().endswith("workflow_not_registered") and desk_row.rstrip().endswith("-")
    assert [x for x in lines if x.startswith("not registered:")] == [f"not registered: {fix_of(fn, 'l-shop')}"]

    deploy(fn, monkeypatch, every())  # registered again: the list says nothing more
    out = io.StringIO()
    with redirect_stdout(out):
        cli_executions.list_(Lister(fn), args)  # type: ignore[arg-type]
    assert "NOT REGISTERED" not in out.getvalue() and "not registered:" not in out.getvalue()


@pytest.mark.server
def test_loom_signal_and_callback_say_the_workflow_is_not_registered(
    stack: dict[str, Any],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fn: Functions = stack["fn"]
    deploy(fn, monkeypatch, every())
    waiting(fn, "desk", "c-desk", "signal")
    waiting(fn, "sign", "c-sign", "handles")
    token = TOKENS[-1]
    deploy(fn, monkeypatch, Registry())
    code, _, err = loom(capsys, "signal", "c-desk", "approval", "--payload", '{"ok": true}')
    assert code == 1 and "(workflow_not_registered, HTTP 409)" in err and "WorkflowModules" in err
    code, _, err = loom(capsys, "callback", "succeed", token, "--result", "{}")
    assert code == 1 and "(workflow_not_registered, HTTP 409)" in err and token not in err
    code, out, _ = loom(capsys, "list")
    assert code == 0 and "NOT REGISTERED" in out.splitlines()[0]
    assert sum(line.rstrip().endswith("workflow_not_registered") for line in out.splitlines()) == 2
    assert out.count("not registered: workflow 'desk'") == 1 and out.count("not registered: workflow 'sign'") == 1


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
