"""Configuration from the environment variables template.yaml sets."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.errors import ResourceMissing

#: Every variable a function reads; a test checks template.yaml sets the required ones.
REQUIRED = ("LOOM_TABLE_NAME", "LOOM_QUEUE_URL", "LOOM_DLQ_URL")
OPTIONAL = (
    "LOOM_STAGE",
    "LOOM_SHARDS",
    "LOOM_LOG_LEVEL",
    "LOOM_WORKFLOW_MODULES",
    "LOOM_LEASE_SECONDS",
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
    visibility_timeout: int = 360
    heartbeat_seconds: float = 30.0
    chaos_crash_after_checkpoint: bool = False
    cursor_secret: str = field(default="", repr=False)  # a secret: never in a log line
    clock_offset_file: str | None = None

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
            visibility_timeout=int(env.get("LOOM_VISIBILITY_TIMEOUT", "360")),
            heartbeat_seconds=float(env.get("LOOM_HEARTBEAT_SECONDS", "30")),
            chaos_crash_after_checkpoint=_flag(env.get("LOOM_CHAOS_CRASH_AFTER_CHECKPOINT", "off")),
            cursor_secret=env.get("LOOM_CURSOR_SECRET", ""),
            clock_offset_file=env.get("LOOM_CLOCK_OFFSET_FILE") or None,
        )

    @property
    def chaos(self) -> bool:
        """The one chaos switch: the crash-after-checkpoint hook and the example workflows' knobs."""
        return self.chaos_crash_after_checkpoint

    def engine_config(self) -> EngineConfig:
        return EngineConfig(shards=self.shards, lease_seconds=self.lease_seconds, chain=self.chain)
