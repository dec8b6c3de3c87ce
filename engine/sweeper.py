"""The sweeper: wakes due sleeps and re-drives RUNNING executions whose lease ran out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum

from engine import attempts, definitions, lifecycle, retention, schedules, steps, waits
from engine import transitions as tr
from engine.config import EngineConfig
from engine.error_report import error_info
from engine.errors import (
    ConflictError,
    DefinitionChanged,
    LoomError,
    TransientError,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from engine.log import get_logger
from engine.messages import StepMessage
from engine.outbox import engine_log, execution_log, notify_parent, send
from engine.outcome import OutcomeStatus
from engine.parts import Parts
from engine.state import Execution, Status

SQS_BATCH = 10


class SweepAction(StrEnum):
    REDRIVE = "redrive"
    # The lease lapsed while the queue holds a backlog that may hold its message:
    # the lease is renewed, nothing is sent (see ``judge_lapsed``).
    POSTPONED = "postponed"
    WOKE = "woke"
    SKIPPED = "skipped"
    # A BLOCKED execution (engine/definitions.py): looked at again, resumed or still blocked.
    RESUMED = "resumed"
    BLOCKED = "blocked"
    # An ended execution's items got its expiry (engine/retention.py); RETAINING: some are left
    # for the next sweep (it stays due).
    RETAINED = "retained"
    RETAINING = "retaining"
    # An ended child whose parent still waits on it: its end notice sent again, it stays due.
    NOTIFIED = "notified"


@dataclass(frozen=True)
class SweepReport:
    due: int = 0
    redriven: int = 0
    postponed: int = 0
    woken: int = 0
    skipped: int = 0
    resumed: int = 0
    blocked: int = 0
    retained: int = 0
    truncated: bool = False
    # Executions (or sends) that hit an error; they stay due and the next sweep retries them.
    errors: int = 0
    # Scheduled workflows (engine/schedules.py): executions started, and fire times passed over
    # without a run of their own (missed in an outage: one catch-up run stands for them, or none).
    fired: int = 0
    fires_skipped: int = 0


@dataclass
class _Tally:
    due: int = 0
    redriven: int = 0
    postponed: int = 0
    woken: int = 0
    skipped: int = 0
    resumed: int = 0
    blocked: int = 0
    retained: int = 0
    errors: int = 0

    def count(self, action: SweepAction) -> None:
        self.redriven += action is SweepAction.REDRIVE
        self.postponed += action is SweepAction.POSTPONED
        self.woken += action is SweepAction.WOKE
        self.skipped += action is SweepAction.SKIPPED
        self.resumed += action is SweepAction.RESUMED
        self.blocked += action is SweepAction.BLOCKED
        self.retained += action is SweepAction.RETAINED


def sweep(
    parts: Parts,
    now: float | None = None,
    *,
    first_shard: int | None = None,
    remaining: Callable[[], float] | None = None,
    shard_offset: int = 0,
) -> SweepReport:
    """Re-drive due executions, at most ``sweep_limit`` per call, shared fairly between shards.

    Shards take turns a page at a time (round robin, see ``plan_round``), starting at
    ``first_shard``; by default it comes from the clock (``first_shard_at``), so each
    tick starts where the previous one's first round ended, without the engine keeping state.
    Every shard with due work gets a share of each call's budget, and each shard is
    read oldest first, so one busy shard cannot keep another's oldest item waiting.

    ``shard_offset`` (the sweeper handler's: from the invocation's id) moves that start on:
    sweeps that overlap (ticks faster than a sweep, a storm of ticks, a retried event) would
    otherwise start together at the same shard and judge the same executions in the same
    order, each read twice and each write raced. Started apart, each sweep's later pages no
    longer hold what the other already postponed or re-drove.

    ``remaining`` (the invocation's time left, in seconds) stops the sweep while
    ``sweep_reserve_seconds`` are left, so that what it claimed is sent before the
    invocation times out: a sweep killed mid-way would leave its claims unsent until their
    lease lapses, and overlapping sweeps (EventBridge does not wait) would spiral.
    """
    now = parts.clock.now() if now is None else now
    out_of_time = _deadline(remaining, parts.config.sweep_reserve_seconds)
    cfg = parts.config
    tally = _Tally()
    budget = cfg.sweep_limit
    start = (first_shard_at(now, cfg) + shard_offset if first_shard is None else first_shard) % cfg.shards
    active = [(start + i) % cfg.shards for i in range(cfg.shards)]
    cursors: dict[int, str | None] = {}
    # Messages from every shard share SendMessageBatch calls (ten a call, SQS's maximum).
    outgoing: list[StepMessage] = []
    backlog = Backlog(parts, now)
    # Schedules first: a firing's first message goes out with its start, not behind the sweep.
    fires = schedules.fire_due(parts, now, out_of_time)
    tally.errors += fires.errors
    while active and budget > 0 and not out_of_time():
        for shard, take in plan_round(active, budget, cfg.sweep_page):
            if out_of_time():
                break
            ids, cursors[shard] = parts.store.due(shard, now, take, cursors.get(shard))
            budget -= len(ids)
            tally.due += len(ids)
            if cursors[shard] is None:
                active.remove(shard)  # drained: its turns go to the others
            for execution_id in ids:
                if out_of_time():
                    break  # the rest stay due: the next sweep takes them
                message = _sweep_guarded(parts, execution_id, now, tally, backlog)
                if message is not None:
                    outgoing.append(message)
                if len(outgoing) >= SQS_BATCH:
                    tally.errors += send_redrives(parts, outgoing)
                    backlog.own += len(outgoing)
                    outgoing = []
    if outgoing:
        tally.errors += send_redrives(parts, outgoing)
    report = SweepReport(
        truncated=bool(active) or out_of_time(), fired=fires.fired, fires_skipped=fires.skipped, **asdict(tally)
    )
    engine_log().info("sweep.finished", first_shard=start, **asdict(report))
    return report


def _deadline(remaining: Callable[[], float] | None, reserve: float) -> Callable[[], bool]:
    if remaining is None:
        return lambda: False
    return lambda: remaining() < reserve


def first_shard_at(now: float, cfg: EngineConfig) -> int:
    """The shard a sweep starts at, from the number of the schedule's tick.

    Ticks ``sweep_period_seconds`` apart fall in consecutive periods; each starts where
    the previous tick's first round ended (``sweep_limit`` shards further on), so even a
    budget smaller than the shards reaches them all in turn. Nothing is stored between calls.
    """
    return (int(now // cfg.sweep_period_seconds) * cfg.sweep_limit) % cfg.shards


def plan_round(active: list[int], budget: int, page: int) -> list[tuple[int, int]]:
    """One round robin turn: (shard, page size) for each shard with due work left.

    The budget is split evenly (at most ``page`` each); when it is smaller than the
    number of shards, the first ones in turn order get one each. A shard that turns
    out to have less than its share leaves the rest to the next round.
    """
    share = max(1, min(page, budget // len(active)))
    plan: list[tuple[int, int]] = []
    for shard in active:
        take = min(share, budget)
        if take <= 0:
            break
        plan.append((shard, take))
        budget -= take
    return plan


def _sweep_guarded(parts: Parts, execution_id: str, now: float, tally: _Tally, backlog: Backlog) -> StepMessage | None:
    try:
        action, message = sweep_one(parts, execution_id, now, backlog)
    except LoomError as exc:
        # One execution's trouble (throttling, say) must not stall the others:
        # it is still due, and the next sweep tries it again.
        get_logger(execution_id=execution_id, step=None, attempt=None).warning("sweep.failed", error=error_info(exc))
        tally.errors += 1
        return None
    tally.count(action)
    return message


def send_redrives(parts: Parts, messages: list[StepMessage]) -> int:
    """Send the sweep's messages; the number of failed sends (0 or 1)."""
    try:
        parts.queue.send_many(messages)
    except LoomError as exc:
        # The claims are durable with a fresh lease: the sweep after it re-drives them.
        engine_log().warning("sweep.send_failed", error=error_info(exc), messages=len(messages))
        return 1
    return 0


class Backlog:
    """The step queue's backlog and the dead-letter queue's count, asked at most once per
    sweep and only when a verdict needs them."""

    def __init__(self, parts: Parts, now: float) -> None:
        self._parts = parts
        self._now = now
        self._waiting: int | None = None
        self._parked: int | None = None
        self._since: tuple[float | None] | None = None
        # Messages this sweep has sent already (woken sleeps, redrives): not a backlog.
        self.own = 0

    def __call__(self) -> int:
        if self._waiting is None:
            try:
                self._waiting = max(0, self._parts.queue.backlog() - self.own)
            except LoomError as exc:
                # Unknown: re-drive as before; the runner's guard keeps the two runs apart.
                engine_log().warning("sweep.backlog_unknown", error=error_info(exc))
                self._waiting = 0
        return self._waiting

    def parked(self) -> int:
        if self._parked is None:
            try:
                self._parked = self._parts.queue.parked()
            except LoomError as exc:
                # Unknown: take it as holding messages, the short patience (a wrong guess costs
                # a guarded redrive, the long one a stranded execution).
                engine_log().warning("sweep.parked_unknown", error=error_info(exc))
                self._parked = 1
                self._since = (self._now,)  # and as just changed: the note cannot be compared
        return self._parked

    def parked_since(self) -> float | None:
        """Since when the dead-letter queue has held what it holds, as far as sweeps have seen
        (the store keeps the count a sweep last saw change); None while it holds nothing."""
        count = self.parked()
        if self._since is None:
            try:
                since = self._parts.store.note_parked(count, self._now)
            except LoomError as exc:
                # Unknown: take the messages as just parked (the short patience, once).
                engine_log().warning("sweep.parked_note_failed", error=error_info(exc))
                since = self._now
            self._since = (since if count else None,)
        return self._since[0]


def judge_lapsed(
    ex: Execution, waiting: int, now: float, cfg: EngineConfig, parked_since: float | None = None
) -> SweepAction:
    """A RUNNING execution's lease lapsed: re-drive it, or wait for the queue's backlog.

    A marked attempt (``started_attempt == attempt``) was started by a guarded runner
    whose mark renewed the lease: that lease lapsing means the runner is gone. An
    unmarked one is waiting for its message; while ``waiting`` messages sit in the
    queue that message may be one of them, and a redrive would only add a copy (and,
    at scale, double the backlog). Once the backlog is gone, a lapsed lease is a lost
    message and is re-driven. (A redrive is guarded anyway, and a message received
    after its lease ran low runs guarded too, so a wrong guess costs a message, not an
    overlapping run.) The backlog is believed for ``backlog_patience_leases`` leases after
    the execution's last transition (a postponement keeps ``updated_at``): a queue that
    never drains must not keep a lost message waiting forever. If SQS may have parked the
    message in the dead-letter queue, where no backlog delivers it, the backlog is believed
    for ``parked_patience_leases`` only (``may_be_parked``).
    """
    if ex.started_attempt == ex.attempt or waiting == 0:
        return SweepAction.REDRIVE
    if now - ex.updated_at >= backlog_patience(cfg, may_be_parked(ex, parked_since)):
        return SweepAction.REDRIVE
    return SweepAction.POSTPONED


def may_be_parked(ex: Execution, parked_since: float | None) -> bool:
    """The execution's message may be in the dead-letter queue: it holds messages, and a sweep
    saw its count change after the message was sent (at the last transition, ``updated_at``).
    Strictly after: a message is parked only after ``maxReceiveCount`` receives, so a change
    seen by the sweep whose redrive sent the message (the same instant) is not its parking.

    The sweeper cannot tell whose messages the DLQ holds, and taking every waiting execution
    as parked while it holds anything made an overloaded queue grow without end: every
    execution behind the backlog was re-driven every ``parked_patience_leases``, each redrive
    one more message to wait behind. A redrive is a transition, so each parking now costs at
    most one redrive per execution that was waiting when it happened.
    """
    return parked_since is not None and parked_since > ex.updated_at


def backlog_patience(cfg: EngineConfig, parked: bool) -> float:
    """Seconds after an execution's last transition that a backlog may explain its lapsed lease."""
    return (cfg.parked_patience_leases if parked else cfg.backlog_patience_leases) * cfg.lease_seconds


def sweep_one(
    parts: Parts, execution_id: str, now: float, backlog: Backlog | None = None
) -> tuple[SweepAction, StepMessage | None]:
    ex = parts.store.get_execution(execution_id)
    if ex is None or ex.next_wake_at is None or ex.next_wake_at > now:
        return SweepAction.SKIPPED, None
    try:
        if ex.terminal:  # its ending write kept it indexed: for retention, or a child's notice
            # The notice its worker may have died before sending (or failed to send). Only a
            # sent one un-indexes it: a child wait has no deadline, nothing else wakes the parent.
            if not notify_parent(parts, ex):
                raise TransientError(f"the end notice of {ex.id!r} to its parent was not sent")
            # Sent is not taken: a notice lost or parked after it was sent would leave the
            # parent waiting with nothing indexed. While the parent still waits, the child
            # stays due, a backlog's patience on, and each sweep that finds it sends again.
            if lifecycle.still_waited_on(parts, lifecycle.parent_of(parts, ex), ex):
                _index(parts, ex, now, now + backlog_patience(parts.config, parked=False))
                return SweepAction.NOTIFIED, None
            if not retention.stamp(parts, ex):
                return SweepAction.RETAINING, None  # still due: the next sweep stamps the rest
            _index(parts, ex, now, None)
            return (SweepAction.RETAINED if ex.expires_at is not None else SweepAction.SKIPPED), None
        if ex.status is Status.BLOCKED:
            resumed, message = definitions.recheck(parts, ex, now)
            if not resumed:
                return SweepAction.BLOCKED, None
            waits.deliver_kept(parts, ex.id)  # a signal or a completion that came while it was blocked
            return SweepAction.RESUMED, message
        if ex.status is Status.SLEEPING:
            done = steps.wake(parts, ex)
            if done.effects.delayed is not None:
                send(parts, *done.effects.delayed)
            action = SweepAction.WOKE if done.status is OutcomeStatus.WOKE else SweepAction.SKIPPED
            return action, done.effects.run_next
        if ex.status is Status.WAITING:  # a wait's timeout (engine/waits.py)
            done = waits.expire(parts, ex)
            if done.effects.delayed is not None:
                send(parts, *done.effects.delayed)
            return SweepAction.WOKE, done.effects.run_next
        backlog = backlog or Backlog(parts, now)
        action = _judge(parts, ex, now, backlog)
        if action is SweepAction.POSTPONED:
            patience = backlog_patience(parts.config, may_be_parked(ex, backlog.parked_since()))
            new = tr.postponed_state(ex, now, parts.config, patience)
        else:
            new = tr.reclaimed_state(ex, now, parts.config)
        parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        execution_log(ex).info("sweep.lost_race")
        return SweepAction.SKIPPED, None
    except DefinitionChanged:
        # A sleep's end or a wait's timeout on a definition of another shape: stop it there.
        definitions.block(parts, ex)
        return SweepAction.BLOCKED, None
    except (UnknownWorkflow, WorkflowDefinitionError) as exc:
        if isinstance(exc, UnknownWorkflow) and definitions.workflow_missing(parts.registry, ex):
            definitions.block(parts, ex, definitions.WORKFLOW_NOT_REGISTERED)  # as a changed one
            return SweepAction.BLOCKED, None
        attempts.fail_execution(parts, ex, exc, st_name=None)
        return SweepAction.SKIPPED, None
    wake_at = ex.next_wake_at
    if action is SweepAction.POSTPONED:
        execution_log(ex).info("sweep.postponed_for_backlog", wake_at=wake_at, next_wake_at=new.next_wake_at)
        return action, None
    execution_log(ex).info("sweep.redrive", wake_at=wake_at, late_by=round(now - wake_at, 3))
    return SweepAction.REDRIVE, StepMessage.redrive_of(ex)


def _judge(parts: Parts, ex: Execution, now: float, backlog: Backlog) -> SweepAction:
    """``judge_lapsed`` with the queue figures it needs, asked only when they can matter."""
    if ex.started_attempt == ex.attempt:
        return judge_lapsed(ex, 0, now, parts.config)
    waiting = backlog()
    since = backlog.parked_since() if waiting else None
    return judge_lapsed(ex, waiting, now, parts.config, since)


def _index(parts: Parts, ex: Execution, now: float, wake_at: float | None) -> None:
    """An ended execution's place in the due index: kept until ``wake_at``, or None to leave it."""
    parts.store.put_execution(
        ex.evolve(now, next_wake_at=wake_at), expected_version=ex.version, expected_step=ex.current_step
    )
