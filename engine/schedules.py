"""Scheduled workflows: each sweep starts what fell due (DESIGN.md, "Schedules").

One cursor item per scheduled workflow holds its next fire time. A firing is claimed by a
conditional write that moves the cursor past it and notes it as ``pending``; the execution is
then started with an id made of the workflow and the fire time, and the note is cleared.
Overlapping sweeps race on the claim, so one of them starts the firing; a sweeper that dies
after the claim leaves the note, and the next sweep starts the same id (idempotent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine import lifecycle
from engine.error_report import error_info
from engine.errors import ConflictError, ExecutionAlreadyExists, LoomError, UnknownWorkflow
from engine.outbox import engine_log
from engine.parts import Parts
from engine.schedule_plan import SchedulePlan, ScheduleVerdict, iso, plan, scheduled_id, scheduled_input
from engine.state import ScheduleCursor
from engine.workflow import WorkflowSpec


@dataclass
class ScheduleTally:
    fired: int = 0  # executions started by a firing (a resumed one included)
    skipped: int = 0  # fire times passed over without a run of their own (missed, or skipped)
    errors: int = 0


def scheduled(parts: Parts) -> dict[str, WorkflowSpec]:
    return {spec.name: spec for spec in parts.registry if spec.schedule is not None}


def fire_due(parts: Parts, now: float, out_of_time: Callable[[], bool]) -> ScheduleTally:
    """Carry out each scheduled workflow's plan for this sweep.

    A deployment without a scheduled workflow reads nothing (a cursor left by a removed
    schedule then stays, inert: nothing fires without the decorator's schedule). One
    workflow's trouble is counted and logged; the others go on, and the next tick retries it.
    """
    tally = ScheduleTally()
    specs = scheduled(parts)
    if not specs:
        return tally
    try:
        cursors = {c.workflow: c for c in parts.store.schedules()}
    except LoomError as exc:
        engine_log().warning("schedule.read_failed", error=error_info(exc))
        tally.errors += 1
        return tally
    for name in sorted(specs.keys() | cursors.keys()):
        if out_of_time():
            break
        try:
            carry_out(parts, name, specs.get(name), cursors.get(name), now, tally)
        except ConflictError:
            engine_log().info("schedule.lost_race", workflow=name)  # another sweep did it
        except LoomError as exc:
            engine_log().warning("schedule.failed", workflow=name, error=error_info(exc))
            tally.errors += 1
    return tally


def carry_out(
    parts: Parts,
    name: str,
    spec: WorkflowSpec | None,
    cursor: ScheduleCursor | None,
    now: float,
    tally: ScheduleTally,
) -> SchedulePlan:
    decided = plan(spec, cursor, now, parts.config.schedule_grace_seconds)
    verdict, store = decided.verdict, parts.store
    if verdict is ScheduleVerdict.WAIT:
        return decided
    if verdict is ScheduleVerdict.CREATE:
        assert spec is not None and spec.schedule is not None
        store.put_schedule(
            ScheduleCursor(name, spec.schedule, decided.next_fire, updated_at=now), expected_version=None
        )
        engine_log().info("schedule.created", workflow=name, expression=spec.schedule, next_fire=decided.next_fire)
        return decided
    assert cursor is not None
    if verdict is ScheduleVerdict.REMOVE:
        store.delete_schedule(name, expected_version=cursor.version)
        engine_log().info("schedule.removed", workflow=name, expression=cursor.expression)
    elif verdict is ScheduleVerdict.RESET:
        assert spec is not None and spec.schedule is not None
        store.put_schedule(
            cursor.moved(now, expression=spec.schedule, next_fire=decided.next_fire), expected_version=cursor.version
        )
        engine_log().info("schedule.reset", workflow=name, was=cursor.expression, expression=spec.schedule)
    elif verdict is ScheduleVerdict.SKIP:
        store.put_schedule(cursor.moved(now, next_fire=decided.next_fire), expected_version=cursor.version)
        engine_log().warning("schedule.missed", workflow=name, missed=decided.missed, next_fire=decided.next_fire)
        tally.skipped += decided.missed
    elif verdict is ScheduleVerdict.FIRE:
        claimed = cursor.moved(now, next_fire=decided.next_fire, pending=decided.fire_at)
        store.put_schedule(claimed, expected_version=cursor.version)  # the commit point of the firing
        _log_fire(name, decided)
        tally.skipped += decided.missed
        _start(parts, claimed, now, tally)
    else:  # RESUME: a sweeper died (or failed) after the claim
        engine_log().info("schedule.resumed", workflow=name, fire_at=cursor.pending)
        _start(parts, cursor, now, tally)
    return decided


def _log_fire(name: str, decided: SchedulePlan) -> None:
    assert decided.fire_at is not None
    event = "schedule.caught_up" if decided.late else "schedule.fired"
    engine_log().info(event, workflow=name, fire_at=iso(decided.fire_at), missed=decided.missed)


def _start(parts: Parts, cursor: ScheduleCursor, now: float, tally: ScheduleTally) -> None:
    """Start the cursor's pending firing, then clear the note (``last_fired``)."""
    fire_at = cursor.pending
    assert fire_at is not None
    execution_id = scheduled_id(cursor.workflow, fire_at)
    try:
        _, created = lifecycle.start(parts, cursor.workflow, scheduled_input(fire_at), execution_id)
        tally.fired += created
    except ExecutionAlreadyExists:
        # The id was taken by hand with another input: that execution stands for the firing.
        engine_log().warning("schedule.id_taken", workflow=cursor.workflow, execution_id=execution_id)
    except UnknownWorkflow:
        # Claimed, then the workflow was removed at deploy: the firing has nothing to run.
        engine_log().warning("schedule.dropped", workflow=cursor.workflow, fire_at=iso(fire_at))
    parts.store.put_schedule(cursor.moved(now, pending=None, last_fired=fire_at), expected_version=cursor.version)


def create_missing(parts: Parts, now: float) -> int:
    """Create the cursors of scheduled workflows that have none, as a sweep would; how many.

    A clock about to jump (``loom time advance``, ``WorkflowTest.advance``) calls this first:
    a cursor created after the jump would start from the new time, and the jump would fire
    nothing.
    """
    specs = scheduled(parts)
    if not specs:
        return 0
    have = {c.workflow for c in parts.store.schedules()}
    made = 0
    for name in sorted(specs.keys() - have):
        try:
            carry_out(parts, name, specs[name], None, now, ScheduleTally())
            made += 1
        except ConflictError:
            pass  # a sweep made it meanwhile
    return made


def next_fires(parts: Parts, now: float) -> dict[str, float | None]:
    """Each scheduled workflow's next fire time: its cursor's, or (no cursor yet, or one for
    another expression) the expression's first after ``now``."""
    specs = scheduled(parts)
    if not specs:
        return {}
    cursors = {c.workflow: c for c in parts.store.schedules()}
    out: dict[str, float | None] = {}
    for name, spec in specs.items():
        cursor = cursors.get(name)
        if cursor is not None and cursor.expression == spec.schedule:
            out[name] = cursor.next_fire
        else:
            out[name] = plan(spec, None, now, parts.config.schedule_grace_seconds).next_fire
    return out
