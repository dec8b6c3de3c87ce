"""``WorkflowTest``: run workflows in-process on a virtual clock that skips every timer."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, overload

from engine.batch import process_batch
from engine.callbacks import Completion
from engine.clock import FakeClock
from engine.compensation import SUFFIX, is_compensation
from engine.config import EngineConfig
from engine.ports import FaultPoint, Store
from engine.runtime import Engine, SweepReport
from engine.signals import Sent
from engine.state import Execution, Status, StepRecord, StepStatus
from engine.workflow import Phase, Registry, WorkflowSpec, default_registry
from loom.testing.memory import InMemoryStore
from loom.testing.moto_backend import earliest_wake, moto_store, reap_expired
from loom.testing.queue import Queued, VirtualQueue, sqs_timing

DAY = 86_400.0


class Backend(StrEnum):
    MEMORY = "memory"  # dicts that enforce the table's conditions: no emulator, no network
    MOTO = "moto"  # the table from template.yaml on moto's DynamoDB, in-process


class WorkerDied(BaseException):
    """A simulated worker death: not an ``Exception``, so nothing in the engine catches it."""


class StillRunning(AssertionError):
    """``run`` gave up: the virtual time or delivery budget ran out with work left."""


@dataclass
class _Armed:
    point: FaultPoint
    step: int | str | None
    times: int
    phase: Phase | None = None


class _Faults:
    """The engine's ``Faults`` port: kill the worker at an armed point."""

    def __init__(self, step_name: Callable[[str, int], str | None]) -> None:
        self._armed: list[_Armed] = []
        self._step_name = step_name
        self.fired: list[tuple[str, str, int]] = []  # (point, execution id, step index)

    def arm(self, point: FaultPoint, step: int | str | None, times: int, phase: Phase | None = None) -> None:
        self._armed.append(_Armed(point, step, times, phase))

    def point(self, name: str, **info: Any) -> None:
        execution_id, index = str(info.get("execution_id")), int(info.get("step", -1))
        for armed in self._armed:
            if armed.times == 0 or armed.point != name:
                continue
            if armed.step is not None and armed.step not in (index, self._step_name(execution_id, index)):
                continue
            if armed.phase is not None and armed.phase.value != info.get("phase", Phase.FORWARD.value):
                continue
            armed.times -= 1
            self.fired.append((name, execution_id, index))
            raise WorkerDied(f"worker killed at {name} of step {index}")


class WorkflowTest:
    """Workflows run in this process against a virtual clock; timers are skipped, not waited for.

    Sleeps, retry delays and leases are all points on the virtual clock: ``run`` delivers
    every message that is visible, then jumps the clock to the next timer and runs the
    sweeper, until nothing is left. A test of a day-long sleep takes milliseconds.
    """

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        services: Mapping[str, Any] | None = None,
        config: EngineConfig | None = None,
        backend: Backend | str = Backend.MEMORY,
        start: float = 1_700_000_000.0,
        seed: int = 0,
        visibility_timeout: float = 20.0,
        invocation_seconds: float = 60.0,
    ) -> None:
        self.clock = FakeClock(start)
        self.config = config or EngineConfig()
        self.queue = VirtualQueue(self.clock, visibility_timeout=visibility_timeout)
        self._resources = ExitStack()
        self.store: Store = self._make_store(Backend(backend))
        self.faults = _Faults(self._step_name)
        self.engine = Engine(
            registry=registry or default_registry,
            store=self.store,
            queue=self.queue,
            clock=self.clock,
            config=self.config,
            faults=self.faults,
            services=dict(services or {}),
            rng=random.Random(seed),
        )
        self._invocation_seconds = invocation_seconds
        self._duplicates = 0
        self.deliveries = 0
        self.deaths = 0

    def _make_store(self, backend: Backend) -> Store:
        if backend is Backend.MEMORY:
            return InMemoryStore(self.config.shards)

        return moto_store(self._resources, self.config.shards)

    def close(self) -> None:
        self._resources.close()

    def __enter__(self) -> WorkflowTest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # driving
    def start(self, workflow: str, input: Any = None, execution_id: str | None = None) -> str:
        """``input``: a dict, or a dataclass or model (stored as the JSON its workflow's serializer dumps)."""
        ex, _ = self.engine.start(workflow, {} if input is None else input, execution_id)
        return ex.id

    @overload
    def run(
        self, execution_id: str, *, max_time: float = ..., max_deliveries: int = ..., skip_waits: bool = ...
    ) -> Execution: ...

    @overload
    def run(
        self, execution_id: None = None, *, max_time: float = ..., max_deliveries: int = ..., skip_waits: bool = ...
    ) -> None: ...

    def run(
        self,
        execution_id: str | None = None,
        *,
        max_time: float = 400 * DAY,
        max_deliveries: int = 100_000,
        skip_waits: bool = False,
    ) -> Execution | None:
        """Deliver and skip time until ``execution_id`` ends (or, without one, until nothing is due).

        A WAITING execution waits on the outside world: ``run`` returns when that wait is all
        that is left (complete it with ``complete_callback``, ``signal``... and run again), unless
        ``skip_waits`` lets the clock jump to the wait's timeout.

        Raises ``StillRunning`` naming what is left when ``max_time`` seconds of virtual time
        or ``max_deliveries`` deliveries pass first: a test never hangs.
        """
        deadline = self.clock.now() + max_time
        budget = max_deliveries
        while not self._settled(execution_id):
            queued = self.queue.receive()
            if queued is not None:
                if budget == 0:
                    raise StillRunning(self._left(f"{max_deliveries} deliveries"))
                budget -= 1
                self._deliver(queued)
                continue
            upcoming = [t for t in (self.queue.next_visible(), self._next_wake(skip_waits)) if t is not None]
            if not upcoming:
                break
            nxt = max(min(upcoming), self.clock.now())
            if nxt > deadline:
                raise StillRunning(self._left(f"{max_time:g} s of virtual time"))
            self.clock.set(nxt)
            self.engine.sweep()
        if execution_id is None:
            return None
        return self.execution(execution_id)

    def deploy(self, registry: Registry) -> None:
        """Swap the deployed workflows, as a deploy between two deliveries does: messages in
        flight and executions in the store stay; the next delivery or sweep runs the new code."""
        self.engine.registry = registry

    def advance(self, seconds: float) -> SweepReport:
        """Move the clock as ``loom time advance`` does, then run the sweeper once.

        A scheduled workflow's firings that fall due in the jump start (its ``fired`` count):
        one run for the latest of them, since one sweep sees them all at once, as after an
        outage (``catch_up="skip"`` runs none unless the jump lands within the grace of a
        fire time). Advance one period at a time to see each firing.
        """
        self.engine.create_missing_schedules()  # a cursor made after the jump would start there
        self.clock.advance(seconds)
        report = self.engine.sweep()
        self.expire()
        return report

    def expire(self) -> int:
        """Delete what DynamoDB's TTL would have deleted by now (``advance`` calls it): an
        execution past its retention, and every item it left (engine/retention.py)."""
        reap = getattr(self.store, "reap", None)
        if reap is not None:
            deleted: int = reap(self.clock.now())
            return deleted

        return reap_expired(self.store, self.clock.now())

    def next_fires(self) -> dict[str, float | None]:
        """Each scheduled workflow's next fire time on the virtual clock."""
        return self.engine.next_fires()

    # the outside world (waits)
    def complete_callback(self, token: str, result: dict[str, Any] | None = None) -> Completion:
        """What ``POST /callbacks/{token}/succeed`` does; ``WaitEnded`` (410) if the wait has ended."""
        return self.engine.complete_callback(token, "succeed", {"result": result})

    def fail_callback(self, token: str, error_type: str = "Rejected", message: str = "") -> Completion:
        """What ``POST /callbacks/{token}/fail`` does: the attempt fails through the step's retry policy."""
        return self.engine.complete_callback(token, "fail", {"error": {"type": error_type, "message": message}})

    def callback_token(self, execution_id: str, name: str) -> str:
        """The token of callback handle ``name`` (``create_callback``): what ``ctx.callback_token``
        gives a step of the execution, to complete with ``complete_callback`` and the rest."""
        ex = self.engine.get(execution_id)
        value = ex.context.get(name)
        if not (isinstance(value, dict) and value.get("$loom") == "callback"):
            raise KeyError(f"execution {execution_id!r} holds no callback handle {name!r}")
        handle = self.store.get_handle(execution_id, int(value["step"]))
        if handle is None:
            raise KeyError(f"callback handle {name!r} of {execution_id!r} is not in the store")
        return handle.token

    def heartbeat(self, token: str) -> Completion:
        return self.engine.complete_callback(token, "heartbeat", None)

    def signal(self, execution_id: str, name: str, payload: dict[str, Any] | None = None) -> Sent:
        """What ``POST /executions/{id}/signals/{name}`` does: kept, and delivered if its wait is there."""
        return self.engine.signal(execution_id, name, payload or {})

    # faults
    def crash(
        self,
        point: FaultPoint | str,
        *,
        step: int | str | None = None,
        times: int = 1,
        phase: Phase | str | None = None,
    ) -> None:
        """Kill the worker at ``point`` (of ``step``, by index or name) the next ``times`` times.

        ``phase="compensate"`` kills it only while that step's compensation runs.

        The message of a killed worker is not deleted: it comes back after the visibility
        timeout, as a redelivery, exactly as SQS would hand it out again.
        """
        self.faults.arm(FaultPoint(point), step, times, None if phase is None else Phase(phase))

    def duplicate_next_deliveries(self, count: int = 1) -> None:
        """The next ``count`` messages are each delivered twice, as SQS may."""
        self._duplicates += count

    # reading
    def execution(self, execution_id: str) -> Execution:
        return self.engine.get(execution_id)

    def value(self, execution_id: str, name: str, type_: Any = None) -> Any:
        """The execution's context value ``name`` (a typed step's result lands under its name), loaded
        as ``type_`` through the workflow's serializer, as ``ctx.get(name, type_)`` would."""
        ex = self.engine.get(execution_id)
        data = ex.context[name]
        return data if type_ is None else self.engine.registry.of(ex).serializer.load(data, type_)

    def status(self, execution_id: str) -> str:
        return self.engine.get(execution_id).status.value

    def history(self, execution_id: str) -> list[StepRecord]:
        return self.engine.history(execution_id)

    def steps(self, execution_id: str) -> list[tuple[str, str, list[str]]]:
        """Each step as (name, status, [attempt outcomes]): compact to assert on."""
        return [(r.name, r.status.value, [a.outcome.value for a in r.attempts]) for r in self.history(execution_id)]

    def compensations(self, execution_id: str) -> list[str]:
        """The steps whose compensation committed, in the order they ran (reverse step order)."""
        return [
            r.name.removesuffix(SUFFIX)
            for r in self.history(execution_id)
            if is_compensation(r) and r.status is StepStatus.COMPLETED
        ]

    @property
    def dead_letters(self) -> list[dict[str, Any]]:
        return list(self.queue.dead_letters)

    # internals
    def _deliver(self, queued: Queued) -> None:
        twin = None
        if self._duplicates:
            self._duplicates -= 1
            twin = self.queue.copy_of(queued)
        self._invoke(queued)
        if twin is not None:
            self.queue.receive()  # the twin is visible now; take it as the next delivery
            self._invoke(twin)

    def _invoke(self, queued: Queued) -> None:
        self.deliveries += 1
        began = self.clock.now()
        event = {"Records": [_record(queued)]}
        try:
            answer = process_batch(
                self.engine,
                event,
                remaining=lambda: self._invocation_seconds - (self.clock.now() - began),
            )
        except WorkerDied:
            self.deaths += 1
            return  # not deleted: visible again after the visibility timeout
        if not answer["batchItemFailures"]:
            self.queue.delete(queued)

    def _settled(self, execution_id: str | None) -> bool:
        # BLOCKED waits for a deploy (``deploy``) or a migration, as a wait for the outside world.
        if execution_id is None:
            return False
        ex = self.engine.get(execution_id)
        return ex.terminal or ex.status is Status.BLOCKED

    def _next_wake(self, skip_waits: bool) -> float | None:
        next_wake = getattr(self.store, "next_wake", None)
        if next_wake is not None:
            found: float | None = next_wake(skip_waits=skip_waits)
            return found

        return earliest_wake(self.store, self.config.shards, skip_waits=skip_waits)

    def _step_name(self, execution_id: str, index: int) -> str | None:
        ex = self.store.get_execution(execution_id)
        if ex is None or ex.workflow not in self.engine.registry:
            return None
        spec: WorkflowSpec | None = self.engine.registry.matching(ex.workflow, ex.fingerprint, ex.workflow_version)
        if spec is None:
            return None
        return spec.steps[index].name if 0 <= index < len(spec.steps) else None

    def _left(self, what: str) -> str:
        page = self.engine.list(limit=1000)
        open_ = [f"{ex.id} {ex.status.value} at step {ex.current_step}" for ex in page.items if not ex.terminal]
        return f"gave up after {what}; still open: {', '.join(open_) or 'none'}"


def _record(queued: Queued) -> dict[str, Any]:
    """The record Lambda's event source would hand the worker, SQS's timestamps included."""
    stamps, held = sqs_timing(queued.sent_at, queued.first_received_at, queued.delay_seconds)
    return {
        "messageId": queued.message_id,
        "receiptHandle": queued.message_id,
        "body": queued.body,
        "attributes": {"ApproximateReceiveCount": str(queued.receive_count), **stamps},
        "messageAttributes": held,
        "eventSource": "aws:sqs",
    }


def run_workflow(
    workflow: str, input: Any = None, *, registry: Registry | None = None, **options: Any
) -> tuple[Execution, list[StepRecord]]:
    """One call for the common case: start, run to the end, return the execution and its history."""
    with WorkflowTest(registry, **options) as test:
        execution_id = test.start(workflow, input)
        ex = test.run(execution_id)
        assert ex is not None
        return ex, test.history(execution_id)
