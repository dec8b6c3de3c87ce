"""The other targets: LocalStack (Docker), `sam local invoke` (Docker), a deployed stack, and the Python API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from loom.local.emulator.aws import StackNotReady, stack_info
from loom.local.emulator.backends import docker_available
from loom.local.emulator.client import LocalApi, call, ok
from loom.local.emulator.samlocal import env_vars
from loom.local.emulator.sigv4 import new_principal
from loom.local.stack import LocalStack, StackOptions
from tests.e2e.support import ROOT, loom, wait_for

pytestmark = pytest.mark.e2e

DOCKER, WHY_NOT = docker_available()
needs_docker = pytest.mark.skipif(not DOCKER, reason=f"needs a Docker engine: {WHY_NOT}")


# ------------------------------------------------------------------ files that need no Docker to check


def test_compose_pins_localstack_with_the_services_we_use():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    svc = compose["services"]["localstack"]
    assert svc["image"] == "localstack/localstack:4.14.0"
    services = set(svc["environment"]["SERVICES"].split(","))
    assert {"dynamodb", "sqs", "lambda", "events", "cloudformation", "s3", "iam", "sts", "logs"} <= services
    assert svc["environment"]["LOCALSTACK_AUTH_TOKEN"] == "${LOCALSTACK_AUTH_TOKEN:-}"
    assert "/_localstack/health" in " ".join(svc["healthcheck"]["test"])
    assert any("/var/run/docker.sock" in v for v in svc["volumes"])
    assert any(p.endswith(":4566") for p in svc["ports"])


def test_committed_sam_env_file_is_what_the_template_gives():
    committed = json.loads((ROOT / "events" / "local-env.json").read_text())
    assert committed == env_vars(), "regenerate: python -m loom.local.emulator.samlocal > events/local-env.json"
    for env in committed.values():
        assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5230"


def test_deployed_stack_outputs_become_the_stack_file():
    cfn = boto3.client("cloudformation", region_name="us-east-1")
    outputs = {
        "ControlPlaneUrl": "https://abc.lambda-url.us-east-1.on.aws/",
        "TableName": "loom-dev",
        "StepQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-dev-steps",
        "DeadLetterQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-dev-dlq",
    }
    stack = {
        "StackName": "loom-dev",
        "StackStatus": "UPDATE_COMPLETE",
        "CreationTime": "2026-01-01T00:00:00Z",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
    }
    with Stubber(cfn) as stub:
        stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "loom-dev"})
        info = stack_info("loom-dev", cloudformation=cfn)
    assert info["emulator"] == "aws"
    assert info["control_plane_url"] == outputs["ControlPlaneUrl"]
    assert info["table"] == "loom-dev"
    assert info["queue_url"] == outputs["StepQueueUrl"]
    assert info["dlq_url"] == outputs["DeadLetterQueueUrl"]
    assert info["supervisor_pid"] is None and info["worker_pids"] == []

    with Stubber(cfn) as stub:
        stub.add_response("describe_stacks", {"Stacks": [{**stack, "StackStatus": "ROLLBACK_COMPLETE"}]})
        with pytest.raises(StackNotReady, match="ROLLBACK_COMPLETE"):
            stack_info("loom-dev", cloudformation=cfn)


# ------------------------------------------------------------------ the Python API, in-process


def test_python_api_matches_the_template_and_drives_time(tmp_path: Path):
    opts = StackOptions(port=0, api_port=0, workers=1, api_workers=1, state_dir=tmp_path, sweeper=False)
    with LocalStack(opts) as stack:
        # events/local-env.json is right for a stack on any port: compare with what the functions get.
        for function, expected in env_vars(stack.endpoint_url).items():
            actual = stack.function_env(function)
            assert {k: actual[k] for k in expected} == expected, function
            assert actual["LOOM_CLOCK_OFFSET_FILE"] == str(stack.clock_offset_file)
            # Lambda's standard variables, as AWS sets them for the deployed function.
            spec = stack.template.functions()[function]
            assert actual["_HANDLER"] == spec.handler
            assert actual["AWS_LAMBDA_INITIALIZATION_TYPE"] == "on-demand"
            assert actual["AWS_LAMBDA_LOG_GROUP_NAME"] == f"/aws/lambda/{actual['AWS_LAMBDA_FUNCTION_NAME']}"
        assert stack.function_env("ControlPlaneFunction")["AWS_LAMBDA_FUNCTION_NAME"] == "loom-dev-control-plane"
        assert stack.refs["Table"] == "loom-dev"
        assert stack.info["supervisor_pid"] == os.getpid()
        assert json.loads((tmp_path / "stack.json").read_text())["worker_pids"] == stack.worker_pids()

        # The control plane is AWS_IAM: unsigned is refused, the stack's own principal is not.
        assert (
            call(LocalApi(stack.api.url, new_principal().credentials(), stack.api.region), "GET", "/workflows")[0]
            == 403
        )
        status, body = call(stack.api, "POST", "/executions", {"workflow": "order_fulfillment", "input": {}})
        assert status == 201, body
        ex_id = body["id"]
        wait_for("the sleep", lambda: ok(stack.api, "GET", f"/executions/{ex_id}")["status"] == "SLEEPING")
        assert stack.tick_sweeper()["woken"] == 0  # the scheduled sweeper is off: nothing wakes it but us
        assert stack.advance_time(3600 + 5) == pytest.approx(3605)
        assert stack.time_offset() == pytest.approx(3605)
        assert stack.tick_sweeper()["woken"] == 1
        wait_for("completion", lambda: ok(stack.api, "GET", f"/executions/{ex_id}")["status"] == "COMPLETED")
        sweeps = stack.invocations("SweeperFunction")
        assert [s["outcome"] for s in sweeps] == ["ok", "ok"]
        assert all(s["request_id"] and s["pid"] for s in stack.invocations())
    assert not (tmp_path / "stack.json").exists()


# ------------------------------------------------------------------ Docker


@pytest.mark.skipif(DOCKER, reason="checks the message given where no Docker engine answers")
def test_localstack_without_docker_says_why(tmp_path: Path):
    done = loom(tmp_path, "up", "--emulator", "localstack", "--api-port", "0", timeout=60)
    assert done.returncode == 1
    assert "Docker" in done.stderr


@pytest.mark.docker
@needs_docker
def test_localstack_runs_the_stack(tmp_path: Path):
    opts = StackOptions(emulator="localstack", api_port=0, workers=1, api_workers=1, tick=1, state_dir=tmp_path)
    with LocalStack(opts) as stack:
        assert stack.endpoint_url.endswith(":4566")
        status, body = call(stack.api, "POST", "/executions", {"workflow": "pipeline", "input": {}})
        assert status == 201, body
        wait_for(
            "completion",
            lambda: ok(stack.api, "GET", f"/executions/{body['id']}")["status"] == "COMPLETED",
            timeout=120,
        )


@pytest.mark.docker
@needs_docker
@pytest.mark.skipif(shutil.which("sam") is None and not (ROOT / ".venv/bin/sam").exists(), reason="needs sam")
def test_sam_local_invoke_reaches_the_embedded_stack(tmp_path: Path):
    opts = StackOptions(port=0, api_port=0, workers=1, api_workers=1, state_dir=tmp_path, sweeper=False)
    with LocalStack(opts) as stack:
        env_file = tmp_path / "env.json"
        env_file.write_text(json.dumps(env_vars(stack.endpoint_url)))
        sam = shutil.which("sam") or str(ROOT / ".venv/bin/sam")
        t0 = time.monotonic()
        command = [sam, "local", "invoke", "SweeperFunction", "--event", "events/schedule.json"]
        done = subprocess.run(
            [*command, "--env-vars", str(env_file), "--docker-network", "host"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert set(report) >= {"due", "redriven", "woken"}, (report, time.monotonic() - t0)


@pytest.mark.skipif(DOCKER, reason="checks the message given where no Docker engine answers")
def test_deploy_localstack_without_docker_stops_before_deploying_anything(tmp_path: Path):
    done = subprocess.run(
        [str(ROOT / "scripts" / "deploy-localstack")],
        cwd=ROOT,
        env={**os.environ, "LOCALSTACK_ENDPOINT": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "LocalStack runs Lambda code in Docker containers" in done.stderr
    assert "--check-non-lambda" in done.stderr
    assert "sam build" not in done.stderr and "starting LocalStack" not in done.stderr
