"""Configuration from the environment variables template.yaml sets."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.errors import InvalidInput, ResourceMissing

#: Every variable a function reads; a test checks template.yaml sets the required ones.
REQUIRED = ("LOOM_TABLE_NAME", "LOOM_QUEUE_URL", "LOOM_DLQ_URL")
OPTIONAL = (
    "LOOM_STAGE",
    "LOOM_SHARDS",
    "LOOM_LOG_LEVEL",
    "LOOM_WORKFLOW_MODULES",
    "LOOM_LEASE_SECONDS",
    "LOOM_RETENTION_DAYS",
    "LOOM_CHAIN",
    "LOOM_VISIBILITY_TIMEOUT",
    "LOOM_HEARTBEAT_SECONDS",
    "LOOM_CHAOS_CRASH_AFTER_CHECKPOINT",
    # Signs the list cursors; the template sets it on the control plane only.
    "LOOM_CURSOR_SECRET",
    # Local stack only: never set by template.yaml.
    "LOOM_CLOCK_OFFSET_FILE",
)


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _retention(days: str | None) -> float:
    """LOOM_RETENTION_DAYS (template.yaml's RetentionDays) in seconds; unset: the engine's default."""
    if days is None or not days.strip():
        return EngineConfig.retention_seconds
    try:
        value = float(days)
    except ValueError:
        raise InvalidInput(f"LOOM_RETENTION_DAYS must be a number of days (0: keep for ever), not {days!r}") from None
    if not 0 <= value <= 3650 or value != value:
        raise InvalidInput(f"LOOM_RETENTION_DAYS must be between 0 and 3650, not {days!r}")
    return value * 86400.0


@dataclass(frozen=True)
class Settings:
    table_name: str
    queue_url: str
    dlq_url: str
    stage: str = "dev"
    shards: int = 4
    log_level: str = "INFO"
    workflow_modules: tuple[str, ...] = ("workflows",)
    lease_seconds: float = EngineConfig.lease_seconds
    chain: bool = True
    # template.yaml's: the queue's visibility timeout, which the worker's heartbeat keeps
    # extending while a batch runs (DESIGN.md, "Recovery in seconds").
    visibility_timeout: int = 20
    heartbeat_seconds: float = 5.0
    chaos_crash_after_checkpoint: bool = False
    cursor_secret: str = field(default="", repr=False)  # a secret: never in a log line
    clock_offset_file: str | None = None
    retention_seconds: float = EngineConfig.retention_seconds

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        missing = [name for name in REQUIRED if not env.get(name)]
        if missing:
            raise ResourceMissing(f"environment variables not set: {', '.join(missing)} (see template.yaml)")
        return cls(
            table_name=env["LOOM_TABLE_NAME"],
            queue_url=env["LOOM_QUEUE_URL"],
            dlq_url=env["LOOM_DLQ_URL"],
            stage=env.get("LOOM_STAGE", "dev"),
            shards=int(env.get("LOOM_SHARDS", "4")),
            log_level=env.get("LOOM_LOG_LEVEL", "INFO"),
            workflow_modules=tuple(
                m.strip() for m in env.get("LOOM_WORKFLOW_MODULES", "workflows").split(",") if m.strip()
            ),
            lease_seconds=float(env.get("LOOM_LEASE_SECONDS") or EngineConfig.lease_seconds),
            chain=_flag(env.get("LOOM_CHAIN", "true")),
            visibility_timeout=int(env.get("LOOM_VISIBILITY_TIMEOUT", "20")),
            heartbeat_seconds=float(env.get("LOOM_HEARTBEAT_SECONDS", "5")),
            chaos_crash_after_checkpoint=_flag(env.get("LOOM_CHAOS_CRASH_AFTER_CHECKPOINT", "off")),
            cursor_secret=env.get("LOOM_CURSOR_SECRET", ""),
            clock_offset_file=env.get("LOOM_CLOCK_OFFSET_FILE") or None,
            retention_seconds=_retention(env.get("LOOM_RETENTION_DAYS")),
        )

    def __post_init__(self) -> None:
        if self.visibility_timeout < 1:
            raise InvalidInput(f"LOOM_VISIBILITY_TIMEOUT must be at least 1 second, not {self.visibility_timeout}")
        if self.heartbeat_seconds < 0:
            raise InvalidInput(
                f"LOOM_HEARTBEAT_SECONDS must not be negative (0: no heartbeat), not {self.heartbeat_seconds:g}"
            )
        if self.heartbeat_seconds and 2 * self.heartbeat_seconds >= self.visibility_timeout:
            # One late or failed beat would let the message come back while its batch still runs.
            raise InvalidInput(
                f"LOOM_HEARTBEAT_SECONDS ({self.heartbeat_seconds:g}) must be below half of "
                f"LOOM_VISIBILITY_TIMEOUT ({self.visibility_timeout}): "
                "a message must stay hidden through one missed beat"
            )

    @property
    def adopt_quiet_seconds(self) -> float:
        """How long an execution must have been quiet before a redelivered stale message adopts its
        attempt (verdicts.may_adopt): the visibility timeout less two beats, since a dead worker's
        message comes back at least that long after its last write. With no heartbeat, a whole
        visibility timeout."""
        return float(self.visibility_timeout) - 2 * self.heartbeat_seconds

    @property
    def chaos(self) -> bool:
        """The one chaos switch: the crash-after-checkpoint hook and the example workflows' knobs."""
        return self.chaos_crash_after_checkpoint

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            shards=self.shards,
            lease_seconds=self.lease_seconds,
            chain=self.chain,
            adopt_quiet_seconds=self.adopt_quiet_seconds,
            retention_seconds=self.retention_seconds,
        )
