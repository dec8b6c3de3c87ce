"""The ``loom`` execution commands against a running control plane: functions.api.handler
behind a local HTTP server (as the Function URL), on a moto server in a thread (as AWS).

The default target is the local stack's control_plane_url from the stack file; ``--url``
requests are SigV4-signed, and the server here verifies them like an AWS_IAM Function URL."""

from __future__ import annotations

import argparse
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from engine import Registry
from functions import wiring
from loom import stackfile
from loom.cli import executions
from loom.local.emulator.sigv4 import Principal, new_principal
from loom.template import create_resources
from tests.integration.api_support import Functions, function_url_server, sample_event
from workflows import versioned

pytestmark = [pytest.mark.integration, pytest.mark.server]

REGION = "us-east-1"
_stages = itertools.count()


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def stack(moto_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Fresh table and queues (a stage of their own) and a control plane serving them."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    session = boto3.Session(region_name=REGION)
    refs = create_resources(session, parameters={"Stage": f"cli{next(_stages)}"})
    refs.update(sqs=session.client("sqs"), dynamodb=session.client("dynamodb"))
    wiring.reset()
    # The server runs in this process: keep the functions' logs off the CLI's stdout.
    functions = Functions(refs, monkeypatch, LOOM_LOG_LEVEL="ERROR")
    principal = new_principal()
    with function_url_server(principal, REGION) as url:
        stackfile.write(
            {
                "emulator": "embedded",
                "region": REGION,
                "control_plane_url": url,
                "control_plane_credentials": principal.to_json(),
            }
        )
        yield {"fn": functions, "url": url, "refs": refs, "principal": principal}
    wiring.reset()


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="loom")
    sub = root.add_subparsers(dest="command", required=True)
    executions.register(sub)
    return root


def loom(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    args = parser().parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_without_a_stack_or_url_it_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "nothing"))
    code, out, err = loom(capsys, "workflows")
    assert code != 0 and out == ""
    assert "no local stack is running: run `loom up`, or pass --url" in err
    # Run from another directory than the stack's: where it looked, and how to point it there.
    assert f"looked for {tmp_path / 'nothing' / 'stack.json'}, from LOOM_STATE_DIR" in err
    assert "set LOOM_STATE_DIR=<that dir>/.loom, or pass --state-dir" in err


def test_start_status_history_list_cancel_on_the_local_stack(
    stack: dict[str, Any], capsys: pytest.CaptureFixture
) -> None:
    fn: Functions = stack["fn"]
    code, out, _ = loom(capsys, "start", "pipeline", "--input", '{"n": 1}', "--id", "cli-1")
    assert code == 0 and out.strip() == "started cli-1 (pipeline, RUNNING)"
    code, out, _ = loom(capsys, "start", "pipeline", "--input", '{"n": 1}', "--id", "cli-1")
    assert code == 0 and out.startswith("already started: cli-1")
    code, out, err = loom(capsys, "start", "pipeline", "--input", '{"n": 2}', "--id", "cli-1")
    assert code == 1 and out == ""
    assert "exists with a different workflow or input" in err and "execution_exists" in err and "409" in err

    fn.drain()

    code, out, _ = loom(capsys, "status", "cli-1")
    assert code == 0
    assert "status:" in out and "COMPLETED" in out and '"stage_9_key": "cli-1:9"' in out
    expires = next(line for line in out.splitlines() if line.startswith("expires:"))
    assert expires.split(":", 1)[1].strip() not in ("", "-", "None")  # when retention ends and it is gone
    code, out, _ = loom(capsys, "status", "cli-1", "--json")
    body = json.loads(out)
    assert body["status"] == "COMPLETED" and body["output"]["n"] == 1

    code, out, _ = loom(capsys, "history", "cli-1")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0] == "cli-1  COMPLETED  completed" and lines[1].startswith("started ")
    assert lines[2].split()[:5] == ["#", "STEP", "KIND", "STATUS", "ATTEMPTS"]
    rows = [line.split()[:5] for line in lines[3:13]]
    assert rows == [[str(i), f"stage_{i}", "step", "COMPLETED", "1"] for i in range(10)]
    assert lines[13].startswith("completed ")
    code, out, _ = loom(capsys, "history", "cli-1", "--json")
    assert [s["name"] for s in json.loads(out)["steps"]] == [f"stage_{i}" for i in range(10)]

    loom(capsys, "start", "payment_retry", "--id", "cli-2")
    code, out, _ = loom(capsys, "list")
    rows = [line.split() for line in out.strip().splitlines()[1:]]
    assert code == 0 and [(r[0], r[1], r[2]) for r in rows] == [
        ("cli-2", "payment_retry", "RUNNING"),
        ("cli-1", "pipeline", "COMPLETED"),
    ]
    code, out, _ = loom(capsys, "list", "--status", "RUNNING", "--json")
    assert [e["id"] for e in json.loads(out)["executions"]] == ["cli-2"]
    code, out, _ = loom(capsys, "list", "--limit", "1")
    assert "more: loom list --cursor " in out
    cursor = out.rsplit("--cursor ", 1)[1].strip()
    code, out, _ = loom(capsys, "list", "--limit", "1", "--cursor", cursor, "--json")
    assert [e["id"] for e in json.loads(out)["executions"]] == ["cli-1"]

    code, out, _ = loom(capsys, "cancel", "cli-2")
    assert code == 0 and out.strip() == "cancelled cli-2 at step 0"
    code, out, err = loom(capsys, "cancel", "cli-2")
    assert code == 1 and "already CANCELLED" in err
    code, out, err = loom(capsys, "status", "nobody")
    assert code == 1 and "no execution 'nobody'" in err and "404" in err


def test_errors_exit_non_zero_with_the_apis_message(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    code, out, err = loom(capsys, "start", "nope", "--input", "{}")
    assert code == 1 and "unknown workflow 'nope'" in err
    code, out, err = loom(capsys, "start", "nope", "--input", "{}", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "unknown_workflow"
    code, out, err = loom(capsys, "start", "pipeline", "--input", "{oops")
    assert code == 2 and "--input is not valid JSON" in err
    code, out, err = loom(capsys, "start", "pipeline", "--id", "bad id")
    assert code == 1 and "invalid_execution_id" in err
    code, out, err = loom(capsys, "list", "--status", "SLEEPY")
    assert code == 1 and "status must be one of" in err
    assert stack["fn"].counts() == {"items": 0, "StepQueue": 0, "DeadLetterQueue": 0}


def test_input_from_a_file(stack: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    payload = tmp_path / "input.json"
    payload.write_text('{"order_id": "from-file", "amount": 3}')
    code, out, _ = loom(capsys, "start", "order_fulfillment", "--input", f"@{payload}", "--id", "f1", "--json")
    assert code == 0 and json.loads(out)["input"] == {"order_id": "from-file", "amount": 3}


def test_workflows_table(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    code, out, _ = loom(capsys, "workflows")
    assert code == 0
    rows = {line.split()[0]: line for line in out.strip().splitlines()[1:]}
    assert (
        "reserve_inventory -> charge_payment -> sleep_1h -> ship_order -> notify_customer" in rows["order_fulfillment"]
    )
    assert {"pipeline", "payment_retry", "poison_pill"} <= set(rows)


def test_workflows_shows_a_schedules_next_fire_time_from_its_cursor(
    stack: dict[str, Any], capsys: pytest.CaptureFixture
) -> None:
    stack["fn"].sweeper(sample_event("schedule.json"))  # the first tick makes the cursor
    code, out, _ = loom(capsys, "workflows", "--json")
    assert code == 0
    nightly = next(w for w in json.loads(out)["workflows"] if w["name"] == "nightly_report")
    table = stack["refs"]["dynamodb"]
    item = table.get_item(
        TableName=stack["refs"]["Table"], Key={"PK": {"S": "LOOM#SCHEDULES"}, "SK": {"S": "SCHED#nightly_report"}}
    )["Item"]
    cursor_next = float(item["next_fire"]["N"])
    assert nightly["schedule"]["next_fire_epoch"] == cursor_next
    assert nightly["schedule"]["expression"] == "cron(0 2 * * ? *)"
    code, out, _ = loom(capsys, "workflows")
    row = next(line for line in out.splitlines() if line.startswith("nightly_report"))
    shown = time.strftime("%Y-%m-%d %H:%M", time.gmtime(cursor_next))
    assert f"cron(0 2 * * ? *), next {shown}" in row and shown.endswith("02:00")
    assert "SCHEDULE (NEXT FIRE, UTC)" in out.splitlines()[0]


def test_dlq_list_and_redrive(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    fn: Functions = stack["fn"]
    loom(capsys, "start", "order_fulfillment", "--input", '{"amount": -1}', "--id", "neg")
    fn.drain()
    code, out, _ = loom(capsys, "dlq", "list")
    assert code == 0
    assert "failed" in out and "neg" in out and "amount must be a non-negative number" in out
    assert "1 shown, about 1 in the DLQ" in out
    code, out, _ = loom(capsys, "dlq", "list", "--json")
    assert [m["execution_id"] for m in json.loads(out)["messages"]] == ["neg"]

    code, out, _ = loom(capsys, "dlq", "redrive")
    assert code == 0 and "redriven" in out and out.strip().endswith("1 redriven")
    code, out, _ = loom(capsys, "status", "neg", "--json")
    assert json.loads(out)["status"] == "RUNNING"
    code, out, _ = loom(capsys, "dlq", "redrive", "--json")
    assert json.loads(out) == {"results": [], "summary": {}}


def test_url_requests_are_sigv4_signed(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    principal = Principal("ASIALOOMTEST", "loom-test-secret", "AIDALOOMTEST", session_token="loom-test-token")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", principal.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", principal.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "loom-test-token")
    with function_url_server(principal, REGION) as iam_url:
        code, out, _ = loom(capsys, "start", "pipeline", "--url", iam_url, "--region", REGION, "--input", '{"s": 1}')
        assert code == 0 and out.startswith("started ")
        execution_id = out.split()[1]
        for argv in (["list"], ["workflows"], ["dlq", "list"], ["dlq", "redrive"], ["history", execution_id]):
            code, out, err = loom(capsys, *argv, "--url", iam_url, "--region", REGION)
            assert code == 0, err
        code, out, _ = loom(capsys, "status", execution_id, "--url", iam_url, "--region", REGION, "--json")
        assert json.loads(out)["input"] == {"s": 1}
        code, out, _ = loom(capsys, "cancel", execution_id, "--url", iam_url, "--region", REGION)
        assert code == 0 and out.strip() == f"cancelled {execution_id} at step 0"

        # Unsigned, wrongly signed and wrongly scoped requests are refused with AWS's answers.
        with pytest.raises(urllib.error.HTTPError) as unsigned:
            urllib.request.urlopen(f"{iam_url}/workflows", timeout=10)
        assert unsigned.value.code == 403 and json.loads(unsigned.value.read())["Message"].startswith("Forbidden.")
        code, out, err = loom(capsys, "workflows", "--url", iam_url, "--region", "eu-west-1")
        assert code == 1 and "403" in err and "scoped to a valid region" in err
        monkeypatch.setenv("AWS_SESSION_TOKEN", "another-token")
        code, out, err = loom(capsys, "workflows", "--url", iam_url, "--region", REGION)
        assert code == 1 and "security token included in the request is invalid" in err
        monkeypatch.setenv("AWS_SESSION_TOKEN", "loom-test-token")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        code, out, err = loom(capsys, "workflows", "--url", iam_url, "--region", REGION)
        assert code == 1 and "signature we calculated does not match" in err


def test_the_local_stack_is_signed_with_the_stack_files_principal(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # The developer's own credentials play no part locally: only the stack's principal is accepted.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADEVELOPER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "developer-secret")
    code, _, err = loom(capsys, "workflows")
    assert code == 0, err
    stackfile.write({"control_plane_url": stack["url"], "region": REGION})
    code, _, err = loom(capsys, "workflows")
    assert code == 1 and "no control plane credentials" in err
    other = new_principal().to_json()
    stackfile.write({"control_plane_url": stack["url"], "region": REGION, "control_plane_credentials": other})
    code, _, err = loom(capsys, "workflows")
    assert code == 1 and "403" in err and "security token included in the request is invalid" in err


def test_an_unreachable_control_plane_is_a_clear_error(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    creds = stack["principal"].to_json()
    stackfile.write({"control_plane_url": "http://127.0.0.1:9", "region": REGION, "control_plane_credentials": creds})
    code, out, err = loom(capsys, "list", "--timeout", "5")
    assert code == 1 and out == "" and "cannot reach the control plane at http://127.0.0.1:9" in err


def test_history_of_a_map_nests_its_items_from_the_real_api(
    stack: dict[str, Any], capsys: pytest.CaptureFixture
) -> None:
    lines = [{"sku": f"s{i}", "qty": 2, "unit_price": 1.25} for i in range(3)]
    code, _, _ = loom(capsys, "start", "price_lines", "--input", json.dumps({"lines": lines}), "--id", "cli-map")
    assert code == 0
    stack["fn"].drain()
    code, out, _ = loom(capsys, "history", "cli-map")
    text = out.splitlines()
    assert code == 0 and text[0] == "cli-map  COMPLETED  completed"
    at = next(i for i, line in enumerate(text) if line.split()[:4] == ["0", "prices", "map", "COMPLETED"])
    nested = [line.strip() for line in text[at + 1 : at + 5]]
    assert nested[0] == "items: 3 succeeded, 0 failed of 3; join succeeded"
    assert [n.split(",")[:2] for n in nested[1:]] == [[f"item {i}: COMPLETED", " 1 attempt(s)"] for i in range(3)]
    assert text[at + 5].split()[:4] == ["1", "total", "step", "COMPLETED"]
    code, out, _ = loom(capsys, "history", "cli-map", "--json")
    assert [i["result"]["price"] for i in json.loads(out)["steps"][0]["items"]] == [2.5, 2.5, 2.5]


def test_workflows_counts_each_versions_open_executions_and_migrate_moves_a_blocked_one(
    stack: dict[str, Any], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = loom(capsys, "start", "checkout_versions", "--id", "cv1", "--json")
    assert code == 0 and json.loads(out)["workflow_version"] == 2
    code, out, _ = loom(capsys, "workflows")
    assert "v1: 0 open, v2: 1 open" in next(line for line in out.splitlines() if line.startswith("checkout_versions"))
    # A deploy that keeps only version 1 (fraud_check gone): the queued execution blocks.
    only_v1 = Registry()
    only_v1.add(versioned.CheckoutV1.spec)  # type: ignore[attr-defined]
    wiring.reset()
    monkeypatch.setattr(wiring, "default_registry", only_v1)
    stack["fn"].drain()
    code, out, _ = loom(capsys, "status", "cv1")
    assert code == 0 and "BLOCKED" in out and "definition_changed" in out and "loom migrate" in out
    code, out, _ = loom(capsys, "workflows")
    row = next(line for line in out.splitlines() if line.startswith("checkout_versions"))
    assert "v1: 0 open, v2: 1 open (not deployed)" in row
    code, _, err = loom(capsys, "migrate", "cv1", "reserve=nope", "--at", "reserve")
    assert code == 1 and "does not have" in err
    code, out, _ = loom(capsys, "migrate", "cv1", "--at", "reserve")
    assert code == 0 and out.strip() == "migrated cv1 to version 1: runs from step reserve on"
    stack["fn"].drain()
    code, out, _ = loom(capsys, "status", "cv1", "--json")
    assert json.loads(out)["status"] == "COMPLETED"
