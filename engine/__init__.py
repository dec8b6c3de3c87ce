"""Loom's engine: checkpointed workflow executions on DynamoDB and SQS, free of Lambda."""

from engine.batch import Heartbeat, process_batch
from engine.clock import Clock, FakeClock, OffsetClock, SystemClock
from engine.config import EngineConfig, shard_of
from engine.errors import NonRetryableError
from engine.messages import StepMessage
from engine.retry import RetryDecision, RetryPolicy
from engine.runtime import Engine, Outcome, SweepReport
from engine.state import Attempt, Execution, Status, StepRecord, StepStatus
from engine.workflow import Phase, Registry, StepContext, default_registry, sleep, step, workflow

__all__ = [
    "Attempt",
    "Clock",
    "Engine",
    "EngineConfig",
    "Execution",
    "FakeClock",
    "Heartbeat",
    "NonRetryableError",
    "OffsetClock",
    "Outcome",
    "Phase",
    "Registry",
    "RetryDecision",
    "RetryPolicy",
    "Status",
    "StepContext",
    "StepMessage",
    "StepRecord",
    "StepStatus",
    "SweepReport",
    "SystemClock",
    "default_registry",
    "process_batch",
    "shard_of",
    "sleep",
    "step",
    "workflow",
]
