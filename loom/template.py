"""template.yaml, read: the one description of the system.

The local stack, the tests and the chaos kit create the table and queues from
here, so that what runs on a laptop is what ``sam deploy`` builds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"


class _CfnLoader(yaml.SafeLoader):
    """SafeLoader that keeps CloudFormation's short-form tags as {"Fn::X": ...}."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag)


def load(path: Path | str = TEMPLATE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_CfnLoader)


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str
    timeout: int
    memory: int
    environment: dict[str, Any]  # unresolved: Globals merged with the function's own
    events: dict[str, Any]


class Template:
    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self.doc = doc if doc is not None else load()
        self.resources: dict[str, Any] = self.doc["Resources"]
        self.parameters: dict[str, Any] = self.doc.get("Parameters", {})
        self.globals: dict[str, Any] = self.doc.get("Globals", {}).get("Function", {})

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == kind}

    def parameter_defaults(self) -> dict[str, str]:
        return {k: str(v.get("Default", "")) for k, v in self.parameters.items()}

    def functions(self) -> dict[str, FunctionSpec]:
        out = {}
        genv = self.globals.get("Environment", {}).get("Variables", {})
        for logical_id, res in self.of_type("AWS::Serverless::Function").items():
            props = res.get("Properties", {})
            env = {**genv, **props.get("Environment", {}).get("Variables", {})}
            out[logical_id] = FunctionSpec(
                logical_id=logical_id,
                handler=props.get("Handler", self.globals.get("Handler", "")),
                timeout=int(props.get("Timeout", self.globals.get("Timeout", 3))),
                memory=int(props.get("MemorySize", self.globals.get("MemorySize", 128))),
                environment=env,
                events=props.get("Events", {}),
            )
        return out

    def resolve(self, value: Any, refs: dict[str, Any]) -> Any:
        """Resolve Ref, Fn::GetAtt, Fn::Sub and Fn::If against ``refs``.

        ``refs`` maps parameter names and logical ids to values, and
        ``"Logical.Attr"`` to attribute values.
        """
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                if arg not in refs:
                    raise KeyError(f"template reference {arg!r} has no local value")
                return refs[arg]
            if key == "Fn::GetAtt":
                name = ".".join(arg) if isinstance(arg, list) else str(arg)
                if name not in refs:
                    raise KeyError(f"template attribute {name!r} has no local value")
                return refs[name]
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                scope = {**refs, **{k: self.resolve(v, refs) for k, v in extra.items()}}
                out = text
                for name, val in scope.items():
                    out = out.replace("${" + name + "}", str(val))
                return out
            if key == "Fn::If":
                cond, yes, no = arg
                return self.resolve(yes if self.condition(cond, refs) else no, refs)
        if isinstance(value, dict):
            return {k: self.resolve(v, refs) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, refs) for v in value]
        return value

    def condition(self, name: str, refs: dict[str, Any]) -> bool:
        return self.truth(self.doc.get("Conditions", {})[name], refs)

    def truth(self, expr: dict[str, Any], refs: dict[str, Any]) -> bool:
        """A condition or rule expression: Fn::Equals, Fn::Contains, Fn::Not, Fn::And, Fn::Or."""
        ((key, arg),) = expr.items()
        if key == "Fn::Equals":
            a, b = (self.resolve(x, refs) for x in arg)
            return str(a) == str(b)
        if key == "Fn::Contains":
            options, value = (self.resolve(x, refs) for x in arg)
            return str(value) in [str(o) for o in options]
        if key == "Fn::Not":
            return not self.truth(arg[0], refs)
        if key in ("Fn::And", "Fn::Or"):
            results = [self.truth(x, refs) for x in arg]
            return all(results) if key == "Fn::And" else any(results)
        if key == "Condition":
            return self.condition(arg, refs)
        raise NotImplementedError(f"condition {key} is not supported locally")

    def broken_rules(self, refs: dict[str, Any]) -> list[str]:
        """The AssertDescription of every template rule these parameters break (CloudFormation
        refuses such a stack before it creates anything; the local stack does the same)."""
        broken = []
        for name, rule in self.doc.get("Rules", {}).items():
            if "RuleCondition" in rule and not self.truth(rule["RuleCondition"], refs):
                continue
            for assertion in rule.get("Assertions", []):
                if not self.truth(assertion["Assert"], refs):
                    broken.append(f"{name}: {assertion.get('AssertDescription', 'assertion failed')}")
        return broken


def local_stack_id(refs: dict[str, Any]) -> str:
    """Stands for the stack's id locally: one fixed value per stack name, so the list cursors
    it signs (LOOM_CURSOR_SECRET) stay good across restarts of the local stack."""
    return f"arn:aws:cloudformation:{refs['AWS::Region']}:{refs['AWS::AccountId']}:stack/{refs['AWS::StackName']}/local"


def create_resources(
    session: Any, *, parameters: dict[str, str] | None = None, template: Template | None = None
) -> dict[str, str]:
    """Create the template's DynamoDB tables and SQS queues through ``session``.

    Returns refs for resolving function environments: parameter values, each
    logical id's Ref (table name, queue URL) and ``Logical.Arn`` attributes.
    Existing resources are reused, so calling it twice is harmless.
    """
    tpl = template or Template()
    refs: dict[str, Any] = {**tpl.parameter_defaults(), **(parameters or {})}
    refs.setdefault("AWS::Region", session.region_name)
    refs.setdefault("AWS::AccountId", "123456789012")
    refs.setdefault("AWS::StackName", f"loom-{refs.get('Stage', 'dev')}")
    refs.setdefault("AWS::StackId", local_stack_id(refs))
    broken = tpl.broken_rules(refs)
    if broken:
        raise ValueError("the template's rules refuse these parameters: " + "; ".join(broken))
    sqs = session.client("sqs")
    ddb = session.client("dynamodb")
    queues = tpl.of_type("AWS::SQS::Queue")
    # Queues that others point at (DLQs) first.
    ordered = sorted(queues, key=lambda q: "RedrivePolicy" in queues[q].get("Properties", {}))
    for logical_id in ordered:
        props = tpl.resolve(queues[logical_id].get("Properties", {}), refs)
        name = props.pop("QueueName", logical_id)
        attributes = {k: _attribute(v) for k, v in props.items() if k != "Tags"}
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[logical_id], refs[f"{logical_id}.Arn"], refs[f"{logical_id}.QueueName"] = url, arn, name
    for res in tpl.of_type("AWS::SQS::QueuePolicy").values():
        props = tpl.resolve(res["Properties"], refs)
        for url in props["Queues"]:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
    for logical_id, res in tpl.of_type("AWS::DynamoDB::Table").items():
        props = tpl.resolve(res.get("Properties", {}), refs)
        name = props["TableName"]
        kwargs = {
            k: props[k]
            for k in (
                "TableName",
                "AttributeDefinitions",
                "KeySchema",
                "GlobalSecondaryIndexes",
                "BillingMode",
                "ProvisionedThroughput",
            )
            if k in props
        }
        if "SSESpecification" in props:
            kwargs["SSESpecification"] = _sse(props["SSESpecification"])
        try:
            ddb.create_table(**kwargs)
            ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        except ddb.exceptions.ResourceInUseException:
            pass
        arn = ddb.describe_table(TableName=name)["Table"]["TableArn"]
        refs[logical_id], refs[f"{logical_id}.Arn"] = name, arn
    return refs


def _attribute(value: Any) -> str:
    """A queue property as the SQS API's attribute string."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _sse(spec: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's SSESpecification as CreateTable's."""
    out: dict[str, Any] = {"Enabled": bool(spec.get("SSEEnabled"))}
    if spec.get("SSEType"):
        out["SSEType"] = spec["SSEType"]
    if spec.get("KMSMasterKeyId"):
        out["KMSMasterKeyId"] = spec["KMSMasterKeyId"]
    return out


def function_environment(spec: FunctionSpec, refs: dict[str, Any], template: Template | None = None) -> dict[str, str]:
    tpl = template or Template()
    return {k: str(tpl.resolve(v, refs)) for k, v in spec.environment.items()}
