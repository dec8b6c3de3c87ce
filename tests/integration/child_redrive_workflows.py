"""Workflows for the direct child redrive tests: a child that fails for good, and its parent."""

from __future__ import annotations

from engine import NonRetryableError, RetryPolicy, StepContext, workflow
from engine.workflow import child


def refuse(ctx: StepContext) -> None:
    raise NonRetryableError("the child's service refuses")


@workflow("redrive_kid")
class RedriveKid:
    steps = [refuse]
    retry = RetryPolicy(max_attempts=1)


@workflow("redrive_family")
class RedriveFamily:
    steps = [child("redrive_kid")]
    retry = RetryPolicy(max_attempts=1)
