"""Loom's authoring API: everything a workflow and its tests need, in one import.

    from engine import RetryPolicy, StepContext, map_items, parallel, step, wait_for_callback, workflow

The runtime that runs workflows (``Engine``, ``process_batch``, the clocks, the configuration)
is for hosts (the Lambda functions, the local stack, the chaos kit), not for authors: each name
lives in its own module (engine.runtime, engine.batch, engine.clock, engine.config...).
tests/unit/test_authoring_api.py pins this list.
"""

from engine.errors import NonRetryableError
from engine.fanout_spec import map_items, parallel
from engine.poll_strategy import exponential, fixed
from engine.retry import RetryPolicy
from engine.state import Status
from engine.workflow import (
    NOT_YET,
    Registry,
    StepContext,
    child,
    create_callback,
    not_yet,
    sleep,
    step,
    wait_for_callback,
    wait_for_callbacks,
    wait_for_signal,
    wait_until,
    workflow,
)

__all__ = [
    "NOT_YET",
    "NonRetryableError",
    "Registry",
    "RetryPolicy",
    "Status",
    "StepContext",
    "child",
    "create_callback",
    "exponential",
    "fixed",
    "map_items",
    "not_yet",
    "parallel",
    "sleep",
    "step",
    "wait_for_callback",
    "wait_for_callbacks",
    "wait_for_signal",
    "wait_until",
    "workflow",
]
