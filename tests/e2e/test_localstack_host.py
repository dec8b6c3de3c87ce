"""Host-mode LocalStack 4.14.0, started and stopped by `loom up` / `loom down` (no Docker, offline).

Skipped with the reason where `loom localstack install` has not built the venv. Offline, DynamoDB
comes from the embedded emulator (boto3's per-service endpoint) and everything else from LocalStack.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from loom.cli import main
from loom.local.emulator import localstack_host
from loom.local.emulator.backends import fake_credentials
from loom.local.emulator.client import LocalApi, ok
from loom.local.stack import LocalStack, StackOptions
from tests.e2e.support import ROOT, alive, loom, stack_info, start, wait_for, wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.localstack, pytest.mark.slow]

# Where `loom localstack install` (run from the checkout) put it: $LOOM_LOCALSTACK_HOME, else ./.loom/localstack.
HOME = localstack_host.localstack_home()
INSTALLED = localstack_host.installed(HOME)
pytestmark.append(pytest.mark.skipif(INSTALLED is None, reason=localstack_host.not_installed_message(HOME)))
OFFLINE_NOTE = "offline: DynamoDB from the embedded emulator"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def endpoint() -> str:
    """A port of its own: never a LocalStack someone else runs on 4566."""
    return f"http://127.0.0.1:{_free_port()}"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    loom(path, "down", env={"LOOM_LOCALSTACK_HOME": str(HOME)})


def test_loom_up_starts_host_mode_localstack_and_loom_down_stops_it(state: Path, endpoint: str) -> None:
    env = {"LOOM_LOCALSTACK_HOME": str(HOME)}
    args = ["up", "-d", "--emulator", "localstack", "--endpoint-url", endpoint, "--port", "0", "--api-port", "0"]
    done = loom(state, *args, "--no-console", "--tick", "1", "--workers", "1", env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "started LocalStack 4.14.0 in host mode" in done.stderr
    assert str(state / "localstack.log") in done.stderr, "the line says where its log is"
    assert (state / "localstack.log").stat().st_mode & 0o077 == 0, "owner-only, as the rest of the state dir"
    info = stack_info(state)
    assert info is not None
    localstack = info["localstack"]
    assert localstack["mode"] == "host" and alive(localstack["pid"])
    assert localstack_host.health(endpoint) is not None
    assert info["aws_endpoint_url"] == endpoint
    if localstack["dynamodb"] == "embedded":
        assert OFFLINE_NOTE in done.stderr
        assert set(info["aws_endpoints"]) == {"dynamodb"}
    # The queues are LocalStack's (its URLs name localhost.localstack.cloud), the table wherever DynamoDB is.
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", **_keys())
    assert info["queue_url"] in sqs.list_queues()["QueueUrls"]

    api = LocalApi.from_info(info)
    ex_id = start(api, "pipeline", {})
    wait_status(api, ex_id, "COMPLETED", timeout=120)

    down = loom(state, "down", env=env, timeout=90)
    assert down.returncode == 0, down.stderr
    wait_for("host-mode LocalStack to exit", lambda: not alive(localstack["pid"]), timeout=30)
    assert localstack_host.health(endpoint) is None


def _keys() -> dict[str, str]:
    creds = fake_credentials("us-east-1")
    return {
        "aws_access_key_id": creds["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": creds["AWS_SECRET_ACCESS_KEY"],
        "aws_session_token": creds["AWS_SESSION_TOKEN"],
    }


def test_the_engine_runs_on_host_mode_localstack_with_time_travel(tmp_path: Path, endpoint: str) -> None:
    """The engine's smoke on LocalStack's SQS: a sleep the sweeper wakes after time travel, an empty DLQ."""
    opts = StackOptions(
        emulator="localstack",
        endpoint_url=endpoint,
        localstack_home=HOME,
        port=0,
        api_port=0,
        workers=1,
        api_workers=1,
        state_dir=tmp_path,
        sweeper=False,
        write_stack_file=False,
    )
    with LocalStack(opts) as stack:
        assert stack.info["localstack"]["mode"] == "host"
        env = stack.function_env("WorkerFunction")
        assert env["AWS_ENDPOINT_URL"] == endpoint
        if stack.info["localstack"]["dynamodb"] == "embedded":
            assert env["AWS_ENDPOINT_URL_DYNAMODB"] == stack.service_endpoints["dynamodb"] != endpoint
            # The table is the embedded emulator's; LocalStack has none.
            assert stack.refs["Table"] in stack.client("dynamodb").list_tables()["TableNames"]
        ex_id = start(stack.api, "order_fulfillment", {"order_id": "o-1", "amount": 5})
        wait_status(stack.api, ex_id, "SLEEPING", timeout=120)
        stack.advance_time(3600 + 5)
        assert stack.tick_sweeper()["woken"] == 1
        wait_status(stack.api, ex_id, "COMPLETED", timeout=120)
        assert ok(stack.api, "GET", "/dlq")["messages"] == []


def test_check_non_lambda_deploys_the_rest_of_the_template_through_localstacks_cloudformation(endpoint: str) -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / "deploy-localstack"), "--check-non-lambda", "--stack-name", "loom-check-e2e"],
        cwd=ROOT,
        env={**os.environ, "LOCALSTACK_ENDPOINT": endpoint, "LOOM_LOCALSTACK_HOME": str(HOME)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") : done.stdout.rindex("}") + 1])
    assert report["status"] == "CREATE_COMPLETE"
    assert {"StepQueue", "DeadLetterQueue", "QueuesTlsOnly", "WorkerRole", "SweeperLogGroup"} <= set(
        report["resources"]
    )
    assert not {"WorkerFunction", "SweeperFunction", "ControlPlaneFunction"} & set(report["resources"])
    assert set(report["resources"].values()) == {"CREATE_COMPLETE"}
    assert report["outputs"]["StepQueueUrl"].endswith("/loom-check-steps")
    assert "left out WorkerFunction" in done.stdout
    assert localstack_host.health(endpoint) is None, "the LocalStack the check started is stopped again"


def test_a_second_install_only_checks(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What .ci/run's scripts/install-localstack runs once more on a machine that has it."""
    assert INSTALLED is not None
    # The home this module found, whatever an earlier test in this process left in LOOM_STATE_DIR.
    monkeypatch.setenv("LOOM_LOCALSTACK_HOME", str(HOME))
    assert main(["localstack", "install"]) == 0
    assert f"is installed in {INSTALLED.venv}" in capsys.readouterr().err
