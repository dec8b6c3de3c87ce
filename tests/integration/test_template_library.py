"""loom.template reads template.yaml with the field's libraries (cfn-lint's decoder, samtranslator's
Globals, SAM CLI's intrinsic resolver) and refuses what AWS would refuse."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from loom.template import ROOT, Template, TemplateError, load, loads

pytestmark = pytest.mark.integration

REFS = {
    "Stage": "dev",
    "AWS::Region": "eu-west-1",
    "AWS::AccountId": "123456789012",
    "Table": "loom-dev",
    "Table.Arn": "arn:aws:dynamodb:eu-west-1:123456789012:table/loom-dev",
    "StepQueue": "http://q/steps",
}


@pytest.fixture(scope="module")
def tpl() -> Template:
    return Template()


def doc() -> dict[str, Any]:
    return load()


# ------------------------------------------------------------------ the YAML decoder


def test_short_form_tags_decode_as_cloudformation_does() -> None:
    parsed = loads(
        "Resources:\n"
        "  Q:\n"
        "    Type: AWS::SQS::Queue\n"
        "    Properties:\n"
        "      A: !GetAtt Dlq.Arn\n"
        "      B: !Sub ['${X}', {X: !Ref Stage}]\n"
        "      C: !Join [',', [a, !Select [0, !Split ['-', 'x-y']]]]\n"
        "      D: !Condition IsProd\n"
    )
    props = parsed["Resources"]["Q"]["Properties"]
    assert props["A"] == {"Fn::GetAtt": ["Dlq", "Arn"]}
    assert props["B"] == {"Fn::Sub": ["${X}", {"X": {"Ref": "Stage"}}]}
    assert props["C"] == {"Fn::Join": [",", ["a", {"Fn::Select": [0, {"Fn::Split": ["-", "x-y"]}]}]]}
    assert props["D"] == {"Condition": "IsProd"}
    assert type(props) is dict  # plain data, not the decoder's marked nodes


def test_duplicate_keys_are_refused_as_cloudformation_refuses_them() -> None:
    # PyYAML alone keeps the last one silently; CloudFormation rejects the template.
    text = "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n  Q:\n    Type: AWS::SNS::Topic\n"
    with pytest.raises(TemplateError, match="Duplicate"):
        loads(text)


def test_a_document_without_resources_is_refused() -> None:
    with pytest.raises(TemplateError, match="no Resources"):
        loads("Parameters: {}\n")


# ------------------------------------------------------------------ Fn::Sub and friends


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"Fn::Sub": "loom-${Stage}-worker"}, "loom-dev-worker"),
        ({"Fn::Sub": "${Table.Arn}/index/GSI1"}, REFS["Table.Arn"] + "/index/GSI1"),
        ({"Fn::Sub": "${!Literal}-${Stage}"}, "${Literal}-dev"),
        ({"Fn::Sub": "${!Table.Arn}"}, "${Table.Arn}"),
        ({"Fn::Sub": "${AWS::Region}:${AWS::AccountId}"}, "eu-west-1:123456789012"),
        ({"Fn::Sub": ["${Name}-${Stage}", {"Name": {"Ref": "Table"}}]}, "loom-dev-dev"),
        # A variable of the two-argument form wins over a parameter of the same name.
        ({"Fn::Sub": ["${Stage}", {"Stage": "prod"}]}, "prod"),
        ({"Fn::Sub": ["${A}", {"A": {"Fn::Sub": "${Stage}!"}}]}, "dev!"),
        ({"Fn::Join": ["/", [{"Ref": "Stage"}, {"Fn::GetAtt": ["Table", "Arn"]}]]}, "dev/" + REFS["Table.Arn"]),
        ({"Fn::Select": [1, {"Fn::Split": [",", "a,b,c"]}]}, "b"),
    ],
)
def test_intrinsics_resolve_like_cloudformation(tpl: Template, value: Any, expected: str) -> None:
    assert tpl.resolve(value, REFS) == expected


@pytest.mark.parametrize(
    "value", [{"Ref": "Nowhere"}, {"Fn::GetAtt": ["Table", "StreamArn"]}, {"Fn::Sub": "${Nowhere.Arn}"}]
)
def test_an_unknown_reference_fails_instead_of_being_guessed(tpl: Template, value: Any) -> None:
    # SAM CLI's own resolver would invent an ARN for any X.Arn; locally that hides a typo until deploy.
    with pytest.raises(KeyError, match="has no local value"):
        tpl.resolve(value, REFS)


def test_a_malformed_sub_is_a_template_error(tpl: Template) -> None:
    with pytest.raises(TemplateError, match="Fn::Sub takes"):
        tpl.resolve({"Fn::Sub": ["${A}", "not a map"]}, REFS)


def test_conditions_resolve(tpl: Template) -> None:
    refs = {**tpl.parameter_defaults(), **REFS}
    pitr = tpl.resources["Table"]["Properties"]["PointInTimeRecoverySpecification"]
    assert tpl.resolve(pitr, refs) == {"PointInTimeRecoveryEnabled": False}
    assert tpl.resolve(pitr, {**refs, "PointInTimeRecovery": "true"}) == {"PointInTimeRecoveryEnabled": True}
    assert tpl.condition("PitrEnabled", {**refs, "PointInTimeRecovery": "true"}) is True


# ------------------------------------------------------------------ Globals, as SAM merges them


def test_globals_merge_as_sam_does() -> None:
    d = doc()
    d["Globals"]["Function"]["ReservedConcurrentExecutions"] = 7
    d["Globals"]["Function"]["EventInvokeConfig"] = {"MaximumRetryAttempts": 1}
    d["Globals"]["Function"]["Layers"] = ["arn:aws:lambda:us-east-1:123456789012:layer:global:1"]
    d["Resources"]["SweeperFunction"]["Properties"]["Layers"] = ["arn:aws:lambda:us-east-1:123456789012:layer:own:1"]
    d["Resources"]["SweeperFunction"]["Properties"]["ReservedConcurrentExecutions"] = 3
    functions = Template(d).functions()
    assert functions["WorkerFunction"].reserved_concurrency == 7
    assert functions["SweeperFunction"].reserved_concurrency == 3  # its own wins
    assert functions["SweeperFunction"].event_invoke == {"MaximumRetryAttempts": 1}
    # Lists concatenate (global first), as SAM's Globals do.
    assert functions["SweeperFunction"].properties["Layers"] == [
        "arn:aws:lambda:us-east-1:123456789012:layer:global:1",
        "arn:aws:lambda:us-east-1:123456789012:layer:own:1",
    ]


class NoNetworkPolicies:
    def load(self) -> dict[str, str]:
        names = ("AWSLambdaBasicExecutionRole", "AWSLambdaSQSQueueExecutionRole")
        return {n: f"arn:aws:iam::aws:policy/service-role/{n}" for n in names}


def test_each_function_agrees_with_the_full_sam_transform(tpl: Template) -> None:
    """What the local stack runs (handler, timeout, memory, environment) is what SAM deploys."""
    from samtranslator.translator.transform import transform

    d = copy.deepcopy(tpl.doc)
    d["Globals"]["Function"]["CodeUri"] = "s3://bucket/loom.zip"
    deployed = {
        k: r["Properties"]
        for k, r in transform(d, {}, NoNetworkPolicies())["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function"
    }
    for logical_id, spec in tpl.functions().items():
        props = deployed[logical_id]
        assert props["Handler"] == spec.handler
        assert props["Timeout"] == spec.timeout
        assert props["MemorySize"] == spec.memory
        assert props["Environment"]["Variables"] == spec.environment


# ------------------------------------------------------------------ what AWS refuses, refused on reading


def _with_schedule(expression: str) -> dict[str, Any]:
    d = doc()
    d["Resources"]["SweeperFunction"]["Properties"]["Events"]["Tick"]["Properties"]["Schedule"] = expression
    return d


@pytest.mark.parametrize(
    "expression", ["rate(5 minute)", "rate(0 minutes)", "rate(1 minutes)", "cron(0 12 * * *)", "cron(0 12 * * * *)"]
)
def test_schedules_eventbridge_rejects_are_refused_when_reading(expression: str) -> None:
    with pytest.raises(TemplateError, match=r"SweeperFunction\.Events\.Tick\.Schedule: EventBridge rejects"):
        Template(_with_schedule(expression))


def test_valid_schedules_are_read() -> None:
    for expression in ("rate(5 minutes)", "cron(0/5 * * * ? *)"):
        Template(_with_schedule(expression))


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("WorkerFunction", "Events", "Steps", "Properties", "ScalingConfig"), {"MaximumConcurrency": 1}, "2-1000"),
        (("WorkerFunction", "Events", "Steps", "Properties", "ScalingConfig"), {"MaximumConcurrency": 1001}, "2-1000"),
        (("SweeperFunction", "EventInvokeConfig"), {"MaximumRetryAttempts": 3}, "0-2"),
        (("SweeperFunction", "EventInvokeConfig"), {"MaximumEventAgeInSeconds": 30}, "60-21600"),
        (("SweeperFunction", "ReservedConcurrentExecutions"), -1, "at least 0"),
    ],
)
def test_concurrency_and_retry_settings_out_of_range_are_refused(path: tuple[str, ...], value: Any, where: str) -> None:
    d = doc()
    node = d["Resources"][path[0]]["Properties"]
    for key in path[1:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(TemplateError, match=where):
        Template(d)


def test_the_repository_template_reads_clean() -> None:
    assert set(Template(load(ROOT / "template.yaml")).functions()) == {
        "WorkerFunction",
        "SweeperFunction",
        "ControlPlaneFunction",
    }
