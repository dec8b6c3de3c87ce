"""scripts/deploy-localstack's two guards: stop early where LocalStack cannot run Lambda, and the
non-Lambda check's derived template (functions, and offline the table, left out; references mended)."""

from __future__ import annotations

import copy
import json

import pytest
from cfnlint.api import lint

from loom.local.emulator.deploy_check import CheckError, derive, lambda_verdict
from loom.template import load

pytestmark = pytest.mark.integration


def _errors(doc: dict) -> list[str]:
    return [f"{m.rule.id}: {m.message}" for m in lint(json.dumps(doc)) if m.rule.id.startswith("E")]


@pytest.mark.parametrize("drop_tables", [False, True])
def test_the_derived_template_has_no_function_and_lints_clean(drop_tables: bool) -> None:
    derived = derive(load(), drop_tables=drop_tables)
    resources = derived.template["Resources"]
    assert not [k for k, v in resources.items() if v["Type"].startswith("AWS::Serverless::")]
    assert {"WorkerFunction", "SweeperFunction", "ControlPlaneFunction"} <= set(derived.dropped)
    assert "Transform" not in derived.template and "Globals" not in derived.template
    assert {"StepQueue", "DeadLetterQueue", "QueuesTlsOnly", "WorkerRole", "WorkerLogGroup"} <= set(resources)
    assert ("Table" in resources) is not drop_tables
    assert _errors(derived.template) == [], "cfn-lint finds no error: no reference to a dropped resource"
    outputs = derived.template["Outputs"]
    assert "ControlPlaneUrl" not in outputs and "WorkerFunctionName" not in outputs
    assert {"StepQueueUrl", "DeadLetterQueueUrl", "TableName"} <= set(outputs)


def test_a_dropped_tables_references_become_the_values_it_would_have() -> None:
    derived = derive(load(), drop_tables=True)
    text = json.dumps(derived.template)
    assert '"Table"' not in text and "Table.Arn" not in text
    sweeper = derived.template["Resources"]["SweeperRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    resources = [r for s in sweeper["Statement"] for r in s["Resource"]]
    assert {
        "Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/loom-${Stage}"
    } in resources
    assert {
        "Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/loom-${Stage}/index/GSI1"
    } in resources
    assert derived.template["Outputs"]["TableName"]["Value"] == {"Fn::Sub": "loom-${Stage}"}


def test_a_kept_resource_that_needs_a_function_is_refused() -> None:
    doc = copy.deepcopy(load())
    doc["Resources"]["StepQueue"]["Properties"]["Tags"] = [{"Key": "fn", "Value": {"Fn::GetAtt": "WorkerFunction.Arn"}}]
    with pytest.raises(CheckError, match=r"StepQueue refers to \['WorkerFunction'\]"):
        derive(doc, drop_tables=False)


def test_without_docker_the_deploy_stops_early_and_says_what_to_run_instead() -> None:
    why = lambda_verdict((False, "no Docker engine answers (test)"))
    assert why is not None
    assert "no Docker engine answers (test)" in why and "--check-non-lambda" in why and "roll" in why
    assert lambda_verdict((True, "docker engine answers")) is None
