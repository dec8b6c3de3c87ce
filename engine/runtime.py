"""The engine: starts executions, runs steps from messages, sweeps due executions.

Every state change is a conditional write from the version that was read. The
step's history record is the commit point of its result: once it says
COMPLETED, every later runner rolls the execution forward with that result
instead of running the step again.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from engine import transitions as tr
from engine.clock import Clock
from engine.config import EngineConfig
from engine.errors import (
    AlreadyTerminal,
    ConflictError,
    ExecutionAlreadyExists,
    ExecutionNotFound,
    InvalidInput,
    InvalidResult,
    LoomError,
    NotFailed,
    ResourceMissing,
    ResultTooLarge,
    UnknownWorkflow,
    WorkerLost,
    WorkflowDefinitionError,
)
from engine.limits import check_execution_id, check_item, meta_item_size
from engine.log import get_logger
from engine.messages import StepMessage
from engine.ports import Faults, NoFaults, Page, Queue, Store
from engine.retry import decide
from engine.state import Attempt, Execution, Status, StepRecord, StepStatus, canonical_json, error_info
from engine.workflow import Registry, SleepSpec, StepContext, StepSpec, WorkflowSpec

Remaining = Callable[[], float]
CONFLICT_RETRIES = 5
SQS_BATCH = 10


@dataclass(frozen=True)
class Outcome:
    """What handling one message (or one link of a chain) did."""

    status: str  # completed_step | retry_scheduled | failed | stale | early | orphan | woke | duplicate
    steps_run: int = 0


@dataclass(frozen=True)
class SweepReport:
    due: int = 0
    redriven: int = 0
    woken: int = 0
    skipped: int = 0
    truncated: bool = False
    # Executions (or sends) that hit an error; they stay due and the next sweep retries them.
    errors: int = 0


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

    # ------------------------------------------------------------------ control

    def start(self, workflow: str, input: Any, execution_id: str | None = None) -> tuple[Execution, bool]:
        """Start an execution; idempotent on ``execution_id``. Returns (execution, created)."""
        spec = self.registry.get(workflow)
        if execution_id is None:
            execution_id = uuid.uuid4().hex
        check_execution_id(execution_id)
        if input is None:
            input = {}
        if not isinstance(input, dict):
            raise InvalidInput("input must be a JSON object")
        try:
            input_json = canonical_json(input)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"input is not JSON-serialisable: {exc}") from exc
        check_item(meta_item_size(input_json, input_json), "the input")
        input = json.loads(input_json)
        now = self.clock.now()
        draft = Execution(
            id=execution_id,
            workflow=workflow,
            status=Status.RUNNING,
            current_step=0,
            version=1,
            input=input,
            context=dict(input),
            created_at=now,
            updated_at=now,
        )
        ex, effects = tr.start_state(draft, spec, self.config)
        try:
            self.store.create_execution(ex)
        except ConflictError as exc:
            existing = self.store.get_execution(execution_id)
            if existing is None:  # deleted in between; let the caller retry
                raise
            if existing.workflow != workflow or canonical_json(existing.input) != input_json:
                raise ExecutionAlreadyExists(
                    f"execution {execution_id!r} exists with a different workflow or input",
                    execution_id=execution_id,
                ) from exc
            return existing, False
        self._log(ex).info("execution.started", workflow=workflow)
        self._dispatch(ex, effects)
        return ex, True

    def get(self, execution_id: str) -> Execution:
        check_execution_id(execution_id)
        ex = self.store.get_execution(execution_id)
        if ex is None:
            raise ExecutionNotFound(f"no execution {execution_id!r}", execution_id=execution_id)
        return ex

    def history(self, execution_id: str) -> list[StepRecord]:
        self.get(execution_id)
        return self.store.history(execution_id)

    def list(
        self, *, status: str | None = None, workflow: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page:
        if status is not None and status not in Status.__members__:
            raise InvalidInput(f"status must be one of {sorted(Status.__members__)}")
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000")
        return self.store.list_executions(status=status, workflow=workflow, limit=limit, cursor=cursor)

    def cancel(self, execution_id: str) -> Execution:
        ex = self.get(execution_id)
        for _ in range(CONFLICT_RETRIES):
            if ex.terminal:
                raise AlreadyTerminal(
                    f"execution {execution_id!r} is already {ex.status.value}", status=ex.status.value
                )
            new = tr.cancelled_state(ex, self.clock.now())
            try:
                self.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
            except ConflictError:
                ex = self.get(execution_id)
                continue
            self._log(new).info("execution.cancelled")
            return new
        raise ConflictError(f"execution {execution_id!r} kept changing; try again")

    def redrive_failed(self, execution_id: str) -> Execution:
        """Give a FAILED execution a new round of attempts at the step that failed."""
        ex = self.get(execution_id)
        if ex.status is not Status.FAILED:
            raise NotFailed(f"execution {execution_id!r} is {ex.status.value}, not FAILED", status=ex.status.value)
        self.registry.get(ex.workflow)  # an unknown workflow would only fail again
        new = tr.redriven_state(ex, self.clock.now(), self.config)
        self.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        self._log(new).info("execution.redriven")
        self._dispatch(new, tr.Effects(run_next=StepMessage(new.id, new.current_step, new.attempt, "step")))
        return new

    # ------------------------------------------------------------------ worker

    def handle(self, message: StepMessage, *, redelivered: bool = False, remaining: Remaining | None = None) -> Outcome:
        """Run what ``message`` points at, then chain further steps while time allows."""
        guard = redelivered or message.needs_guard
        steps_run = 0
        chained = False
        known: Execution | None = None
        while True:
            try:
                status, ran, effects = self._handle_one(message, guard, known)
            except Exception as exc:
                if not chained:
                    raise
                # The message that started the chain is consumed: redelivering it would be
                # stale. Hand this link back to the queue (guarded), or leave it to the lease.
                self._log_message(message).warning("chain.link_failed", error=error_info(exc))
                self._send(replace(message, kind="redrive"), 0)
                return Outcome("chain_broken", steps_run)
            steps_run += ran
            nxt = effects.run_next
            if effects.delayed is not None:
                self._send(*effects.delayed)
            if nxt is None:
                return Outcome(status, steps_run)
            if self._can_chain(remaining):
                message, guard, chained, known = nxt, False, True, effects.written
                continue
            self._send(nxt, 0)
            self.faults.point("after_enqueue", execution_id=nxt.execution_id, step=nxt.step)
            return Outcome(status, steps_run)

    def dead_letter_raw(self, body: str, reason: LoomError, message_id: str | None = None) -> None:
        """Park a message the worker cannot understand, with why, instead of dropping it."""
        self.queue.send_dead_letter(
            {"loom": "malformed", "message_id": message_id, "error": error_info(reason), "body": body[:200_000]}
        )

    def _can_chain(self, remaining: Remaining | None) -> bool:
        return self.config.chain and remaining is not None and remaining() > self.config.chain_reserve_seconds

    def _handle_one(self, msg: StepMessage, guard: bool, known: Execution | None = None) -> tuple[str, int, tr.Effects]:
        none = tr.Effects()
        # A chained link starts from the state its predecessor wrote (no read back):
        # any write since then makes this link's own conditional write fail.
        ex = known if known is not None and known.id == msg.execution_id else self.store.get_execution(msg.execution_id)
        log = self._log_message(msg)
        if ex is None:
            log.warning("message.orphan", kind=msg.kind)
            return "orphan", 0, none
        now = self.clock.now()
        if msg.kind == "wake":
            if ex.status is not Status.SLEEPING or ex.current_step != msg.step:
                log.info("message.stale", kind=msg.kind, status=ex.status.value, current_step=ex.current_step)
                return "stale", 0, none
            if ex.next_wake_at is not None and now + self.config.early_tolerance < ex.next_wake_at:
                log.info("message.early", wake_at=ex.next_wake_at)
                return "early", 0, none
            try:
                return self._wake(ex)
            except (UnknownWorkflow, WorkflowDefinitionError) as exc:
                # Failing the message would only redeliver it until SQS parks it; fail the execution.
                return self._fail_execution(ex, exc, st_name=None)
        if ex.status is not Status.RUNNING or ex.current_step != msg.step or ex.attempt != msg.attempt:
            log.info(
                "message.stale",
                kind=msg.kind,
                status=ex.status.value,
                current_step=ex.current_step,
                current_attempt=ex.attempt,
            )
            return "stale", 0, none
        if ex.ready_at is not None and now + self.config.early_tolerance < ex.ready_at:
            log.info("message.early", ready_at=ex.ready_at)
            return "early", 0, none
        try:
            spec = self.registry.get(ex.workflow)
            st = self._step_at(spec, ex.current_step)
        except (UnknownWorkflow, WorkflowDefinitionError) as exc:
            return self._fail_execution(ex, exc, st_name=None)
        if isinstance(st, SleepSpec):  # a redriven sleep: just finish it
            return self._wake(ex)
        if guard or st.semantics == "at_most_once":
            record = self.store.get_step(ex.id, ex.current_step, st.name)
            if record is not None and record.status is StepStatus.COMPLETED:
                log.info("step.roll_forward")
                return self._advance(ex, spec, record.result, ran=0)
            if ex.started_attempt == ex.attempt:
                marked_at = ex.attempt_started_at if ex.attempt_started_at is not None else ex.updated_at
                if now < marked_at + self.config.lease_seconds:
                    # Started less than a lease ago: another runner may still be in it (a duplicate,
                    # or a redelivery after a short visibility timeout). Running or failing it now
                    # could overlap a live attempt; the lease brings it back if that runner died.
                    log.info("step.in_flight_elsewhere", marked_at=marked_at)
                    return "in_flight", 0, none
                lost = WorkerLost(f"the worker died while attempt {ex.attempt} of step {st.name!r} ran")
                return self._fail_attempt(ex, spec, st, lost, started_at=marked_at, outcome="worker_lost")
            marked = tr.started_state(ex, now, self.config)
            try:
                self.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
            except ConflictError:
                log.info("message.stale", reason="lost_start_mark")
                return "stale", 0, none
            ex = marked
        return self._run_step(ex, spec, st)

    def _step_at(self, spec: WorkflowSpec, index: int) -> StepSpec | SleepSpec:
        if index >= len(spec.steps):
            raise WorkflowDefinitionError(
                f"workflow {spec.name!r} has {len(spec.steps)} steps; the execution is at step {index}"
            )
        return spec.steps[index]

    def _run_step(self, ex: Execution, spec: WorkflowSpec, st: StepSpec) -> tuple[str, int, tr.Effects]:
        log = self._log(ex).bind(step_name=st.name)
        ctx = StepContext(
            execution_id=ex.id,
            workflow=ex.workflow,
            step_index=ex.current_step,
            step_name=st.name,
            attempt=ex.attempt,
            data=MappingProxyType(json.loads(canonical_json(ex.context))),
            log=log,
            services=self.services,
        )
        self.faults.point("before_step", execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
        started = self.clock.now()
        log.info("step.started")
        try:
            result = st.fn(ctx)
            result = self._check_result(ex, result)
        except Exception as exc:
            return self._fail_attempt(ex, spec, st, exc, started_at=started, outcome="failed")
        self.faults.point("after_step", execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
        finished = self.clock.now()
        attempt = Attempt(ex.attempt, started, finished, "completed")
        try:
            self.store.commit_step(ex.id, ex.current_step, st.name, attempt, result)
        except ConflictError:
            record = self.store.get_step(ex.id, ex.current_step, st.name)
            if record is None or record.status is not StepStatus.COMPLETED:
                # The step was given up on (FAILED) while this attempt ran: its result is void.
                log.info("step.commit_refused", recorded=None if record is None else record.status.value)
                return "stale", 1, tr.Effects()
            # Another runner committed this step first; its result is the one that counts.
            log.info("step.duplicate_commit")
            return self._advance(ex, spec, record.result, ran=1)
        log.info("step.completed", duration_ms=round((finished - started) * 1000, 1))
        return self._advance(ex, spec, result, ran=1)

    def _check_result(self, ex: Execution, result: Any) -> dict[str, Any] | None:
        if result is not None and not isinstance(result, dict):
            raise InvalidResult(f"a step must return a dict or None, not {type(result).__name__}")
        try:
            result_json = canonical_json(result)
        except (TypeError, ValueError) as exc:
            raise InvalidResult(f"the step's result is not JSON-serialisable: {exc}") from exc
        result = json.loads(result_json)
        merged = canonical_json(tr.merge_context(ex.context, result))
        size = max(meta_item_size(canonical_json(ex.input), merged), meta_item_size("", result_json))
        try:
            check_item(size, "the step's result")
        except LoomError as exc:
            raise ResultTooLarge(exc.message) from exc
        return result

    def _advance(
        self, ex: Execution, spec: WorkflowSpec, result: dict[str, Any] | None, *, ran: int
    ) -> tuple[str, int, tr.Effects]:
        """Roll the execution forward past its current step, whoever committed that step."""
        expected_status, index = ex.status, ex.current_step
        for _ in range(CONFLICT_RETRIES):
            new, effects = tr.after_step(ex, spec, result, self.clock.now(), self.config)
            try:
                self.store.put_execution(new, expected_version=ex.version, expected_step=index)
            except ConflictError:
                fresh = self.store.get_execution(ex.id)
                if fresh is None or fresh.status is not expected_status or fresh.current_step != index:
                    self._log(ex).info("step.advance_lost")
                    return "stale", ran, tr.Effects()
                ex = fresh
                continue
            self._log(new).info("execution.advanced", status=new.status.value, version=new.version)
            self.faults.point("after_checkpoint", execution_id=ex.id, step=index, attempt=ex.attempt, input=ex.input)
            return "completed_step", ran, replace(effects, written=new)
        raise ConflictError(f"execution {ex.id!r} kept changing while advancing")

    def _wake(self, ex: Execution) -> tuple[str, int, tr.Effects]:
        spec = self.registry.get(ex.workflow)
        st = self._step_at(spec, ex.current_step)
        now = self.clock.now()
        slept_from = (ex.next_wake_at - st.seconds) if isinstance(st, SleepSpec) and ex.next_wake_at else ex.updated_at
        try:
            self.store.commit_step(ex.id, ex.current_step, st.name, Attempt(1, slept_from, now, "completed"), None)
        except ConflictError:
            pass  # a concurrent waker recorded it; rolling forward is still right
        status, ran, effects = self._advance(ex, spec, None, ran=0)
        return ("woke" if status == "completed_step" else status), ran, effects

    def _fail_attempt(
        self, ex: Execution, spec: WorkflowSpec, st: StepSpec, error: BaseException, *, started_at: float, outcome: str
    ) -> tuple[str, int, tr.Effects]:
        log = self._log(ex).bind(step_name=st.name)
        now = self.clock.now()
        decision = decide(spec.policy_for(st), error, ex.round_attempt, self.rng)
        info = error_info(error)
        attempt = Attempt(ex.attempt, started_at, now, outcome, info, decision.delay if decision.retry else None)
        ran = 0 if outcome == "worker_lost" else 1
        if not self.store.record_failure(ex.id, ex.current_step, st.name, attempt, final=not decision.retry):
            record = self.store.get_step(ex.id, ex.current_step, st.name)
            if record is not None and record.status is StepStatus.COMPLETED:
                # A concurrent run of this step succeeded: that result wins over this failure.
                log.info("step.failure_superseded")
                return self._advance(ex, spec, record.result, ran=ran)
        if not decision.retry:
            log.warning("step.failed", error=info, reason=decision.reason)
            return self._fail_execution(ex, error, st_name=st.name, reason=decision.reason, ran=ran)
        new, effects = tr.retry_state(ex, decision.delay, now, self.config)
        try:
            self.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except ConflictError:
            log.info("step.retry_lost")
            return "stale", ran, tr.Effects()
        log.info(
            "step.retry_scheduled",
            error=info,
            delay=round(decision.delay, 3),
            via="queue" if effects.delayed else "sweeper",
        )
        self.faults.point(
            "after_checkpoint", execution_id=ex.id, step=ex.current_step, attempt=ex.attempt, input=ex.input
        )
        return "retry_scheduled", ran, effects

    def _fail_execution(
        self, ex: Execution, error: BaseException, *, st_name: str | None, reason: str = "", ran: int = 0
    ) -> tuple[str, int, tr.Effects]:
        now = self.clock.now()
        info = {
            **error_info(error),
            "step": ex.current_step,
            "step_name": st_name,
            "attempt": ex.attempt,
            "reason": reason,
        }
        # Dead-letter first: a crash before the state write re-runs this path and at
        # worst parks the execution twice; the other order could lose it.
        self.queue.send_dead_letter(
            {"loom": "failed", "execution_id": ex.id, "workflow": ex.workflow, "failed_at": now, "error": info}
        )
        new = tr.failed_state(ex, info, now)
        try:
            self.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except ConflictError:
            self._log(ex).info("execution.fail_lost")
            return "stale", ran, tr.Effects()
        self._log(new).warning("execution.failed", error=info)
        return "failed", ran, tr.Effects()

    # ------------------------------------------------------------------ sweeper

    def sweep(self, now: float | None = None) -> SweepReport:
        """Re-drive every due execution, shard by shard, at most ``sweep_limit`` per call."""
        now = self.clock.now() if now is None else now
        due = redriven = woken = skipped = errors = 0
        budget = self.config.sweep_limit
        truncated = False
        # Messages from every shard share SendMessageBatch calls (ten a call, SQS's maximum).
        outgoing: list[StepMessage] = []
        for shard in range(self.config.shards):
            cursor: str | None = None
            while True:
                if budget <= 0:
                    truncated = True
                    break
                ids, cursor = self.store.due(shard, now, min(self.config.sweep_page, budget), cursor)
                budget -= len(ids)
                due += len(ids)
                for execution_id in ids:
                    try:
                        kind, message = self._sweep_one(execution_id, now)
                    except LoomError as exc:
                        # One execution's trouble (throttling, say) must not stall the others:
                        # it is still due, and the next sweep tries it again.
                        get_logger(execution_id=execution_id, step=None, attempt=None).warning(
                            "sweep.failed", error=error_info(exc)
                        )
                        errors += 1
                        continue
                    if message is not None:
                        outgoing.append(message)
                    redriven += kind == "redrive"
                    woken += kind == "woke"
                    skipped += kind == "skipped"
                    if len(outgoing) >= SQS_BATCH:
                        errors += self._send_redrives(outgoing)
                        outgoing = []
                if cursor is None:
                    break
        if outgoing:
            errors += self._send_redrives(outgoing)
        report = SweepReport(
            due=due, redriven=redriven, woken=woken, skipped=skipped, truncated=truncated, errors=errors
        )
        get_logger(execution_id=None, step=None, attempt=None).info("sweep.finished", **report.__dict__)
        return report

    def _send_redrives(self, messages: list[StepMessage]) -> int:
        """Send the sweep's messages; the number of failed sends (0 or 1)."""
        try:
            self.queue.send_many(messages)
        except LoomError as exc:
            # The claims are durable with a fresh lease: the sweep after it re-drives them.
            get_logger(execution_id=None, step=None, attempt=None).warning(
                "sweep.send_failed", error=error_info(exc), messages=len(messages)
            )
            return 1
        return 0

    def _sweep_one(self, execution_id: str, now: float) -> tuple[str, StepMessage | None]:
        ex = self.store.get_execution(execution_id)
        if ex is None or ex.next_wake_at is None or ex.next_wake_at > now:
            return "skipped", None
        log = self._log(ex)
        try:
            if ex.terminal:  # should not be indexed; clean it up
                self.store.put_execution(
                    ex.evolve(now, next_wake_at=None), expected_version=ex.version, expected_step=ex.current_step
                )
                return "skipped", None
            if ex.status is Status.SLEEPING:
                status, _, effects = self._wake(ex)
                if effects.delayed is not None:
                    self._send(*effects.delayed)
                return ("woke" if status == "woke" else "skipped"), effects.run_next
            new = tr.reclaimed_state(ex, now, self.config)
            self.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
        except ConflictError:
            log.info("sweep.lost_race")
            return "skipped", None
        except (UnknownWorkflow, WorkflowDefinitionError) as exc:
            self._fail_execution(ex, exc, st_name=None)
            return "skipped", None
        log.info("sweep.redrive", wake_at=ex.next_wake_at, late_by=round(now - ex.next_wake_at, 3))
        return "redrive", StepMessage(ex.id, ex.current_step, ex.attempt, "redrive")

    # ------------------------------------------------------------------ helpers

    def _dispatch(self, ex: Execution, effects: tr.Effects) -> None:
        if effects.run_next is not None:
            self._send(effects.run_next, 0)
        if effects.delayed is not None:
            self._send(*effects.delayed)

    def _send(self, message: StepMessage, delay: int) -> None:
        try:
            self.queue.send(message, min(delay, self.config.max_sqs_delay))
        except ResourceMissing:
            raise  # a missing queue is a deployment error to report, not a hiccup to ride out
        except LoomError as exc:
            # The state is durable and carries a wake time: the sweeper will re-drive it.
            self._log_message(message).warning("message.send_failed", error=error_info(exc))

    def _log_message(self, message: StepMessage) -> Any:
        return get_logger(execution_id=message.execution_id, step=message.step, attempt=message.attempt)

    def _log(self, ex: Execution) -> Any:
        return get_logger(execution_id=ex.id, step=ex.current_step, attempt=ex.attempt)
