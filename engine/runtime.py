"""The engine facade: one object holding the ports, whose methods are the services.

    control  (engine/control.py)  start, get, history, list, cancel, redrive_failed
    runner   (engine/runner.py)   handle a step message and chain what follows
    steps    (engine/steps.py)    run one attempt of a step (the kernel: engine/attempts.py)
    sweeper  (engine/sweeper.py)  wake due sleeps, re-drive lapsed leases, fire schedules
    verdicts (engine/verdicts.py) what a message means, decided without I/O

Every state change is a conditional write from the version that was read; the
rules are in DESIGN.md ("State machine").
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine import callbacks, control, handles, runner, schedules, signals, sweeper
from engine.clock import Clock
from engine.config import EngineConfig
from engine.errors import LoomError
from engine.messages import StepMessage
from engine.outcome import Outcome
from engine.ports import Faults, NoFaults, Page, Queue, Store
from engine.runner import Remaining
from engine.state import Execution, StepRecord
from engine.sweeper import SweepReport
from engine.workflow import Registry

__all__ = ["Engine", "Outcome", "Remaining", "SweepReport"]


@dataclass
class Engine:
    registry: Registry
    store: Store
    queue: Queue
    clock: Clock
    config: EngineConfig = field(default_factory=EngineConfig)
    faults: Faults = field(default_factory=NoFaults)
    services: Mapping[str, Any] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    # control plane
    def start(self, workflow: str, input: Any, execution_id: str | None = None) -> tuple[Execution, bool]:
        return control.start(self, workflow, input, execution_id)

    def get(self, execution_id: str) -> Execution:
        return control.get(self, execution_id)

    def history(self, execution_id: str) -> list[StepRecord]:
        return control.history(self, execution_id)

    def list(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page:
        return control.list_executions(self, status=status, workflow=workflow, limit=limit, cursor=cursor)

    def cancel(self, execution_id: str, *, compensate: bool = False) -> Execution:
        return control.cancel(self, execution_id, compensate=compensate)

    def redrive_failed(self, execution_id: str) -> Execution:
        return control.redrive_failed(self, execution_id)

    def migrate(
        self, execution_id: str, mapping: Mapping[str, str], version: int | None = None, *, at: str | None = None
    ) -> Execution:
        return control.migrate(self, execution_id, mapping, version, at=at)

    # waits (engine/callbacks.py, engine/signals.py)
    def complete_callback(self, token: str, action: str, body: Any = None) -> callbacks.Completion:
        if handles.is_handle_token(token):  # a handle's (create_callback), else a wait's own
            return handles.complete(self, token, callbacks.Action(action), body)
        return callbacks.complete(self, token, callbacks.Action(action), body)

    def signal(self, execution_id: str, name: str, payload: Any = None) -> signals.Sent:
        return signals.send(self, execution_id, name, payload)

    # worker
    def handle(
        self,
        message: StepMessage,
        *,
        redelivered: bool = False,
        remaining: Remaining | None = None,
        queue_wait: float = 0.0,
    ) -> Outcome:
        """``queue_wait``: how long the message waited in the queue (``EngineConfig.queue_wait``)."""
        parts = self
        if queue_wait > 0:
            parts = replace(self, config=replace(self.config, queue_wait=queue_wait))
        return runner.handle(parts, message, redelivered=redelivered, remaining=remaining)

    def dead_letter_raw(self, body: str, reason: LoomError, message_id: str | None = None) -> None:
        runner.dead_letter_raw(self, body, reason, message_id)

    # sweeper
    def sweep(
        self,
        now: float | None = None,
        *,
        first_shard: int | None = None,
        remaining: Remaining | None = None,
        shard_offset: int = 0,
    ) -> SweepReport:
        return sweeper.sweep(self, now, first_shard=first_shard, remaining=remaining, shard_offset=shard_offset)

    # schedules (engine/schedules.py): fired by the sweep
    def next_fires(self) -> dict[str, float | None]:
        """Each scheduled workflow's next fire time (epoch seconds; None: no fire time left)."""
        return schedules.next_fires(self, self.clock.now())

    def create_missing_schedules(self) -> int:
        """Create the schedule cursors a sweep would create now (before a clock jump)."""
        return schedules.create_missing(self, self.clock.now())
