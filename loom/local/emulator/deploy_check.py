"""template.yaml without its functions, deployed through LocalStack's CloudFormation as a check.

LocalStack runs Lambda code in Docker containers: where no engine answers, ``sam deploy`` of the
whole template creates the table and queues, fails on the first function and rolls everything
back. ``scripts/deploy-localstack --check-non-lambda`` runs this module instead: it derives a
template of the resources LocalStack can create here (no functions; no tables when its DynamoDB
would need a download), with every reference to a dropped resource replaced by the value it would
have, deploys it, checks CREATE_COMPLETE, and deletes it again.

    python -m loom.local.emulator.deploy_check [--endpoint-url URL] [--keep] [--stack-name NAME]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from loom.local.emulator.aws_services import template_services
from loom.local.emulator.backends import (
    DynamoSource,
    EmulatorError,
    LocalStackEmulator,
    docker_available,
    fake_credentials,
)
from loom.template import TEMPLATE
from loom.template import load as load_template

LAMBDA_TYPES = frozenset({"AWS::Serverless::Function", "AWS::Lambda::Function"})
TABLE_TYPE = "AWS::DynamoDB::Table"
DONE = frozenset({"CREATE_COMPLETE"})
FAILED_SUFFIXES = ("FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_IN_PROGRESS")


class CheckError(RuntimeError):
    """The derived template could not be made, or LocalStack's CloudFormation did not create it."""


@dataclass(frozen=True)
class Derived:
    template: dict[str, Any]
    dropped: dict[str, str]  # logical id -> why


def lambda_verdict(docker: tuple[bool, str]) -> str | None:
    """Why LocalStack cannot run the template's Lambdas here (None: it can, a Docker engine answers)."""
    ok, why = docker
    if ok:
        return None
    return (
        f"LocalStack runs Lambda code in Docker containers, and {why}: `sam deploy` would create the table and "
        "queues, fail on the first function and roll the stack back. `scripts/deploy-localstack --check-non-lambda` "
        "deploys the template's other resources through LocalStack's CloudFormation instead"
    )


def _table_values(logical_id: str, props: dict[str, Any]) -> dict[str, str]:
    """What Ref and the ARN of a dropped table would be, as Fn::Sub text."""
    name = props.get("TableName", logical_id)
    if isinstance(name, dict) and set(name) == {"Fn::Sub"} and isinstance(name["Fn::Sub"], str):
        name = name["Fn::Sub"]
    if not isinstance(name, str):
        raise CheckError(f"{logical_id}.TableName must be a string or a one-argument Fn::Sub to stand in for it")
    arn = "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/" + name
    return {"Ref": name, "Arn": arn}


def _replace(node: Any, stand_ins: dict[str, dict[str, str]]) -> Any:
    """``node`` with Ref / GetAtt / ${...} of dropped tables replaced by their stand-in values."""
    if isinstance(node, list):
        return [_replace(x, stand_ins) for x in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in stand_ins:
        return {"Fn::Sub": stand_ins[node["Ref"]]["Ref"]}
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        logical, _, attr = (target if isinstance(target, str) else ".".join(target)).partition(".")
        if logical in stand_ins:
            if attr not in stand_ins[logical]:
                raise CheckError(f"no stand-in for {logical}.{attr} of a dropped table")
            return {"Fn::Sub": stand_ins[logical][attr]}
    if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str):
        text = node["Fn::Sub"]
        for logical, values in stand_ins.items():
            text = text.replace("${" + logical + ".Arn}", values["Arn"]).replace("${" + logical + "}", values["Ref"])
        return {"Fn::Sub": text}
    return {k: _replace(v, stand_ins) for k, v in node.items()}


def _names(node: Any) -> set[str]:
    """Every logical id or parameter ``node`` refers to (Ref, GetAtt, ${...} in Sub, DependsOn aside)."""
    out: set[str] = set()
    if isinstance(node, list):
        for x in node:
            out |= _names(x)
    elif isinstance(node, dict):
        if set(node) == {"Ref"} and isinstance(node["Ref"], str):
            out.add(node["Ref"])
        elif set(node) == {"Fn::GetAtt"}:
            target = node["Fn::GetAtt"]
            out.add((target if isinstance(target, str) else str(target[0])).split(".")[0])
        elif set(node) == {"Fn::Sub"}:
            arg = node["Fn::Sub"]
            text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            for name in _sub_names(text):
                if name not in variables:
                    out.add(name.split(".")[0])
            out |= _names(variables)
        else:
            for value in node.values():
                out |= _names(value)
    return out


def _sub_names(text: str) -> Iterable[str]:
    start = 0
    while (i := text.find("${", start)) >= 0:
        j = text.find("}", i)
        if j < 0:
            return
        name = text[i + 2 : j]
        if not name.startswith("!"):
            yield name
        start = j + 1


def derive(doc: dict[str, Any], *, drop_tables: bool) -> Derived:
    """The template without its functions (and, with ``drop_tables``, its tables), references mended."""
    doc = copy.deepcopy(doc)
    resources: dict[str, Any] = doc["Resources"]
    dropped = {
        k: "a function: LocalStack runs Lambda only in Docker"
        for k, v in resources.items()
        if v["Type"] in LAMBDA_TYPES
    }
    stand_ins: dict[str, dict[str, str]] = {}
    if drop_tables:
        for logical_id, res in resources.items():
            if res["Type"] == TABLE_TYPE:
                dropped[logical_id] = "a table: LocalStack's DynamoDB would download DynamoDB Local"
                stand_ins[logical_id] = _table_values(logical_id, res.get("Properties", {}))
    kept = {k: _replace(v, stand_ins) for k, v in resources.items() if k not in dropped}
    # Dropping goes on while something kept still names what is gone (SAM's generated ids count as gone too).
    generated = {f"{k}{suffix}" for k in dropped for suffix in ("Url", "Role", "Tick", "Steps")}
    gone = set(dropped) | generated
    for res in kept.values():
        depends = res.get("DependsOn")
        if depends is not None:
            left = [d for d in ([depends] if isinstance(depends, str) else depends) if d not in gone]
            if left:
                res["DependsOn"] = left
            else:
                res.pop("DependsOn")
    for logical_id, res in kept.items():
        dangling = _names(res) & gone
        if dangling:
            raise CheckError(f"{logical_id} refers to {sorted(dangling)}, which LocalStack cannot create here")
    doc["Resources"] = kept
    outputs = {k: _replace(v, stand_ins) for k, v in (doc.get("Outputs") or {}).items()}
    doc["Outputs"] = {k: v for k, v in outputs.items() if not _names(v) & gone}
    if not doc["Outputs"]:
        doc.pop("Outputs")
    if not any(str(v["Type"]).startswith("AWS::Serverless::") for v in kept.values()):
        doc.pop("Transform", None)
        doc.pop("Globals", None)
    return Derived(doc, dropped)


def _wait(cfn: Any, stack: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
        status = described["StackStatus"]
        if status in DONE:
            return dict(described)
        if status.endswith(FAILED_SUFFIXES) or time.monotonic() > deadline:
            events = cfn.describe_stack_events(StackName=stack)["StackEvents"]
            reasons = [
                f"{e['LogicalResourceId']}: {e['ResourceStatus']} {e.get('ResourceStatusReason', '')}".strip()
                for e in events
                if "FAILED" in e["ResourceStatus"]
            ]
            raise CheckError(f"stack {stack} is {status}: " + ("; ".join(reasons[:5]) or "no failure reason given"))
        time.sleep(0.5)


def deploy(
    session: Any, derived: Derived, stack: str, parameters: dict[str, str], timeout: float = 300.0
) -> dict[str, Any]:
    """Create the stack from the derived template; CheckError unless CREATE_COMPLETE."""
    cfn = session.client("cloudformation")
    cfn.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(derived.template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    described = _wait(cfn, stack, timeout)
    resources = cfn.describe_stack_resources(StackName=stack)["StackResources"]
    return {
        "stack": stack,
        "status": described["StackStatus"],
        "resources": {r["LogicalResourceId"]: r["ResourceStatus"] for r in resources},
        "outputs": {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])},
    }


def _session(endpoint_url: str, region: str) -> Any:
    creds = fake_credentials(region)
    session = boto3.session.Session(
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=creds["AWS_SESSION_TOKEN"],
        region_name=region,
    )
    return _Endpoint(session, endpoint_url)


class _Endpoint:
    def __init__(self, session: Any, endpoint_url: str) -> None:
        self._session, self.endpoint_url = session, endpoint_url

    def client(self, name: str) -> Any:
        return self._session.client(name, endpoint_url=self.endpoint_url)


def check(endpoint_url: str | None, *, stack: str, region: str, keep: bool, template: Path, out: Any) -> int:
    doc = load_template(template)
    localstack = LocalStackEmulator(endpoint_url, services=template_services(doc["Resources"]))
    try:
        localstack.start()
    except EmulatorError as exc:
        out.write(f"deploy-localstack: {exc}\n")
        return 1
    try:
        drop_tables = localstack.dynamodb is DynamoSource.EMBEDDED
        derived = derive(doc, drop_tables=drop_tables)
        for logical_id, why in derived.dropped.items():
            out.write(f"  left out {logical_id}: {why}\n")
        session = _session(localstack.endpoint_url, region)
        result = deploy(session, derived, stack, {"Stage": "check"})
        out.write(json.dumps(result, indent=2) + "\n")
        out.write(
            f"deploy-localstack: {len(result['resources'])} resources of template.yaml created through LocalStack's "
            f"CloudFormation ({localstack.mode.value if localstack.mode else '?'} mode), stack {stack}\n"
        )
        if not keep:
            session.client("cloudformation").delete_stack(StackName=stack)
        return 0
    except CheckError as exc:
        out.write(f"deploy-localstack: {exc}\n")
        return 1
    finally:
        localstack.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loom.local.emulator.deploy_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--endpoint-url", default=None, help="LocalStack's endpoint (default http://localhost:4566)")
    parser.add_argument("--stack-name", default=None, help="the check's stack (default: loom-check-<random>)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--keep", action="store_true", help="leave the stack in LocalStack")
    parser.add_argument("--template", default=str(TEMPLATE))
    parser.add_argument(
        "--lambda-verdict", action="store_true", help="exit 1 with the reason when LocalStack cannot run Lambda here"
    )
    args = parser.parse_args(argv)
    if args.lambda_verdict:
        why = lambda_verdict(docker_available())
        if why is not None:
            sys.stderr.write(f"deploy-localstack: {why}\n")
            return 1
        return 0
    stack = args.stack_name or f"loom-check-{uuid.uuid4().hex[:8]}"
    return check(
        args.endpoint_url, stack=stack, region=args.region, keep=args.keep, template=Path(args.template), out=sys.stdout
    )


if __name__ == "__main__":
    sys.exit(main())
