"""The waits' control-plane routes and CLI commands, through functions.api.handler on moto.

Exact status codes (200/400/404/409/410/413), nothing written for a rejected request, and a
callback token that never reaches the logs."""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

import pytest

from engine.adapters.ledger import DynamoLedger
from loom.cli import executions
from loom.cli import waits as waits_cli
from tests.integration.api_support import Functions
from tests.integration.test_cli import moto_url, stack  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def snapshot(fn: Functions) -> list[dict[str, Any]]:
    """Every item of the table, and the queues' counts: what a rejected request must leave alone."""
    items = fn.refs["dynamodb"].scan(TableName=fn.refs["Table"], ConsistentRead=True)["Items"]
    return [*sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"])), fn.counts()]


def token_for(fn: Functions, execution_id: str) -> str:
    ledger = DynamoLedger(fn.refs["dynamodb"], fn.refs["Table"])
    [request] = [e for e in ledger.effects(execution_id).values() if e["kind"] == "payment_request"]
    return str(request["callback_token"])


def waiting_payment(fn: Functions, eid: str = "pay-1") -> str:
    status, _ = fn.api(
        "POST", "/executions", {"workflow": "payment_webhook", "input": {"amount": 5}, "execution_id": eid}
    )
    assert status == 201
    fn.drain()
    status, body = fn.api("GET", f"/executions/{eid}")
    assert status == 200 and body["status"] == "WAITING"
    assert body["wait"]["kind"] == "callback" and body["wait"]["name"] == "payment"
    assert "token" not in json.dumps(body)  # neither the token nor its hash is shown
    return token_for(fn, eid)


def error(answer: tuple[int, Any]) -> tuple[int, str]:
    status, body = answer
    return status, body["error"]["code"]


def test_succeed_200_then_repeat_200_then_other_body_410(fn: Functions) -> None:
    token = waiting_payment(fn)
    status, body = fn.api("POST", f"/callbacks/{token}/succeed", {"result": {"paid": 5}})
    assert (status, body["repeat"], body["execution_id"], body["step"]) == (200, False, "pay-1", 1)
    before = snapshot(fn)
    status, body = fn.api("POST", f"/callbacks/{token}/succeed", {"result": {"paid": 5}})
    assert (status, body["repeat"]) == (200, True)
    assert snapshot(fn) == before  # a repeat changes nothing
    assert error(fn.api("POST", f"/callbacks/{token}/succeed", {"result": {"paid": 6}})) == (410, "wait_ended")
    assert error(fn.api("POST", f"/callbacks/{token}/fail", {"error": {"type": "X", "message": ""}})) == (
        410,
        "wait_ended",
    )
    assert error(fn.api("POST", f"/callbacks/{token}/heartbeat")) == (410, "wait_ended")
    assert snapshot(fn) == before
    fn.drain()
    status, body = fn.api("GET", "/executions/pay-1")
    assert body["current_step"] == 2 and body["output"]["paid"] == 5


def test_a_token_whose_wait_ended_is_410_saying_what_ended_it_and_one_never_issued_404(fn: Functions) -> None:
    """Gone (410 ``wait_ended``: no retry of it can win) is told from never issued (404): the
    message names what ended the wait; nothing is written either way."""
    token = waiting_payment(fn, "gone-1")
    assert fn.api("POST", "/executions/gone-1/cancel")[0] == 200
    before = snapshot(fn)
    for action, body in (("succeed", {"result": {}}), ("fail", {"error": {"type": "X"}}), ("heartbeat", None)):
        status, answer = fn.api("POST", f"/callbacks/{token}/{action}", body)
        assert (status, answer["error"]["code"]) == (410, "wait_ended"), (action, answer)
        assert answer["error"]["message"] == "the wait has already ended: execution 'gone-1' is CANCELLED"
    never = token.replace(".gone-1.", ".gone-0.")  # an execution that never was
    assert error(fn.api("POST", f"/callbacks/{never}/succeed", {"result": {}})) == (404, "callback_not_found")
    assert snapshot(fn) == before

    token = waiting_payment(fn, "gone-2")
    fn.api("POST", f"/callbacks/{token}/fail", {"error": {"type": "Declined", "message": "card"}})
    status, answer = fn.api("POST", f"/callbacks/{token}/succeed", {"result": {"paid": 5}})
    assert (status, answer["error"]["code"]) == (410, "wait_ended")
    assert answer["error"]["message"] == (
        "the wait has already ended: its attempt 1 failed (CallbackFailed: Declined: card); "
        "attempt 2 is the current one, with a token of its own"
    )

    fn.api("POST", "/executions", {"workflow": "order_sign_off", "input": {}, "execution_id": "gone-3"})
    fn.drain()
    ledger = DynamoLedger(fn.refs["dynamodb"], fn.refs["Table"])
    handle = next(str(e["callback_token"]) for e in ledger.effects("gone-3").values() if e.get("to") == "finance")
    assert fn.api("POST", "/executions/gone-3/cancel")[0] == 200
    status, answer = fn.api("POST", f"/callbacks/{handle}/succeed", {"result": {"approved": True}})
    assert (status, answer["error"]["code"]) == (410, "wait_ended")
    assert answer["error"]["message"].endswith("callback 'finance' was still pending; execution 'gone-3' is CANCELLED")


def test_rejected_callback_requests_write_nothing(fn: Functions) -> None:
    token = waiting_payment(fn)
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    big = {"result": {"blob": "x" * 420_000}}
    cases = [
        (("POST", "/callbacks/not-a-token/succeed", {"result": {}}), (400, "malformed_token")),
        (("POST", f"/callbacks/{forged}/succeed", {"result": {}}), (404, "callback_not_found")),
        (
            ("POST", f"/callbacks/{token.replace('.pay-1.', '.nobody.')}/succeed", {"result": {}}),
            (404, "callback_not_found"),
        ),
        (("POST", f"/callbacks/{token}/succeed", {"result": 7}), (400, "invalid_input")),
        (("POST", f"/callbacks/{token}/succeed", {"result": {}, "extra": 1}), (400, "invalid_input")),
        (("POST", f"/callbacks/{token}/succeed", None), (400, "malformed_json")),
        (("POST", f"/callbacks/{token}/succeed", big), (413, "payload_too_large")),
        (("POST", f"/callbacks/{token}/fail", {"error": "nope"}), (400, "invalid_input")),
        (("POST", f"/callbacks/{token}/heartbeat", {"x": 1}), (400, "invalid_input")),
        (("GET", f"/callbacks/{token}/succeed", None), (405, "method_not_allowed")),
        (("POST", f"/callbacks/{token}/explode", {}), (404, "not_found")),
        # An unset variable in a script: the empty token is named, not an unknown path.
        (("POST", "/callbacks//succeed", {"result": {}}), (400, "invalid_token")),
        (("POST", "/callbacks//heartbeat", None), (400, "invalid_token")),
    ]
    before = snapshot(fn)
    for (method, path, body), expected in cases:
        assert error(fn.api(method, path, body)) == expected, path
    assert snapshot(fn) == before


def test_fail_then_the_retry_issues_a_new_token(fn: Functions) -> None:
    token = waiting_payment(fn, "pay-2")
    status, body = fn.api("POST", f"/callbacks/{token}/fail", {"error": {"type": "Declined", "message": "card"}})
    assert (status, body["action"], body["repeat"]) == (200, "fail", False)
    assert fn.api("POST", f"/callbacks/{token}/fail", {"error": {"type": "Declined", "message": "card"}})[1]["repeat"]
    _, history = fn.api("GET", "/executions/pay-2/history")
    attempt = history["steps"][1]["attempts"][0]
    assert attempt["outcome"] == "failed" and attempt["error"]["message"].startswith("Declined: card")
    assert "detail" not in attempt  # the token's hash stays inside


def test_the_token_never_reaches_the_logs(fn: Functions, capfd: pytest.CaptureFixture) -> None:
    token = waiting_payment(fn, "pay-3")
    secret = token.rsplit(".", 1)[1]
    fn.api("POST", f"/callbacks/{token}/heartbeat")
    fn.api("POST", f"/callbacks/{token}/succeed", {"result": {}})
    fn.api("POST", f"/callbacks/{token[:-1]}Z/succeed", {"result": {}})
    out, err = capfd.readouterr()
    assert "/callbacks/tok:" in out + err and "api.request" in out + err
    assert secret not in out + err and token not in out + err


def test_signal_routes_codes_and_nothing_written_when_refused(fn: Functions) -> None:
    status, _ = fn.api("POST", "/executions", {"workflow": "order_approval", "input": {}, "execution_id": "ap-1"})
    fn.drain()
    before = snapshot(fn)
    big = {"payload": {"blob": "x" * 420_000}}
    for (path, body), expected in [
        (("/executions/nobody/signals/approval", {"payload": {}}), (404, "execution_not_found")),
        (("/executions/ap-1/signals/bad%20name", {"payload": {}}), (400, "invalid_input")),
        (("/executions/ap-1/signals/approval", {"payload": [1]}), (400, "invalid_input")),
        (("/executions/ap-1/signals/approval", {"other": 1}), (400, "invalid_input")),
        (("/executions/ap-1/signals/approval", big), (413, "payload_too_large")),
        (("/executions/ap-1/signals/approval?x=1", {"payload": {}}), (400, "invalid_input")),
    ]:
        assert error(fn.api("POST", path, body)) == expected, path
    assert snapshot(fn) == before
    status, body = fn.api("POST", "/executions/ap-1/signals/approval", {"payload": {"approved": True}})
    assert status == 200 and body["delivered"] is True and body["name"] == "approval"
    fn.drain()
    assert fn.api("GET", "/executions/ap-1")[1]["status"] == "COMPLETED"
    before = snapshot(fn)
    assert error(fn.api("POST", "/executions/ap-1/signals/approval", {"payload": {}})) == (409, "already_terminal")
    assert snapshot(fn) == before


def test_a_signal_before_the_wait_is_kept(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "order_approval", "input": {}, "execution_id": "ap-2"})
    status, body = fn.api("POST", "/executions/ap-2/signals/approval", {"payload": {"approved": True}})
    assert status == 200 and body["delivered"] is False
    fn.drain()
    assert fn.api("GET", "/executions/ap-2")[1]["status"] == "COMPLETED"


def test_get_shows_the_parent_and_its_children(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "order_with_children", "input": {"order_id": "k"}, "execution_id": "kp"})
    fn.drain()
    _, parent = fn.api("GET", "/executions/kp")
    assert parent["status"] == "COMPLETED" and parent["parent"] is None
    assert [(c["id"], c["workflow"], c["status"]) for c in parent["children"]] == [
        ("kp--0-1", "warehouse_pick", "COMPLETED"),
        ("kp--1-1", "courier_booking", "COMPLETED"),
    ]
    _, kid = fn.api("GET", "/executions/kp--0-1")
    assert kid["parent"] == {"id": "kp", "step": 0, "attempt": 1} and kid["children"] == []


# ------------------------------------------------------------------------- CLI


def loom(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    root = argparse.ArgumentParser(prog="loom")
    sub = root.add_subparsers(dest="command", required=True)
    executions.register(sub)
    waits_cli.register(sub)
    capsys.readouterr()
    args = root.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.server
def test_cli_callback_and_signal(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    """The token may come from stdin; it is never printed back."""
    fn: Functions = stack["fn"]
    loom(capsys, "start", "payment_webhook", "--input", '{"amount": 3}', "--id", "cli-pay")
    fn.drain()
    token = token_for(fn, "cli-pay")
    code, out, _ = loom(capsys, "callback", "heartbeat", token)
    assert code == 0 and "callback heartbeat" in out and token not in out
    stdin = sys.stdin
    sys.stdin = io.StringIO(token + "\n")  # `-` keeps the token out of the shell's history
    try:
        code, out, _ = loom(capsys, "callback", "heartbeat", "-")
    finally:
        sys.stdin = stdin
    assert code == 0 and "callback heartbeat" in out
    code, out, err = loom(capsys, "callback", "succeed", "  ", "--result", '{"paid": 3}')
    assert code != 0 and "the callback token is empty" in err, "an empty token is a usage error, sent nowhere"
    code, out, _ = loom(capsys, "callback", "succeed", token, "--result", '{"paid": 3}')
    assert code == 0 and out.strip() == "callback succeed accepted (execution cli-pay, step 1)"
    code, out, _ = loom(capsys, "callback", "succeed", token, "--result", '{"paid": 3}')
    assert code == 0 and "repeat: nothing changed" in out
    code, out, err = loom(capsys, "callback", "fail", token, "--type", "Declined")
    assert code == 1 and "wait_ended" in err and "HTTP 410" in err and token not in err
    assert "its attempt 1 was completed already" in err, "the CLI says what ended the wait"
    code, _, err = loom(capsys, "callback", "succeed", "junk")
    assert code == 1 and "malformed_token" in err and "400" in err

    loom(capsys, "start", "order_approval", "--id", "cli-ap")
    fn.drain()
    code, out, _ = loom(capsys, "signal", "cli-ap", "approval", "--payload", '{"approved": true}')
    assert code == 0 and out.strip() == "signal approval sent to cli-ap: consumed by its wait"
    code, _, err = loom(capsys, "signal", "cli-ap", "approval", "--payload", "{bad")
    assert code == 2 and "--payload is not valid JSON" in err
    fn.drain()
    code, out, _ = loom(capsys, "status", "cli-ap", "--json")
    assert json.loads(out)["status"] == "COMPLETED"


def test_two_callback_handles_through_the_api_in_either_order(
    fn: Functions, capsys: pytest.CaptureFixture[str]
) -> None:
    """``order_sign_off``: two handles pending at once, completed by POST /callbacks/{token}/...;
    a repeat is 200, another body 410, a forged secret 404, and no token reaches the logs."""
    status, _ = fn.api("POST", "/executions", {"workflow": "order_sign_off", "input": {}, "execution_id": "so-1"})
    assert status == 201
    fn.drain()
    status, body = fn.api("GET", "/executions/so-1")
    assert status == 200 and body["status"] == "WAITING" and body["wait"]["kind"] == "handles"
    ledger = DynamoLedger(fn.refs["dynamodb"], fn.refs["Table"])
    tokens = {
        e["to"]: str(e["callback_token"]) for e in ledger.effects("so-1").values() if e["kind"] == "sign_off_request"
    }
    assert not any(t.rsplit(".", 1)[1] in json.dumps(body) for t in tokens.values())
    status, body = fn.api("POST", f"/callbacks/{tokens['warehouse']}/heartbeat")
    assert (status, body["repeat"]) == (200, False)
    status, body = fn.api("POST", f"/callbacks/{tokens['warehouse']}/succeed", {"result": {"dock": "D1"}})
    assert (status, body["repeat"], body["step"]) == (200, False, 2)
    assert fn.api("POST", f"/callbacks/{tokens['warehouse']}/succeed", {"result": {"dock": "D1"}})[1]["repeat"]
    assert error(fn.api("POST", f"/callbacks/{tokens['warehouse']}/succeed", {"result": {"dock": "D2"}})) == (
        410,
        "wait_ended",
    )
    forged = tokens["finance"].rsplit(".", 1)[0] + ".A" + "x" * 23
    assert error(fn.api("POST", f"/callbacks/{forged}/succeed", {"result": {}})) == (404, "callback_not_found")
    status, _ = fn.api("POST", f"/callbacks/{tokens['finance']}/succeed", {"result": {"approved": True}})
    assert status == 200
    fn.drain()
    status, body = fn.api("GET", "/executions/so-1")
    assert status == 200 and body["status"] == "COMPLETED"
    logs = capsys.readouterr()
    assert not any(t.rsplit(".", 1)[1] in logs.out + logs.err for t in tokens.values())
