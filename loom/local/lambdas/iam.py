"""Each function's execution role, locally: the template's own policies, assumed through STS.

In AWS, ``sam deploy`` creates each ``AWS::IAM::Role`` with its inline policies, and Lambda hands
the function temporary credentials of its role. Locally the embedded emulator (moto, with IAM
enforcement on: loom.local.emulator.moto_iam) gets the same roles with the same statements, and the
supervisor, standing in for the Lambda service, calls ``sts:AssumeRole`` for each function and puts
the credentials in the function's environment, as Lambda does. A call the role does not allow then
fails locally with ``AccessDeniedException`` / ``AccessDenied``, as it would on the first deployed run.

The one difference in the role itself: its trust policy names ``lambda.amazonaws.com``, which
cannot sign a request locally; the local role trusts the stack's admin user (the supervisor) instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loom.template import Template, TemplateError

ROLE_TYPE = "AWS::IAM::Role"
# SAM's default execution role (a function without Role): AWSLambdaBasicExecutionRole, logs only.
_BASIC_EXECUTION = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "*",
        }
    ],
}


@dataclass(frozen=True)
class FunctionRole:
    """The role one function runs as: its name and inline policies, resolved."""

    function: str  # the function's logical id
    role_name: str
    policies: tuple[tuple[str, str], ...]  # (PolicyName, the policy document as JSON)


def _role_logical_id(role: Any) -> str | None:
    if isinstance(role, dict) and "Fn::GetAtt" in role:
        target = role["Fn::GetAtt"]
        parts = target.split(".", 1) if isinstance(target, str) else list(target)
        if len(parts) == 2 and parts[1] == "Arn":
            return str(parts[0])
    return None


def _inline_policies(function: str, policies: Any) -> list[tuple[str, dict[str, Any]]]:
    """A SAM function's own ``Policies``: policy documents only (templates and managed names are refused)."""
    if policies is None:
        return []
    items = policies if isinstance(policies, list) else [policies]
    out = []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and "Statement" in item):
            raise TemplateError(
                f"{function}.Policies[{i}]: only policy documents ({{Statement: [...]}}) are applied locally; "
                "give the function its own AWS::IAM::Role (Role: !GetAtt ...Arn) instead"
            )
        out.append((f"{function}Policy{i}", item))
    return out


def function_roles(template: Template, refs: dict[str, Any], stack_name: str) -> dict[str, FunctionRole]:
    """Each function's role as the template defines it, intrinsics resolved against the local refs."""
    roles: dict[str, FunctionRole] = {}
    for logical_id in template.functions():
        props = template.resources[logical_id].get("Properties", {})
        role_id = _role_logical_id(props.get("Role"))
        if role_id is not None:
            resource = template.resources.get(role_id) or {}
            if resource.get("Type") != ROLE_TYPE:
                raise TemplateError(f"{logical_id}.Role names {role_id}, which is not an {ROLE_TYPE} of the template")
            policies = [
                (str(p["PolicyName"]), template.resolve(p["PolicyDocument"], refs))
                for p in (resource.get("Properties", {}).get("Policies") or [])
            ]
            name = f"{stack_name}-{role_id}"
        elif props.get("Role") is not None:
            raise TemplateError(f"{logical_id}.Role: only !GetAtt <a role of the template>.Arn is applied locally")
        else:
            policies = [("AWSLambdaBasicExecutionRole", _BASIC_EXECUTION)]
            policies += [
                (n, template.resolve(doc, refs)) for n, doc in _inline_policies(logical_id, props.get("Policies"))
            ]
            name = f"{stack_name}-{logical_id}Role"
        roles[logical_id] = FunctionRole(logical_id, name, tuple((n, json.dumps(doc)) for n, doc in policies))
    return roles


def local_trust(admin_arn: str) -> str:
    """The role's trust policy locally: the supervisor (the stack's admin) stands in for lambda.amazonaws.com."""
    statement = {"Effect": "Allow", "Principal": {"AWS": admin_arn}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def create_and_assume(
    session: Any, roles: Mapping[str, FunctionRole], session_names: Mapping[str, str], admin_arn: str, region: str
) -> dict[str, dict[str, str]]:
    """Create each role (once per name) and assume it for its function; the credentials as environment."""
    iam, sts = session.client("iam"), session.client("sts")
    arns: dict[str, str] = {}
    for role in roles.values():
        if role.role_name in arns:
            continue
        try:
            arn = iam.create_role(RoleName=role.role_name, AssumeRolePolicyDocument=local_trust(admin_arn))["Role"][
                "Arn"
            ]
        except iam.exceptions.EntityAlreadyExistsException:
            arn = iam.get_role(RoleName=role.role_name)["Role"]["Arn"]
        for name, document in role.policies:
            iam.put_role_policy(RoleName=role.role_name, PolicyName=name, PolicyDocument=document)
        arns[role.role_name] = arn
    envs: dict[str, dict[str, str]] = {}
    for function, role in roles.items():
        creds = sts.assume_role(RoleArn=arns[role.role_name], RoleSessionName=session_names[function][:64])[
            "Credentials"
        ]
        envs[function] = {
            "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
            "AWS_SESSION_TOKEN": creds["SessionToken"],
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        }
    return envs
