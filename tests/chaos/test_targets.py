"""Targets the kit cannot fully drive skip the scenarios they cannot run, and say why."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from chaos import SCENARIOS
from chaos.runner import run_all
from chaos.scenario import PASS, SKIP
from chaos.target import CHAOS_WORKFLOWS, CRASH_HOOK, KILL, PURGE, REDEPLOY, TIME, Target
from engine.config import EngineConfig
from engine.sweeper import backlog_patience

pytestmark = pytest.mark.chaos


def deploy(parameters: dict[str, str]) -> None:
    """A stand-in for `sam deploy`: a stack with the template's parameters and outputs."""
    template = {
        "Parameters": {
            "ChaosCrashAfterCheckpoint": {"Type": "String", "Default": "off"},
            "WorkflowModules": {"Type": "String", "Default": "workflows"},
        },
        "Resources": {"StepQueue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "loom-dev-steps"}}},
        "Outputs": {
            "TableName": {"Value": "loom-dev"},
            "StepQueueUrl": {"Value": {"Ref": "StepQueue"}},
            "DeadLetterQueueUrl": {"Value": {"Ref": "StepQueue"}},
        },
    }
    boto3.client("cloudformation").create_stack(
        StackName="loom-dev",
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
    )


def test_a_default_deployment_skips_every_scenario_that_needs_a_lever_it_lacks() -> None:
    with mock_aws():
        deploy({})
        target = Target.deployed("loom-dev")
        assert target.kind == "aws" and target.table == "loom-dev" and target.queue_url.endswith("loom-dev-steps")
        # duplicate_delivery and signal_race need no lever: they run on any stack.
        skipped = [n for n in SCENARIOS if n not in ("duplicate_delivery", "signal_race")]
        rows = run_all(target, names=skipped, out=None)
    assert [r.status for r in rows] == [SKIP] * len(skipped)
    reasons = {r.name: r.reason for r in rows}
    assert "no process to kill" in reasons["crash_mid_step"]
    assert "ChaosCrashAfterCheckpoint=on" in reasons["crash_after_checkpoint"]
    assert "WorkflowModules=workflows,chaos.workflows" in reasons["poison_step"]
    assert "proxy" in reasons["throttling"]
    assert "time" in reasons["callback_race"] and "ChaosCrashAfterCheckpoint=on" in reasons["child_crash"]
    assert "redeploy: a deploy of the stack is `sam deploy`" in reasons["redeploy"]
    assert all(r.passed for r in rows)  # a skip is not a violation: the exit code stays 0


def test_a_chaos_deployment_enables_the_hook_and_the_chaos_workflows() -> None:
    with mock_aws():
        deploy({"ChaosCrashAfterCheckpoint": "on", "WorkflowModules": "workflows,chaos.workflows"})
        target = Target.deployed("loom-dev")
    assert target.can(CRASH_HOOK) and target.can(CHAOS_WORKFLOWS) and not target.can(KILL)
    assert target.why_not(CRASH_HOOK) is None
    assert not target.can(REDEPLOY)  # the chaos workflows deployed, but the kit never redeploys a stack


def test_skip_rows_render_as_skips_not_passes() -> None:
    from chaos.report import render_table

    with mock_aws():
        deploy({})
        rows = run_all(Target.deployed("loom-dev"), names=["throttling"], out=None)
    assert rows[0].status == SKIP and rows[0].status != PASS
    assert "0 passed, 0 failed, 1 skipped" in render_table(rows)


class FakeContainer:
    def __init__(self, cid: str, name: str) -> None:
        self.id, self.name, self.signals = cid, name, []

    def kill(self, signal: str) -> None:
        self.signals.append(signal)


class FakeDocker:
    def __init__(self, *containers: FakeContainer) -> None:
        self.containers = self
        self._all = containers

    def list(self, filters: dict) -> list[FakeContainer]:
        assert filters == {"status": "running"}
        return list(self._all)


def test_docker_kill_picks_the_container_a_step_ran_in_or_a_worker_lambda() -> None:
    from chaos.containers import docker_kill_container

    ran = FakeContainer("3f2a9c1d7e4b" + "0" * 52, "localstack-main-lambda-loom-dev-worker-3f2a")
    other = FakeContainer("a1b2c3d4e5f6" + "0" * 52, "localstack-main-lambda-loom-dev-sweeper-a1b2")
    gateway = FakeContainer("ffff" + "0" * 60, "loom-localstack")
    client = FakeDocker(gateway, other, ran)
    assert docker_kill_container("3f2a9c1d7e4b", client=client) == [ran.name]
    assert ran.signals == ["SIGKILL"] and other.signals == [] and gateway.signals == []
    assert docker_kill_container(client=client) == [ran.name]  # no hostname: a worker Lambda, not the sweeper
    assert docker_kill_container("0123456789ab", client=client) == []


def test_a_stack_deployed_into_localstack_kills_through_docker_or_says_why_not(monkeypatch) -> None:
    import chaos.target as target_module

    with mock_aws():
        deploy({})
        monkeypatch.setattr(target_module, "docker_available", lambda: (False, "no Docker engine answers (test)"))
        without = Target.deployed("loom-dev", endpoint_url="http://localhost:4566")
        monkeypatch.setattr(target_module, "docker_available", lambda: (True, "docker engine answers"))
        with_docker = Target.deployed("loom-dev", endpoint_url="http://localhost:4566")
    assert without.endpoint_url == "http://localhost:4566"
    assert "Lambda containers inside LocalStack: no Docker engine answers" in (without.why_not(KILL) or "")
    assert with_docker.can(KILL) and with_docker.docker_kill and with_docker.worker_pids() == []
    assert without.can(PURGE) and not without.can(TIME)


def test_a_run_on_localstack_says_when_dynamodb_comes_from_the_embedded_emulator() -> None:
    note = "offline: DynamoDB from the embedded emulator (host-mode LocalStack has no DynamoDB Local)"
    target = Target(
        kind="localstack",
        region="us-east-1",
        endpoint_url="http://localhost:4566",
        table="loom-chaos",
        queue_url="q",
        dlq_url="d",
        endpoints={"dynamodb": "http://127.0.0.1:5230"},
        note=note,
    )
    said = target.describe()
    assert said.startswith("http://localhost:4566") and note in said and "dynamodb at http://127.0.0.1:5230" in said
    assert target.client("dynamodb").meta.endpoint_url == "http://127.0.0.1:5230"
    assert target.client("sqs").meta.endpoint_url == "http://localhost:4566"


@pytest.mark.parametrize("lease", [6.0, 60.0])
def test_an_ended_child_is_given_its_parent_s_patience_to_leave_the_due_index(lease: float) -> None:
    """A sweep that finds the parent still waiting keeps the ended child due for a backlog's
    patience (the 1,000-execution soak's children settled after the old 60 s): the observers'
    bound covers that patience and two sweeps."""
    target = Target("embedded", "us-east-1", None, "t", "q", "d", settings={"LOOM_LEASE_SECONDS": str(lease)})
    patience = backlog_patience(EngineConfig(lease_seconds=lease), parked=False)
    assert target.settle_seconds >= patience + 2 * lease
    assert target.settle_seconds == max(60.0, patience + 2 * lease + 30)
