"""Which AWS services a template's resources need, read from the template itself.

LocalStack serves only the services its ``SERVICES`` list names (compose.yaml, host mode):
a table with ``SSESpecification: {SSEEnabled: true}`` needs ``kms`` as well as ``dynamodb``,
or CreateTable answers 500 "Service 'kms' is not enabled". Deriving the list from the
resource types and the properties that pull in another service keeps the two from drifting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Deploying any template through CloudFormation: the stack itself, `sam deploy --resolve-s3`'s
# bucket for the code, and STS, which sam and the AWS CLI ask who the caller is.
DEPLOY_SERVICES = frozenset({"cloudformation", "s3", "sts"})

# CloudFormation namespaces whose LocalStack service name is not the namespace lower-cased.
_NAMESPACE_SERVICE = {"Serverless": "lambda", "ApiGateway": "apigateway", "ApiGatewayV2": "apigateway"}

# An SAM function's event source types -> the services they wire the function to.
_EVENT_SERVICES = {
    "SQS": {"sqs", "lambda"},
    "Schedule": {"events"},
    "ScheduleV2": {"scheduler"},
    "EventBridgeRule": {"events"},
    "SNS": {"sns"},
    "DynamoDB": {"dynamodb", "dynamodbstreams"},
    "Kinesis": {"kinesis"},
    "S3": {"s3"},
    "Api": {"apigateway"},
    "HttpApi": {"apigateway"},
    "CloudWatchLogs": {"logs"},
}


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


def _kms_used(kind: str, props: Mapping[str, Any]) -> bool:
    """Properties that make the service call KMS (server-side encryption with a KMS key)."""
    if kind == "AWS::DynamoDB::Table":
        sse = props.get("SSESpecification") or {}
        return _truthy(sse.get("SSEEnabled")) or bool(sse.get("KMSMasterKeyId"))
    if kind == "AWS::SQS::Queue":
        return bool(props.get("KmsMasterKeyId"))
    if kind == "AWS::Logs::LogGroup":
        return bool(props.get("KmsKeyId"))
    if kind in ("AWS::Serverless::Function", "AWS::Lambda::Function"):
        return bool(props.get("KmsKeyArn"))
    return False


def resource_services(kind: str, props: Mapping[str, Any]) -> set[str]:
    """The services one resource of type ``kind`` with ``props`` needs."""
    parts = kind.split("::")
    if len(parts) != 3 or parts[0] != "AWS":
        return set()  # Custom:: resources are the template author's own Lambdas
    namespace = parts[1]
    out = {_NAMESPACE_SERVICE.get(namespace, namespace.lower())}
    if kind == "AWS::Serverless::Function":
        out.add("logs")  # every function writes its log group
        if not props.get("Role"):
            out.add("iam")  # SAM makes it a role
        for event in (props.get("Events") or {}).values():
            out |= _EVENT_SERVICES.get(str(event.get("Type")), set())
    if _kms_used(kind, props):
        out.add("kms")
    return out


def template_services(resources: Mapping[str, Mapping[str, Any]], *, deploy: bool = True) -> set[str]:
    """Every service the template's ``resources`` need; with ``deploy`` also what a deploy calls."""
    out: set[str] = set(DEPLOY_SERVICES) if deploy else set()
    for resource in resources.values():
        out |= resource_services(str(resource.get("Type", "")), resource.get("Properties") or {})
    return out


def services_list(services: Iterable[str]) -> str:
    """LocalStack's ``SERVICES`` value: comma-separated, sorted so that diffs stay small."""
    return ",".join(sorted(set(services)))
