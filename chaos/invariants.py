"""The invariants every chaos run must keep, checked from the outside.

Inputs are what anyone can read after the fact: the execution item, its step
history, the side-effect ledger, and the versions a poller saw while it ran.
Each check returns violations (strings); an empty list means the run was correct.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.compensation import SUFFIX, is_compensation
from engine.state import Execution, Signal, Status, StepRecord, StepStatus, canonical_json
from engine.transitions import merge_context


@dataclass(frozen=True)
class Snapshot:
    """One observation of an execution item by a poller."""

    version: int
    status: str
    current_step: int
    attempt: int
    started_attempt: int
    next_wake_at: float | None
    seen_at: float  # wall clock of the observation

    @classmethod
    def of(cls, ex: Execution, seen_at: float | None = None) -> Snapshot:
        return cls(
            ex.version,
            ex.status.value,
            ex.current_step,
            ex.attempt,
            ex.started_attempt,
            ex.next_wake_at,
            time.time() if seen_at is None else seen_at,
        )

    def state(self) -> tuple[Any, ...]:
        return (self.status, self.current_step, self.attempt, self.started_attempt, self.next_wake_at)


@dataclass(frozen=True)
class Expect:
    """What a scenario expects of one execution."""

    status: str = "COMPLETED"
    redrives: int = 0  # DLQ redrives the scenario performed (each is one transition)
    effectful: bool = True  # completed steps landed a ledger effect under their idempotency key


@dataclass
class Report:
    execution_id: str
    violations: list[str] = field(default_factory=list)
    transitions_accounted: int = 0
    final_version: int = 0
    extra_writes: int = 0  # start marks and sweeper reclaims: writes history does not name

    @property
    def ok(self) -> bool:
        return not self.violations


UNDOING = frozenset({Status.COMPENSATING, Status.COMPENSATED, Status.COMPENSATION_FAILED})
UNDOING_NAMES = frozenset(s.value for s in UNDOING)


def check_versions(trail: Sequence[Snapshot], final: Execution | None) -> list[str]:
    """Versions only move forward, one state per version, and a step never advances faster than its version."""
    out: list[str] = []
    seen = list(trail) + ([Snapshot.of(final)] if final is not None else [])
    by_version: dict[int, tuple[Any, ...]] = {}
    for snap in seen:
        earlier = by_version.get(snap.version)
        if earlier is not None and earlier != snap.state():
            out.append(f"version {snap.version} named two different states: {earlier} and {snap.state()}")
        by_version.setdefault(snap.version, snap.state())
    for a, b in itertools.pairwise(seen):
        if b.version < a.version:
            out.append(f"version went backwards: {a.version} then {b.version}")
        elif b.current_step - a.current_step > b.version - a.version:
            out.append(
                f"step moved {b.current_step - a.current_step} in {b.version - a.version} version(s) "
                f"(v{a.version} step {a.current_step} -> v{b.version} step {b.current_step}): a transition skipped"
            )
        if b.current_step < a.current_step and b.status not in UNDOING_NAMES:
            # A saga's compensations walk back down the steps (engine/compensation.py).
            out.append(f"step went backwards: {a.current_step} -> {b.current_step} (v{a.version} -> v{b.version})")
        # A terminal execution may take two writes, both a child's hold: leaving the due index,
        # and its due time moved later, nothing else, when a sweep found its parent still waiting
        # and sent its end notice again (DESIGN's failure table: a notice lost after it was sent).
        unindexed = b.status == a.status and a.next_wake_at is not None and b.next_wake_at is None
        deferred = (
            b.status == a.status
            and b.current_step == a.current_step
            and a.next_wake_at is not None
            and b.next_wake_at is not None
            and b.next_wake_at > a.next_wake_at
        )
        ended = a.status in ("COMPLETED", "CANCELLED", "COMPENSATED", "COMPENSATION_FAILED")
        if ended and b.version > a.version and not (unindexed or deferred):
            out.append(f"a {a.status} execution changed again (v{a.version} -> v{b.version})")
    return out


def minimum_transitions(ex: Execution, history: Sequence[StepRecord], redrives: int = 0) -> int:
    """Writes the history accounts for: the start, one advance per committed step, one per retry, the failure."""
    committed = sum(1 for r in history if r.status is StepStatus.COMPLETED)
    retries = sum(1 for r in history for a in r.attempts if a.outcome != "completed" and a.retry_delay is not None)
    failed = 1 if ex.status is Status.FAILED else 0
    cancelled = 1 if ex.status is Status.CANCELLED else 0
    # A saga: the write that began compensating, and the one that gave it up.
    began = 1 if ex.status in UNDOING else 0
    gave_up = 1 if ex.status is Status.COMPENSATION_FAILED else 0
    return 1 + committed + retries + failed + cancelled + began + gave_up + redrives


def check_history(ex: Execution, history: Sequence[StepRecord], expect: Expect) -> list[str]:
    out: list[str] = []
    caught = {r.index: r for r in history if r.name.endswith("#catch") and r.status is StepStatus.COMPLETED}
    # check_compensation's part; a caught step's handler record stands in for its failed one.
    history = [r for r in history if not is_compensation(r) and not r.name.endswith("#catch")]
    history = [caught.get(r.index, r) for r in history]
    if ex.status.value != expect.status:
        out.append(f"ended {ex.status.value}, expected {expect.status}")
    by_index: dict[int, StepRecord] = {}
    for r in history:
        if r.index in by_index:
            out.append(f"step {r.index} has two history records ({by_index[r.index].name}, {r.name})")
        by_index[r.index] = r
        completed = [a for a in r.attempts if a.outcome == "completed"]
        if r.status is StepStatus.COMPLETED and len(completed) != 1:
            out.append(f"step {r.index} ({r.name}) has {len(completed)} committed results, expected exactly 1")
        if r.status is not StepStatus.COMPLETED and completed:
            out.append(f"step {r.index} ({r.name}) records a completed attempt but is {r.status.value}")
        numbers = [a.attempt for a in r.attempts]
        # One record per attempt number: a runner that finds an attempt started less
        # than a lease ago leaves it alone, so no attempt is both lost and completed.
        if len(numbers) != len(set(numbers)):
            out.append(f"step {r.index} ({r.name}) records an attempt number twice: {numbers}")
        if numbers != sorted(numbers):
            out.append(f"step {r.index} ({r.name}) attempts out of order: {numbers}")
    for i in range(ex.current_step if ex.status is not Status.COMPLETED else len(by_index)):
        if ex.status in UNDOING:
            break  # check_compensation: only committed steps are undone
        behind = by_index.get(i)
        if behind is None or behind.status is not StepStatus.COMPLETED:
            out.append(f"step {i} is behind the execution (at step {ex.current_step}) but not committed")
    if ex.status is Status.COMPLETED and ex.current_step != len(by_index):
        out.append(f"COMPLETED at step {ex.current_step} with {len(by_index)} steps in history")
    if ex.status is Status.FAILED:
        failed = by_index.get(ex.current_step)
        if ex.error is None:
            out.append("FAILED without an error on the execution")
        if failed is None or failed.status is not StepStatus.FAILED or not failed.error:
            out.append(f"FAILED at step {ex.current_step} but its history does not record the failure")
    # The one committed result per step is the one the execution carries on.
    context = dict(ex.input)
    undoing = ex.status in UNDOING  # current_step walks back down; the context keeps every commit
    for i in sorted(by_index):
        if (i < ex.current_step or undoing) and by_index[i].status is StepStatus.COMPLETED:
            context = merge_context(context, by_index[i].result)
    if canonical_json(context) != canonical_json(ex.context):
        out.append("the execution's context is not its input merged with the committed results")
    return out


def check_ledger(
    ex: Execution, history: Sequence[StepRecord], entries: Mapping[str, Mapping[str, Any]], expect: Expect
) -> list[str]:
    """Each committed effectful step landed exactly one effect, under its own idempotency key."""
    out: list[str] = []
    for r in history:
        if is_compensation(r):
            continue  # check_compensation looks at those
        key = f"{ex.id}:{r.index}"
        row = entries.get(key)
        result_keys = [v for k, v in (r.result or {}).items() if k.endswith("_key")]
        if r.status is StepStatus.COMPLETED and expect.effectful and result_keys:
            if row is None or row.get("effect") is None:
                out.append(f"step {r.index} ({r.name}) committed but its effect {key} never landed")
            if any(k != key for k in result_keys):
                out.append(f"step {r.index} ({r.name}) result names effect {result_keys}, not its own key {key}")
        if row is None:
            continue
        runs, dups = int(row.get("runs", 0)), int(row.get("duplicates", 0))
        applied = 1 if row.get("effect") is not None else 0
        if runs and applied + dups > runs:
            out.append(f"{key}: effect applied {applied + dups} times in {runs} run(s)")
        if runs == 0 and applied:
            out.append(f"{key}: an effect landed without any recorded run")
    for key, row in entries.items():
        # <id>:<step>, <id>:<step>:compensate, or a fan-out item's <id>:<step>:<item>: the step comes first.
        index = key[len(ex.id) + 1 :].split(":", 1)[0] if key.startswith(f"{ex.id}:") else key.rsplit(":", 1)[-1]
        beyond = ex.status not in UNDOING and index.isdigit() and int(index) > ex.current_step
        if beyond and row.get("effect") is not None:
            out.append(f"{key}: an effect landed for step {index}, beyond the execution (step {ex.current_step})")
    return out


def check_not_stuck(ex: Execution, now: float, tolerance: float) -> list[str]:
    if ex.terminal:
        # Ended, it stays due only for the sweep that stamps it for retention (engine/retention.py).
        if ex.next_wake_at is not None and ex.next_wake_at + tolerance < now:
            late = now - ex.next_wake_at
            return [f"terminal {ex.status.value} but still in the due index {late:.1f}s after its last sweep was due"]
        return []
    if ex.next_wake_at is None:
        return [f"{ex.status.value} with no wake time: nothing would ever drive it again"]
    if ex.next_wake_at + tolerance < now:
        return [f"{ex.status.value} overdue by {now - ex.next_wake_at:.1f}s: the sweeper did not pick it up"]
    return [f"still {ex.status.value} at step {ex.current_step}"]


def check_execution(
    ex: Execution | None,
    history: Sequence[StepRecord],
    entries: Mapping[str, Mapping[str, Any]],
    trail: Iterable[Snapshot] = (),
    expect: Expect | None = None,
    *,
    now: float | None = None,
    tolerance: float = 5.0,
) -> Report:
    expect = expect or Expect()
    if ex is None:
        return Report("?", ["the execution does not exist"])
    report = Report(ex.id)
    trail = list(trail)
    report.violations += check_versions(trail, ex)
    report.violations += check_history(ex, history, expect)
    report.violations += check_ledger(ex, history, entries, expect)
    if not ex.terminal or ex.next_wake_at is not None:
        report.violations += check_not_stuck(ex, time.time() if now is None else now, tolerance)
    report.transitions_accounted = minimum_transitions(ex, history, expect.redrives)
    report.final_version = ex.version
    report.extra_writes = ex.version - report.transitions_accounted
    if report.extra_writes < 0:
        report.violations.append(
            f"final version {ex.version} is below the {report.transitions_accounted} transitions history accounts for"
        )
    return report


def committed_runs(history: Sequence[StepRecord]) -> int:
    return sum(1 for r in history if r.status is StepStatus.COMPLETED)


def check_waits(ex: Execution, history: Sequence[StepRecord], signals: Sequence[Signal] = ()) -> list[str]:
    """The waits' invariants: a WAITING execution holds its wait and a terminal one none; one
    signal feeds one wait, and a signal is consumed only by the wait whose commit names it."""
    out: list[str] = []
    if ex.status is Status.WAITING and (ex.wait is None or ex.wait.step != ex.current_step):
        out.append(f"WAITING at step {ex.current_step} without a wait for that step: {ex.wait}")
    if ex.terminal and ex.wait is not None:
        out.append(f"{ex.status.value} but still holds a wait: {ex.wait}")
    named: dict[str, str] = {}
    for r in history:
        for a in r.attempts:
            key = (a.detail or {}).get("signal")
            if key is None or a.outcome != "completed":
                continue
            if key in named:
                out.append(f"signal {key} feeds two waits: {named[key]} and {r.index}:{a.attempt}")
            named[key] = f"{r.index}:{a.attempt}"
    by_key = {s.key: s for s in signals}
    for key, by in named.items():
        sig = by_key.get(key)
        if sig is None:
            out.append(f"wait {by} committed signal {key}, which does not exist")
        elif sig.consumed_by != by and (ex.terminal or int(by.split(":")[0]) < ex.current_step):
            out.append(f"wait {by} moved on with signal {key} not marked consumed by it ({sig.consumed_by})")
    for sig in signals:
        if sig.consumed_by is not None and named.get(sig.key) != sig.consumed_by:
            out.append(f"signal {sig.key} is consumed by {sig.consumed_by}, but no commit of that wait names it")
    return out


def check_compensation(
    ex: Execution,
    history: Sequence[StepRecord],
    entries: Mapping[str, Mapping[str, Any]],
    compensable: Iterable[int],
) -> list[str]:
    """A saga's undo: only committed steps compensated, each at most once, in reverse order,
    and (once COMPENSATED) every committed compensable step undone.

    ``compensable``: the indices of the workflow's steps that declare a compensation.
    """
    out: list[str] = []
    forward = {r.index: r for r in history if not is_compensation(r)}
    undo = sorted((r for r in history if is_compensation(r)), key=lambda r: r.index)
    for r in undo:
        step = forward.get(r.index)
        if step is None or step.status is not StepStatus.COMPLETED:
            out.append(f"step {r.index} ({r.name}) has a compensation record but never committed")
        if r.name.removesuffix(SUFFIX) != (step.name if step else None):
            out.append(f"compensation record {r.name} does not name step {r.index}")
        done = [a for a in r.attempts if a.outcome == "completed"]
        if len(done) > 1 or (r.status is StepStatus.COMPLETED) != (len(done) == 1):
            out.append(f"{r.name}: {len(done)} committed compensations, status {r.status.value}")
        row = entries.get(f"{ex.id}:{r.index}:compensate")
        if r.status is StepStatus.COMPLETED and row is not None and row.get("effect") is None:
            out.append(f"{r.name} committed but its undo effect never landed")
    finished = [(r.index, r.finished_at or 0.0) for r in undo if r.status is StepStatus.COMPLETED]
    by_time = [i for i, _ in sorted(finished, key=lambda p: p[1])]
    if by_time != sorted(by_time, reverse=True):
        out.append(f"compensations ran out of reverse order: steps {by_time}")
    if ex.status is Status.COMPENSATED:
        owed = {i for i in compensable if forward.get(i) is not None and forward[i].status is StepStatus.COMPLETED}
        missing = owed - {r.index for r in undo if r.status is StepStatus.COMPLETED}
        if missing:
            out.append(f"COMPENSATED but committed steps {sorted(missing)} were never undone")
    for key, row in entries.items():
        parts = key.rsplit(":", 2)
        if len(parts) == 3 and parts[2] == "compensate" and row.get("effect") is not None:
            step = forward.get(int(parts[1])) if parts[1].isdigit() else None
            if step is None or step.status is not StepStatus.COMPLETED:
                out.append(f"{key}: an undo landed for a step that never committed")
    return out
