"""``--emulator aws``: point ``loom`` at a deployed stack through its CloudFormation outputs."""

from __future__ import annotations

import os
import time
from typing import Any

import boto3

OUTPUTS = {
    "ControlPlaneUrl": "control_plane_url",
    "TableName": "table",
    "StepQueueUrl": "queue_url",
    "DeadLetterQueueUrl": "dlq_url",
}


class StackNotReady(RuntimeError):
    """The CloudFormation stack is missing, failed, or lacks an output loom needs."""


def stack_info(stack_name: str, region: str | None = None, cloudformation: Any = None) -> dict[str, Any]:
    """The stack file's content for a deployed stack (no local functions, no emulator)."""
    cfn = cloudformation or boto3.session.Session(region_name=region).client("cloudformation")
    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except cfn.exceptions.ClientError as exc:
        raise StackNotReady(f"cannot read stack {stack_name!r}: {exc}") from exc
    if not stacks:
        raise StackNotReady(f"no stack named {stack_name!r}")
    stack = stacks[0]
    status = stack.get("StackStatus", "")
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status or "DELETE" in status:
        raise StackNotReady(f"stack {stack_name!r} is {status}; deploy it first (scripts/deploy-aws)")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    missing = [key for key in OUTPUTS if key not in outputs]
    if missing:
        raise StackNotReady(f"stack {stack_name!r} has no output(s) {', '.join(missing)}: is it Loom's template?")
    info: dict[str, Any] = {
        "emulator": "aws",
        "region": cfn.meta.region_name,
        # A stack deployed into LocalStack (scripts/deploy-localstack) is read through AWS_ENDPOINT_URL.
        "aws_endpoint_url": os.environ.get("AWS_ENDPOINT_URL") or None,
        "clock_offset_file": None,
        "supervisor_pid": None,
        "worker_pids": [],
        "started_at": time.time(),
        "stack_name": stack_name,
        "outputs": outputs,
    }
    info.update({field: outputs[key] for key, field in OUTPUTS.items()})
    return info
