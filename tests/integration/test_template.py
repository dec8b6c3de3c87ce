"""template.yaml and the code agree: handlers, environment variables, the table's keys and
indexes, capacity, queue settings, IAM; SAM accepts it (lint and transform) and builds it."""

from __future__ import annotations

import copy
import importlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from engine.adapters import dynamodb as ddb
from engine.config import EngineConfig
from functions import settings
from loom.local.lambdas.iam import function_roles, local_trust
from loom.template import ROOT, Template, TemplateError

pytestmark = pytest.mark.integration

SAM = ROOT / ".venv" / "bin" / "sam"
ALLOWED_RESOURCES = {"Table", "StepQueue", "DeadLetterQueue", "WorkerLogGroup"}


@pytest.fixture(scope="module")
def tpl() -> Template:
    return Template()


def sam_binary() -> str | None:
    return str(SAM) if SAM.exists() else shutil.which("sam")


# ------------------------------------------------------------------ functions


def test_every_handler_exists_and_is_callable(tpl: Template) -> None:
    functions = tpl.functions()
    assert {f.handler for f in functions.values()} == {
        "functions.worker.handler",
        "functions.sweeper.handler",
        "functions.api.handler",
    }
    for spec in functions.values():
        module, _, name = spec.handler.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), spec.handler


def test_runtime_and_code(tpl: Template) -> None:
    assert tpl.globals["Runtime"] == "python3.12"
    for res in tpl.of_type("AWS::Serverless::Function").values():
        assert res["Metadata"]["BuildMethod"] == "makefile"
    makefile = (ROOT / "Makefile").read_text()
    for logical_id in tpl.functions():
        assert f"build-{logical_id}" in makefile


def test_environment_variables_match_what_functions_read(tpl: Template) -> None:
    known = set(settings.REQUIRED) | set(settings.OPTIONAL)
    for spec in tpl.functions().values():
        names = set(spec.environment)
        assert set(settings.REQUIRED) <= names, spec.logical_id
        unknown = {n for n in names if n.startswith("LOOM_")} - known
        assert not unknown, f"{spec.logical_id} sets {unknown}, which functions/settings.py never reads"
        assert "LOOM_CLOCK_OFFSET_FILE" not in names  # local time travel only
    worker = tpl.functions()["WorkerFunction"]
    # A run starts with more than a whole lease ahead (engine/verdicts.run_is_covered) and
    # ends within the worker's timeout, so the lease must be at least that timeout.
    assert float(worker.environment["LOOM_LEASE_SECONDS"]) >= worker.timeout
    assert float(worker.environment["LOOM_LEASE_SECONDS"]) == EngineConfig.lease_seconds
    # The heartbeat's extension: shorter than the queue's own timeout (its first beat shortens
    # it), and long enough to outlast one missed beat (functions/settings.py refuses less).
    extension, beat = (
        int(worker.environment["LOOM_VISIBILITY_TIMEOUT"]),
        float(worker.environment["LOOM_HEARTBEAT_SECONDS"]),
    )
    assert 2 * beat < extension <= visibility(tpl)
    # Issue #23's target: a dead worker's step runs again within 30 s.
    assert extension <= 30
    wired = {name: "x" for name in settings.REQUIRED} | {
        k: v for k, v in worker.environment.items() if isinstance(v, str)
    }
    assert settings.Settings.from_env(wired).adopt_quiet_seconds > 0


def test_parameters_reach_the_functions(tpl: Template) -> None:
    env = tpl.globals["Environment"]["Variables"]
    assert env["LOOM_STAGE"] == {"Ref": "Stage"}
    assert env["LOOM_SHARDS"] == {"Ref": "Shards"}
    assert env["LOOM_LOG_LEVEL"] == {"Ref": "LogLevel"}
    assert tpl.parameters["LogLevel"]["Default"] in tpl.parameters["LogLevel"]["AllowedValues"]
    assert int(tpl.parameters["Shards"]["Default"]) == settings.Settings("t", "q", "d").shards


# ------------------------------------------------------------------ the table


def table(tpl: Template) -> dict[str, Any]:
    (res,) = tpl.of_type("AWS::DynamoDB::Table").values()
    return res["Properties"]


def test_key_schema_and_indexes_match_the_engine(tpl: Template) -> None:
    props = table(tpl)
    assert props["KeySchema"] == [
        {"AttributeName": ddb.PK, "KeyType": "HASH"},
        {"AttributeName": ddb.SK, "KeyType": "RANGE"},
    ]
    assert {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]} == ddb.KEY_ATTRIBUTES
    indexes = {i["IndexName"]: i for i in props["GlobalSecondaryIndexes"]}
    assert set(indexes) == {ddb.GSI1, ddb.GSI2}
    for name, (pk, sk) in ((ddb.GSI1, (ddb.GSI1PK, ddb.GSI1SK)), (ddb.GSI2, (ddb.GSI2PK, ddb.GSI2SK))):
        assert indexes[name]["KeySchema"] == [
            {"AttributeName": pk, "KeyType": "HASH"},
            {"AttributeName": sk, "KeyType": "RANGE"},
        ]
        # The engine reads only keys from both indexes and fetches items by key.
        assert indexes[name]["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_capacity_fits_the_free_tier_with_indexes(tpl: Template) -> None:
    props = table(tpl)
    assert props["BillingMode"] == "PROVISIONED"
    parts = [props["ProvisionedThroughput"]] + [i["ProvisionedThroughput"] for i in props["GlobalSecondaryIndexes"]]
    assert sum(p["ReadCapacityUnits"] for p in parts) <= 25
    assert sum(p["WriteCapacityUnits"] for p in parts) <= 25
    assert all(p["ReadCapacityUnits"] >= 1 and p["WriteCapacityUnits"] >= 1 for p in parts)


def test_point_in_time_recovery_is_a_parameter(tpl: Template) -> None:
    pitr = table(tpl)["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]
    assert pitr == {"Fn::If": ["PitrEnabled", True, False]}
    assert tpl.doc["Conditions"]["PitrEnabled"] == {"Fn::Equals": [{"Ref": "PointInTimeRecovery"}, "true"]}
    assert set(tpl.parameters["PointInTimeRecovery"]["AllowedValues"]) == {"true", "false"}


# ------------------------------------------------------------------ queues and events


def visibility(tpl: Template) -> int:
    return int(tpl.resources["StepQueue"]["Properties"]["VisibilityTimeout"])


def test_queues(tpl: Template) -> None:
    worker = tpl.functions()["WorkerFunction"]
    # Lambda refuses an SQS trigger whose queue's visibility timeout is below the function's.
    assert visibility(tpl) >= worker.timeout
    step = tpl.resources["StepQueue"]["Properties"]
    assert step["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    # A throttled delivery counts a receive each visibility timeout: half an hour of throttling
    # parks nothing (as 5 receives of 360 s did), and a poison message is parked within a day.
    receives = int(step["RedrivePolicy"]["maxReceiveCount"])
    assert 30 * 60 <= receives * visibility(tpl) <= 86400
    assert int(tpl.resources["DeadLetterQueue"]["Properties"]["MessageRetentionPeriod"]) == 14 * 24 * 3600


def test_events_and_the_function_url(tpl: Template) -> None:
    functions = tpl.functions()
    (worker_event,) = functions["WorkerFunction"].events.values()
    assert worker_event["Type"] == "SQS"
    assert worker_event["Properties"]["Queue"] == {"Fn::GetAtt": ["StepQueue", "Arn"]}
    assert worker_event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    (tick,) = functions["SweeperFunction"].events.values()
    assert (tick["Type"], tick["Properties"]["Schedule"]) == ("Schedule", "rate(1 minute)")
    urls = {
        k: r["Properties"]["FunctionUrlConfig"]
        for k, r in tpl.resources.items()
        if "FunctionUrlConfig" in r.get("Properties", {})
    }
    assert urls == {"ControlPlaneFunction": {"AuthType": "AWS_IAM"}}


def test_outputs(tpl: Template) -> None:
    outputs = tpl.doc["Outputs"]
    assert outputs["ControlPlaneUrl"]["Value"] == {"Fn::GetAtt": ["ControlPlaneFunctionUrl", "FunctionUrl"]}
    assert outputs["TableName"]["Value"] == {"Ref": "Table"}
    assert outputs["StepQueueUrl"]["Value"] == {"Ref": "StepQueue"}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": "DeadLetterQueue"}


# ------------------------------------------------------------------ IAM


def statements(tpl: Template, logical_id: str) -> list[dict[str, Any]]:
    props = tpl.resources[logical_id]["Properties"]
    if "Role" in props:
        role = tpl.resources[props["Role"]["Fn::GetAtt"][0]]["Properties"]
        return [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    return [s for p in props["Policies"] for s in p["Statement"]]


def referenced(resource: Any) -> str:
    """The logical id a policy Resource points at (GetAtt X.Arn or Sub ${X.Arn}/index/...)."""
    if "Fn::GetAtt" in resource:
        return resource["Fn::GetAtt"][0]
    text = resource["Fn::Sub"]
    return text[2 : text.index(".")]


def grants(tpl: Template, logical_id: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for st in statements(tpl, logical_id):
        assert st["Effect"] == "Allow"
        for resource in st["Resource"]:
            assert resource != "*"
            target = referenced(resource)
            assert target in ALLOWED_RESOURCES or target.endswith("LogGroup"), resource
            if "Fn::Sub" in resource and "/index/" in resource["Fn::Sub"]:
                target += "/" + resource["Fn::Sub"].rsplit("/", 1)[1]
            out.setdefault(target, set()).update(st["Action"])
    return out


def test_policies_are_least_privilege_and_enough(tpl: Template) -> None:
    worker = grants(tpl, "WorkerFunction")
    assert worker["Table"] == {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} <= worker["StepQueue"]
    assert {"sqs:SendMessage", "sqs:ChangeMessageVisibility"} <= worker["StepQueue"]
    assert worker["DeadLetterQueue"] == {"sqs:SendMessage"}

    sweeper = grants(tpl, "SweeperFunction")
    assert sweeper["Table/GSI1"] == {"dynamodb:Query"} and "Table/GSI2" not in sweeper
    # GetQueueAttributes: the backlog that tells a waiting message from a lost one (bug 5).
    assert sweeper["StepQueue"] == {"sqs:SendMessage", "sqs:GetQueueAttributes"}
    assert sweeper["DeadLetterQueue"] == {"sqs:SendMessage", "sqs:GetQueueAttributes"}  # the parked count

    api = grants(tpl, "ControlPlaneFunction")
    assert api["Table/GSI2"] == {"dynamodb:Query"} and "Table/GSI1" not in api
    assert {"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= api["Table"]
    assert api["StepQueue"] == {"sqs:SendMessage"}
    assert api["DeadLetterQueue"] == {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
    }


# ------------------------------------------------------------------ SAM itself


class NoNetworkPolicies:
    """Managed policy names -> ARNs for the translator, without asking IAM."""

    def load(self) -> dict[str, str]:
        names = ("AWSLambdaBasicExecutionRole", "AWSLambdaSQSQueueExecutionRole")
        return {n: f"arn:aws:iam::aws:policy/service-role/{n}" for n in names}


def test_sam_transform_generates_the_event_source_mapping_and_schedule() -> None:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    doc = yaml_parse((ROOT / "template.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["Globals"]["Function"]["CodeUri"] = "s3://loom-artifacts/loom.zip"  # what `sam package` puts there
    cfn = transform(doc, {"AWS::Region": "us-east-1"}, NoNetworkPolicies())
    resources = cfn["Resources"]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for res in resources.values():
        by_type.setdefault(res["Type"], []).append(res)

    (mapping,) = by_type["AWS::Lambda::EventSourceMapping"]
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["Properties"]["FunctionName"] == {"Ref": "WorkerFunction"}
    (rule,) = by_type["AWS::Events::Rule"]
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert rule["Properties"]["State"] == "ENABLED"
    (url,) = by_type["AWS::Lambda::Url"]
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    # No queue-wide managed policy on any role: every SQS grant is scoped to our queues.
    for role in by_type["AWS::IAM::Role"]:
        for arn in role["Properties"].get("ManagedPolicyArns", []):
            assert "SQSQueueExecutionRole" not in str(arn)
    functions = {r["Properties"]["Handler"]: r["Properties"] for r in by_type["AWS::Lambda::Function"]}
    assert {p["Runtime"] for p in functions.values()} == {"python3.12"}


def test_sam_validate_lint_passes() -> None:
    sam = sam_binary()
    if sam is None:
        pytest.skip("the sam CLI is not installed (pip install aws-sam-cli)")
    result = subprocess.run(
        [sam, "validate", "--lint", "--template-file", str(ROOT / "template.yaml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def python312() -> str | None:
    """A directory holding a working python3.12 (pyenv's shim fails outside a 3.12 pyenv)."""
    candidates = []
    try:
        prefix = subprocess.run(["pyenv", "prefix", "3.12.1"], capture_output=True, text=True, check=True).stdout
        candidates.append(Path(prefix.strip()) / "bin")
    except (OSError, subprocess.CalledProcessError):
        pass
    found = shutil.which("python3.12")
    if found:
        candidates.append(Path(found).parent)
    for directory in candidates:
        try:
            subprocess.run([str(directory / "python3.12"), "--version"], capture_output=True, check=True, timeout=30)
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
            continue
        return str(directory)
    return None


def test_sam_build_packages_only_the_function_code(tmp_path: Path) -> None:
    sam = sam_binary()
    if sam is None:
        pytest.skip("the sam CLI is not installed (pip install aws-sam-cli)")
    bin_dir = python312()
    if bin_dir is None:
        pytest.skip("sam build needs a python3.12 interpreter (the Lambda runtime) and none was found")
    build_dir = tmp_path / "build"
    result = subprocess.run(
        [sam, "build", "--build-dir", str(build_dir), "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0", "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for logical_id in ("WorkerFunction", "SweeperFunction", "ControlPlaneFunction"):
        package = build_dir / logical_id
        top = {p.name for p in package.iterdir()}
        assert {"engine", "functions", "workflows", "structlog"} <= top
        assert not top & {".venv", "tests", ".git", "loom", "chaos", "template.yaml"}
        assert (package / "functions" / "api.py").exists()
        size = sum(p.stat().st_size for p in package.rglob("*") if p.is_file())
        assert size < 5 * 1024 * 1024, f"{logical_id} package is {size} bytes"


# ------------------------------------------------------------------ samconfig.toml


def test_samconfig_deploys_without_prompts(tpl: Template) -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    deploy = config["default"]["deploy"]["parameters"]
    everywhere = config["default"]["global"]["parameters"]
    assert everywhere["stack_name"] and everywhere["region"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True and deploy["confirm_changeset"] is False
    overrides = dict(pair.split("=", 1) for pair in deploy["parameter_overrides"].split())
    assert set(overrides) <= set(tpl.parameters)
    for name, value in overrides.items():
        allowed = tpl.parameters[name].get("AllowedValues")
        assert allowed is None or value in [str(a) for a in allowed], name
    assert overrides["ChaosCrashAfterCheckpoint"] == "off"


# ------------------------------------------------------------------ no open doors


def transformed() -> dict[str, Any]:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    doc = yaml_parse((ROOT / "template.yaml").read_text())
    doc["Globals"]["Function"]["CodeUri"] = "s3://loom-artifacts/loom.zip"
    return transform(doc, {"AWS::Region": "us-east-1"}, NoNetworkPolicies())


def test_encryption_is_explicit(tpl: Template) -> None:
    assert table(tpl)["SSESpecification"] == {"SSEEnabled": True}
    for queue in ("StepQueue", "DeadLetterQueue"):
        assert tpl.resources[queue]["Properties"]["SqsManagedSseEnabled"] is True


def test_both_queues_refuse_requests_without_tls(tpl: Template) -> None:
    (policy,) = tpl.of_type("AWS::SQS::QueuePolicy").values()
    props = policy["Properties"]
    assert props["Queues"] == [{"Ref": "StepQueue"}, {"Ref": "DeadLetterQueue"}]
    (statement,) = props["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*" and statement["Action"] == "sqs:*"
    assert statement["Resource"] == [{"Fn::GetAtt": ["StepQueue", "Arn"]}, {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}]
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_each_function_logs_only_to_its_own_log_group(tpl: Template) -> None:
    for logical_id in tpl.functions():
        props = tpl.resources[logical_id]["Properties"]
        assert "Role" in props and "Policies" not in props, f"{logical_id} would get SAM's logs-on-* role"
        own = logical_id.removesuffix("Function") + "LogGroup"
        assert tpl.resources[logical_id]["DependsOn"] == own
        logs = [s for s in statements(tpl, logical_id) if any(a.startswith("logs:") for a in s["Action"])]
        assert logs == [
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": [{"Fn::Sub": "${" + own + ".Arn}"}],
            }
        ], logical_id
    # What CloudFormation gets: no role with the basic execution policy (logs on every group).
    resources = transformed()["Resources"]
    roles = [r for r in resources.values() if r["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 3
    for role in roles:
        assert not role["Properties"].get("ManagedPolicyArns"), role
        for policy in role["Properties"]["Policies"]:
            for st in policy["PolicyDocument"]["Statement"]:
                assert st["Resource"] != "*" and "*" not in st["Resource"], st


CHAOS_REFUSED = (
    "NoChaosInProd: ChaosCrashAfterCheckpoint may be on only in a development stage (dev, test, local, ci, chaos)."
)


@pytest.mark.parametrize(
    ("stage", "chaos", "refused"),
    [
        ("prod", "on", True),
        ("production", "on", True),
        # Not named prod, still not a development stage: a deny-list let these through.
        ("prod-eu", "on", True),
        ("live", "on", True),
        ("staging", "on", True),
        ("dev2", "on", True),
        ("prod", "off", False),
        ("prod-eu", "off", False),
        ("dev", "on", False),
        ("test", "on", False),
        ("ci", "on", False),
        ("chaos", "on", False),
    ],
)
def test_the_chaos_switch_is_on_only_in_a_development_stage(
    tpl: Template, stage: str, chaos: str, refused: bool
) -> None:
    refs = {**tpl.parameter_defaults(), "Stage": stage, "ChaosCrashAfterCheckpoint": chaos}
    broken = tpl.broken_rules(refs)
    assert bool(broken) is refused
    if refused:
        assert broken == [CHAOS_REFUSED]


def test_the_prod_rule_reaches_cloudformation() -> None:
    rule = transformed()["Rules"]["NoChaosInProd"]
    assert rule["RuleCondition"] == {
        "Fn::Not": [{"Fn::Contains": [["dev", "test", "local", "ci", "chaos"], {"Ref": "Stage"}]}]
    }
    assert rule["Assertions"][0]["Assert"] == {"Fn::Equals": [{"Ref": "ChaosCrashAfterCheckpoint"}, "off"]}


def test_the_control_plane_gets_a_per_stack_cursor_secret(tpl: Template) -> None:
    env = tpl.functions()["ControlPlaneFunction"].environment
    assert env["LOOM_CURSOR_SECRET"] == {"Fn::Sub": "${AWS::StackId}/${CursorSecret}"}
    assert tpl.parameters["CursorSecret"]["NoEcho"] is True
    for other in ("WorkerFunction", "SweeperFunction"):
        assert "LOOM_CURSOR_SECRET" not in tpl.functions()[other].environment


def test_local_resources_carry_the_encryption_and_the_queue_policy(aws: dict[str, Any]) -> None:
    import json

    described = aws["dynamodb"].describe_table(TableName=aws["Table"])["Table"]
    assert described["SSEDescription"]["Status"] == "ENABLED"
    for queue in ("StepQueue", "DeadLetterQueue"):
        attrs = aws["sqs"].get_queue_attributes(QueueUrl=aws[queue], AttributeNames=["All"])["Attributes"]
        assert attrs["SqsManagedSseEnabled"] == "true"
        (statement,) = json.loads(attrs["Policy"])["Statement"]
        assert statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert aws[f"{queue}.Arn"] in statement["Resource"]


def test_the_local_stack_refuses_chaos_in_prod_before_creating_anything(aws: dict[str, Any]) -> None:
    from loom.template import create_resources

    with pytest.raises(ValueError, match="may be on only in a development stage"):
        create_resources(aws["session"], parameters={"Stage": "prod-eu", "ChaosCrashAfterCheckpoint": "on"})
    assert "loom-prod-eu" not in aws["dynamodb"].list_tables()["TableNames"]
    assert not any("loom-prod-eu" in u for u in aws["sqs"].list_queues().get("QueueUrls", []))


def test_the_sweep_period_is_the_sweepers_schedule(tpl: Template) -> None:
    """The sweeper turns the clock into a tick number (its rotating start) with this period."""
    sweeper = tpl.functions()["SweeperFunction"]
    schedules = [e["Properties"]["Schedule"] for e in sweeper.events.values() if e.get("Type") == "Schedule"]
    assert schedules == ["rate(1 minute)"] and EngineConfig.sweep_period_seconds == 60


PHYSICAL = {
    "WorkerFunction": "loom-dev-worker",
    "SweeperFunction": "loom-dev-sweeper",
    "ControlPlaneFunction": "loom-dev-control-plane",
}


def test_each_functions_local_role_carries_its_template_policies_resolved(tpl: Template, aws: dict[str, Any]) -> None:
    refs = {k: v for k, v in aws.items() if isinstance(v, str)}
    roles = function_roles(tpl, refs, "loom-dev")
    assert {k: r.role_name for k, r in roles.items()} == {
        "WorkerFunction": "loom-dev-WorkerRole",
        "SweeperFunction": "loom-dev-SweeperRole",
        "ControlPlaneFunction": "loom-dev-ControlPlaneRole",
    }
    for logical_id, role in roles.items():
        ((policy_name, document),) = role.policies
        assert policy_name.startswith("loom-")
        local = json.loads(document)["Statement"]
        assert len(local) == len(statements(tpl, logical_id))
        resources = {r for st in local for r in st["Resource"]}
        assert all(r.startswith("arn:aws:") for r in resources), resources  # every intrinsic resolved
        assert f"arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/{PHYSICAL[logical_id]}:*" in resources
    worker = json.loads(roles["WorkerFunction"].policies[0][1])["Statement"]
    assert {"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": [aws["DeadLetterQueue.Arn"]]} in worker
    admin = "arn:aws:iam::123456789012:user/loom-admin"
    trust = json.loads(local_trust(admin))["Statement"]
    assert trust == [{"Effect": "Allow", "Principal": {"AWS": admin}, "Action": "sts:AssumeRole"}]


def test_a_function_without_a_role_gets_sams_default_and_its_own_policy_documents(
    tpl: Template, aws: dict[str, Any]
) -> None:
    refs = {k: v for k, v in aws.items() if isinstance(v, str)}
    doc = copy.deepcopy(tpl.doc)
    props = doc["Resources"]["SweeperFunction"]["Properties"]
    props.pop("Role")
    props["Policies"] = [{"Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "arn:x"}]}]
    roles = function_roles(Template(doc), refs, "loom-dev")
    names = [name for name, _ in roles["SweeperFunction"].policies]
    assert names == ["AWSLambdaBasicExecutionRole", "SweeperFunctionPolicy0"]
    assert json.loads(roles["SweeperFunction"].policies[1][1])["Statement"][0]["Resource"] == "arn:x"
    props["Policies"] = ["DynamoDBCrudPolicy"]
    with pytest.raises(TemplateError, match="only policy documents"):
        function_roles(Template(doc), refs, "loom-dev")
