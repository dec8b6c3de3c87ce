"""Running a fan-out step (``parallel`` / ``map``): open, items, join, recovery.

For step i of parent P (RUNNING at i, attempt a; DESIGN.md "Fan-out"):

1. open: evaluate the items, mark P started (renews its lease; one opener wins), create
   the join record ``FAN#<i>`` (idempotent), send the first ``max_concurrency`` ITEM messages;
2. an ITEM message whose parent is no longer RUNNING at (i, a) is stale (a cancel stops new
   items); a final item only re-checks the join; otherwise the item runs with its own retry
   policy, and its final write and the join's counter are one transaction;
3. after an item's own final write: judge the counts (engine/join.py); CONTINUE starts the
   item its slot frees, SUCCEED or FAIL joins. With ``on_failure="batch"`` a slot whose next
   item may no longer start declines it (NOT_STARTED, counted on the join), and the join
   closes once every slot is done: what started runs to its end, as in the reference;
4. join: the decision is recorded once on the join record, the step's history record is
   committed once (COMMIT_ONCE), then P advances (or fails) with its conditional write:
   duplicate, racing and crashed completions all end in one advance;
5. recovery: a lapsed lease is re-driven by the sweeper to ``drive``, which joins if the
   counts say so, or re-sends the started items that are not final.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from engine import attempts
from engine import transitions as tr
from engine.error_report import error_info
from engine.errors import (
    ConflictError,
    FanoutFailed,
    InvalidFanoutItems,
    InvalidResult,
    LoomError,
    PayloadTooLarge,
    ResourceMissing,
)
from engine.escalation import begin_compensation
from engine.fan_children import WAITING, await_child
from engine.fan_items import check_item_names, item_context, item_label, item_values
from engine.fan_results import step_result
from engine.fanout_spec import FanKind, FanoutSpec
from engine.history_rules import last_attempt
from engine.join import (
    JoinRecord,
    JoinVerdict,
    OnFailure,
    first_window,
    judge_batch,
    judge_join,
    next_item,
    shards_for,
    to_resend,
)
from engine.messages import MessageKind, StepMessage
from engine.outbox import execution_log, send
from engine.outcome import LinkResult, OutcomeStatus
from engine.parts import Parts
from engine.ports import FaultPoint
from engine.retry import decide
from engine.serde import DEFAULT, is_typed
from engine.state import Attempt, AttemptOutcome, Execution, Status, StepRecord, StepStatus, canonical_json
from engine.workflow import ChildSpec, WorkflowSpec

FINAL = (StepStatus.COMPLETED, StepStatus.FAILED)


def drive(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, *, guarded: bool) -> LinkResult:
    """The parent's own message at a fan-out step: open it, or (guarded) recover it."""
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return open_fanout(parts, ex, spec, st)
    if not guarded:
        execution_log(ex).info("fanout.already_open")
        return LinkResult(OutcomeStatus.IN_FLIGHT)
    return resume(parts, ex, spec, st, join)


def open_fanout(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec) -> LinkResult:
    started = parts.clock.now()
    try:
        values = item_values(parts, ex, st)
        check_item_names(st, values)
    except Exception as exc:
        return attempts.fail_attempt(parts, ex, spec, st, exc, started_at=started, outcome=AttemptOutcome.FAILED)
    n = len(values)
    marked = tr.started_state(ex, started, parts.config)
    try:
        parts.store.put_execution(marked, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE)
    join = parts.store.open_join(JoinRecord(ex.id, ex.current_step, n, shards_for(n), st.max_concurrency))
    execution_log(marked).info("fanout.opened", items=n, window=join.window, shards=join.shards)
    if n == 0:
        return finish(parts, marked, spec, st, join, JoinVerdict.SUCCEED)
    send_items(parts, marked, list(first_window(n, join.window)))
    carried = hand_to_items(parts, marked)
    return LinkResult(OutcomeStatus.FANNED_OUT, 0, replace(tr.Effects(), written=carried))


def hand_to_items(parts: Parts, ex: Execution) -> Execution | None:
    """Clear the open's start mark once the window is out (one conditional write). The mark
    serialises openers; left on, it made every lapse of the lease look like a dead opener, so
    behind a backlog the sweeper re-drove the map each lease and each redrive re-sent the window.
    A crash before this write leaves the mark, and the redrive that follows re-sends the window."""
    for _ in range(attempts.CONFLICT_RETRIES):
        now = parts.clock.now()
        new = tr.fanned_out_state(ex, now, parts.config)
        try:
            parts.store.put_execution(new, expected_version=ex.version, expected_step=ex.current_step)
            return new
        except ConflictError as exc:
            fresh = exc.current if isinstance(exc.current, Execution) else parts.store.get_execution(ex.id)
            if fresh is None or not _same_round(fresh, ex) or fresh.started_attempt != fresh.attempt:
                return None  # joined, cancelled, caught, or an item renewed the lease (and cleared it)
            ex = fresh
    return None


def _same_round(fresh: Execution, ex: Execution) -> bool:
    return (
        fresh.status is Status.RUNNING
        and fresh.current_step == ex.current_step
        and fresh.attempt == ex.attempt
        and fresh.catching is None
    )


def resume(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, join: JoinRecord) -> LinkResult:
    """A redrive (lapsed lease, redelivery): join if due, else re-send the started items not final."""
    verdict = _verdict(join, st)
    if verdict is not JoinVerdict.CONTINUE:
        return finish(parts, ex, spec, st, join, verdict)
    records = parts.store.fan_items(ex.id, ex.current_step, join.shards, 0, join.n)
    final = [r.index for r in records if r.status in FINAL]
    declined = [r.index for r in records if r.status is StepStatus.NOT_STARTED]
    now = parts.clock.now()
    # An item in its retry backoff has its delayed message on the way: a copy would run its
    # next attempt twice. The lease covers the latest backoff, so a lost one is re-sent after it.
    backing_off = in_backoff(records, now + parts.config.early_tolerance)
    renewed = tr.fanned_out_state(ex, now, parts.config, max(backing_off.values(), default=None))
    try:
        parts.store.put_execution(renewed, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return LinkResult(OutcomeStatus.STALE)
    # Once no item may start, a successor re-sent here is declined as it arrives (run_item).
    missing = [i for i in to_resend(join.n, join.window, final, declined) if i not in backing_off]
    execution_log(renewed).info("fanout.resumed", final=len(final), resent=len(missing), backing_off=len(backing_off))
    send_items(parts, renewed, missing)
    return LinkResult(OutcomeStatus.FANNED_OUT, 0, replace(tr.Effects(), written=renewed))


def send_items(parts: Parts, ex: Execution, indexes: list[int]) -> None:
    """Batches of ten (SQS's most); a lost batch is left to the lease, like any lost send."""
    messages = [StepMessage(ex.id, ex.current_step, ex.attempt, MessageKind.ITEM, item=i) for i in indexes]
    for start in range(0, len(messages), 10):
        try:
            parts.queue.send_many(messages[start : start + 10])
        except ResourceMissing:
            raise  # a deployment error to report, as outbox.send does
        except LoomError as exc:  # the parent's lease re-drives it: resume re-sends these
            execution_log(ex).warning("fanout.send_failed", error=error_info(exc), items=len(messages))


def _verdict(join: JoinRecord, st: FanoutSpec) -> JoinVerdict:
    if join.decided is not None:
        return JoinVerdict(join.decided)
    if st.on_failure is OnFailure.FAIL:
        return judge_join(join.n, join.ok, join.failed, st.policy)
    return judge_batch(join, st.policy)


def _stopped(join: JoinRecord, st: FanoutSpec) -> bool:
    """A batch whose slots start no new item (the join may still wait for running ones)."""
    return st.on_failure is OnFailure.BATCH and not st.policy.may_start(join.n, join.ok, join.failed)


def run_item(
    parts: Parts, msg: StepMessage, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, *, redelivered: bool = False
) -> LinkResult:
    """One ITEM message (the parent is RUNNING at this step and attempt: verdicts.check_message)."""
    assert msg.item is not None
    idx = msg.item
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None or idx >= join.n:
        execution_log(ex).warning("fanout.unknown_item", item=idx)
        return LinkResult(OutcomeStatus.STALE)
    record = parts.store.get_item(ex.id, ex.current_step, idx, join.shards)
    if record is not None and record.status in FINAL:
        # A duplicate only checks the join. A redelivery may be the message of a worker that
        # died between the item's commit and its successor's send: that send is repeated.
        return after_final(parts, ex, spec, st, idx, own=False, resend=redelivered)
    if record is not None and record.status is StepStatus.NOT_STARTED:
        return after_final(parts, ex, spec, st, idx, own=False)  # declined: it never runs
    if _verdict(join, st) is not JoinVerdict.CONTINUE:
        return after_final(parts, ex, spec, st, idx, own=False)  # decided: nothing new starts
    if record is None and idx >= join.window and _stopped(join, st):
        # A successor sent by a runner that read the counts before they stopped the batch,
        # or re-sent by a recovery: its slot ends here, as if its predecessor had declined it.
        return _decline(parts, ex, spec, st, idx)
    attempt = last_attempt(record) + 1
    due = _retry_due(record)
    now = parts.clock.now()
    if due is not None and now + parts.config.early_tolerance < due:
        parts.queue.send(msg, min(parts.config.max_sqs_delay, int(due - now) + 1))
        return LinkResult(OutcomeStatus.EARLY)
    return _attempt(parts, ex, spec, st, join, idx, attempt)


def in_backoff(records: list[StepRecord], now: float) -> dict[int, float]:
    """Items whose retry is scheduled and not due yet: index -> when it is due."""
    due = {r.index: _retry_due(r) for r in records if r.status is StepStatus.RETRYING}
    return {i: d for i, d in due.items() if d is not None and d > now}


def _retry_due(record: StepRecord | None) -> float | None:
    if record is None or not record.attempts:
        return None
    last = max(record.attempts, key=lambda a: a.attempt)
    return None if last.retry_delay is None else last.finished_at + last.retry_delay


def _attempt(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, join: JoinRecord, idx: int, attempt: int
) -> LinkResult:
    started = parts.clock.now()
    info = {"execution_id": ex.id, "step": ex.current_step, "attempt": attempt, "item": idx}
    label: str | None = None  # the item's name: stored by the write that records the item
    try:
        values = item_values(parts, ex, st)
        if len(values) != join.n:
            raise InvalidFanoutItems(f"map {st.name!r}: items changed from {join.n} to {len(values)}")
        label = item_label(st, idx, values[idx])
        parts.faults.point(FaultPoint.BEFORE_STEP, **info)
        ctx = item_context(parts, ex, st, idx, values[idx], attempt)
        item_spec = st.item_spec(idx)
        raw = await_child(parts, ex, item_spec, ctx) if isinstance(item_spec, ChildSpec) else item_spec.fn(ctx)
        if raw is WAITING:
            return LinkResult(OutcomeStatus.WAITING)  # the child's end sends this item's message again
        result = check_item_result(st, raw, idx)
    except Exception as exc:
        lost = Attempt(attempt, started, parts.clock.now(), AttemptOutcome.FAILED)
        return _failed(parts, ex, spec, st, join, idx, lost, exc, label=label)
    parts.faults.point(FaultPoint.AFTER_STEP, **info)
    done = Attempt(attempt, started, parts.clock.now(), AttemptOutcome.COMPLETED)
    try:
        parts.store.commit_item(
            ex.id,
            ex.current_step,
            st.name,
            idx,
            join.shards,
            done,
            result,
            chain_end=join.is_chain_end(idx),
            label=label,
        )
    except PayloadTooLarge as exc:
        too_large = InvalidResult(f"item {idx}'s result does not fit its record: {exc.message}")
        return _failed(parts, ex, spec, st, join, idx, done, too_large, label=label)
    except ConflictError:
        execution_log(ex).info("fanout.item_commit_refused", item=idx)
        return after_final(parts, ex, spec, st, idx, own=False, ran=1)
    parts.faults.point(FaultPoint.AFTER_CHECKPOINT, input=ex.input, **info)
    return after_final(parts, ex, spec, st, idx, own=True, ran=1)


def check_item_result(st: FanoutSpec, raw: Any, idx: int = 0) -> Any:
    """A map item may return any JSON value or a typed one (a dataclass, a model), dumped by its
    serializer (the item's, else the fan-out step's, else JSON); a branch, like a step, a dict,
    None or a typed value, which lands under the branch's name (engine/serde.py)."""
    spec = st.item_spec(idx)
    typed = is_typed(raw)
    if st.kind is FanKind.PARALLEL and raw is not None and not isinstance(raw, dict) and not typed:
        raise InvalidResult(f"a branch must return a dict, None or a typed value, not {type(raw).__name__}")
    try:
        dumped = (spec.serializer or st.serializer or DEFAULT).dump(raw)
        if typed and st.kind is FanKind.PARALLEL:
            dumped = {spec.name: dumped}
        return json.loads(canonical_json(dumped))
    except (TypeError, ValueError) as exc:
        raise InvalidResult(f"the item's result is not JSON-serialisable: {exc}") from exc


def _failed(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: FanoutSpec,
    join: JoinRecord,
    idx: int,
    attempt: Attempt,
    error: BaseException,
    *,
    label: str | None = None,
) -> LinkResult:
    """The item's retry policy decides; a final failure is counted with its record."""
    decision = decide(st.item_policy(idx, spec.retry), error, attempt.attempt, parts.rng)
    delay = decision.delay if decision.retry else None
    recorded = replace(attempt, outcome=AttemptOutcome.FAILED, error=error_info(error), retry_delay=delay)
    final = not decision.retry
    log = execution_log(ex).bind(item=idx)
    chain_end = join.is_chain_end(idx)
    if not parts.store.fail_item(
        ex.id, ex.current_step, st.name, idx, join.shards, recorded, final=final, chain_end=chain_end, label=label
    ):
        log.info("fanout.item_failure_refused")
        return after_final(parts, ex, spec, st, idx, own=False, ran=1)
    if final:
        log.warning("fanout.item_failed", error=recorded.error, reason=decision.reason)
        return after_final(parts, ex, spec, st, idx, own=True, ran=1)
    log.info("fanout.item_retry_scheduled", delay=round(decision.delay, 3))
    msg = StepMessage(ex.id, ex.current_step, ex.attempt, MessageKind.ITEM, item=idx)
    send(parts, msg, int(decision.delay + 0.999))
    # A map waiting out a backoff is healthy: without a lease past it, the sweeper re-drove it
    # and the redrive sent a copy of the delayed item.
    keep_lease(parts, ex, until=recorded.finished_at + decision.delay)
    return LinkResult(OutcomeStatus.RETRY_SCHEDULED, 1)


def after_final(
    parts: Parts,
    ex: Execution,
    spec: WorkflowSpec,
    st: FanoutSpec,
    idx: int,
    *,
    own: bool,
    ran: int = 0,
    resend: bool = False,
) -> LinkResult:
    """Item ``idx`` is final. ``own``: this runner's write made it so, and only then does it
    start the next item (a duplicate or a refused write must not start one twice).
    ``resend``: start it anyway if it has no record yet (a redelivery after a crash)."""
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return LinkResult(OutcomeStatus.STALE, ran)
    verdict = _verdict(join, st)
    if verdict is JoinVerdict.CONTINUE and _stopped(join, st):
        if own:
            keep_lease(parts, ex)  # the items still running keep the parent's lease
        nxt = next_item(idx, join.n, join.window)
        if nxt is not None and (own or resend):
            return replace(_decline(parts, ex, spec, st, nxt), ran=ran)
        return LinkResult(OutcomeStatus.ITEM_DONE, ran)
    if verdict is JoinVerdict.CONTINUE:
        nxt = next_item(idx, join.n, join.window)
        if nxt is not None and not own and resend:
            own = parts.store.get_item(ex.id, ex.current_step, nxt, join.shards) is None
        if own:
            keep_lease(parts, ex)
        if own and nxt is not None:
            send(parts, StepMessage(ex.id, ex.current_step, ex.attempt, MessageKind.ITEM, item=nxt), 0)
        return LinkResult(OutcomeStatus.ITEM_DONE, ran)
    return replace(finish(parts, ex, spec, st, join, verdict), ran=ran)


def _decline(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, idx: int) -> LinkResult:
    """Item ``idx`` will never start; its slot is done. Only the write that declines it counts
    the slot, so a duplicate or a racing runner changes nothing; then the join may close."""
    join = parts.store.get_join(ex.id, ex.current_step)
    if join is None:
        return LinkResult(OutcomeStatus.STALE)
    if parts.store.decline_item(ex.id, ex.current_step, st.name, idx, join.shards):
        execution_log(ex).info("fanout.item_declined", item=idx)
        join = parts.store.get_join(ex.id, ex.current_step) or join
    verdict = _verdict(join, st)
    if verdict is JoinVerdict.CONTINUE:
        return LinkResult(OutcomeStatus.ITEM_DONE)
    return finish(parts, ex, spec, st, join, verdict)


def keep_lease(parts: Parts, ex: Execution, until: float | None = None) -> None:
    """A map that is making progress keeps its parent's lease: without it, a map longer than the
    lease would be re-driven, and the redrive would re-send items that are running. One
    conditional write per lease at most; losing it means another item renewed it. ``until``:
    the lease must also last past then (an item's retry backoff)."""
    now = parts.clock.now()
    need = max(now, until if until is not None else now) + parts.config.lease_seconds
    if ex.next_wake_at is not None and ex.next_wake_at > need:
        return
    renewed = tr.fanned_out_state(ex, now, parts.config, until)
    try:
        parts.store.put_execution(renewed, expected_version=ex.version, expected_step=ex.current_step)
    except ConflictError:
        return


def finish(
    parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, join: JoinRecord, verdict: JoinVerdict
) -> LinkResult:
    """Join: record the decision once, then advance (or fail) the parent from the state it has now."""
    decided = JoinVerdict(parts.store.decide_join(ex.id, ex.current_step, verdict.value))
    current = parts.store.get_execution(ex.id)
    if current is None or current.status is not Status.RUNNING or current.current_step != ex.current_step:
        return LinkResult(OutcomeStatus.STALE)  # joined already (or cancelled)
    if current.attempt != ex.attempt or current.catching is not None:
        return LinkResult(OutcomeStatus.STALE)
    log = execution_log(current).bind(step_name=st.name)
    if decided is JoinVerdict.FAIL:
        fresh = parts.store.get_join(ex.id, ex.current_step) or join
        failed = FanoutFailed(f"{fresh.failed} of {fresh.n} items of {st.name!r} failed; the policy tolerates fewer")
        log.warning("fanout.join_failed", ok=fresh.ok, failed=fresh.failed, n=fresh.n)
        if st.catch is None and st.compensate is not None:
            # The step's own committed items are undone first, then the steps below it.
            info = {**error_info(failed), "step": current.current_step, "step_name": st.name}
            info["reason"] = "completion_policy"
            return begin_compensation(parts, current, info, first=current.current_step)
        return attempts.fail_execution(parts, current, failed, st_name=st.name, reason="completion_policy")
    return _join_success(parts, current, spec, st, join)


def _join_success(parts: Parts, ex: Execution, spec: WorkflowSpec, st: FanoutSpec, join: JoinRecord) -> LinkResult:
    records = parts.store.fan_items(ex.id, ex.current_step, join.shards, 0, join.n)
    now = parts.clock.now()
    try:
        result: dict[str, Any] | None = step_result(ex, st, join, records, lambda r: attempts.check_result(ex, r))
    except Exception as exc:
        return attempts.fail_execution(parts, ex, exc, st_name=st.name, reason="results_too_large")
    opened = ex.attempt_started_at if ex.attempt_started_at is not None else now
    try:
        joined = Attempt(ex.attempt, opened, now, AttemptOutcome.COMPLETED)
        parts.store.commit_step(ex.id, ex.current_step, st.name, joined, result)
    except ConflictError:
        record = parts.store.get_step(ex.id, ex.current_step, st.name)
        if record is None or record.status is not StepStatus.COMPLETED:
            return LinkResult(OutcomeStatus.STALE)
        result = record.result
    execution_log(ex).info("fanout.joined", n=join.n, ok=join.ok, failed=join.failed)
    return attempts.advance(parts, ex, spec, result, ran=0)
