"""What a sweep does with one scheduled workflow: decided from its spec, its cursor and the clock.

Pure. engine/schedules.py carries the plan out with conditional writes on the cursor; the
rules are in DESIGN.md ("Schedules").
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from engine.schedule_expr import CatchUp, count_between, last_at_or_before, next_after, parse
from engine.state import ScheduleCursor
from engine.workflow import WorkflowSpec

_ID_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


class ScheduleVerdict(StrEnum):
    CREATE = "create"  # no cursor yet: it starts at the first fire time after now
    RESUME = "resume"  # a claimed firing is not known to have started: start it (same id)
    RESET = "reset"  # the expression changed at deploy: the cursor starts over from now
    REMOVE = "remove"  # the workflow no longer has a schedule: its cursor goes
    WAIT = "wait"  # nothing is due
    FIRE = "fire"  # a fire time is due: on time, or one run for every missed one (RUN_ONCE)
    SKIP = "skip"  # every due fire time was missed and the policy is SKIP: none runs


@dataclass(frozen=True)
class SchedulePlan:
    verdict: ScheduleVerdict
    fire_at: float | None = None  # the firing to start (FIRE, RESUME)
    next_fire: float | None = None  # the cursor's next fire time afterwards (CREATE, RESET, FIRE, SKIP)
    missed: int = 0  # fire times passed over without a run of their own (FIRE, SKIP)
    late: bool = False  # FIRE: the run is a catch-up, not an on-time firing


def plan(spec: WorkflowSpec | None, cursor: ScheduleCursor | None, now: float, grace: float) -> SchedulePlan:
    """The one thing this sweep does for a workflow's schedule.

    ``spec`` is the deployed workflow if it has a schedule (None: no such workflow, or no
    schedule). A claimed firing comes first: it was decided before any change was deployed.
    A fire time found within ``grace`` of its time is on time; past it, it was missed. Due fire
    times are never run one by one: the latest one due runs (on time, or as the catch-up for all
    of them under RUN_ONCE), or none does (SKIP), and the cursor moves past ``now``.
    """
    if cursor is not None and cursor.pending is not None:
        return SchedulePlan(ScheduleVerdict.RESUME, fire_at=cursor.pending)
    if spec is None or spec.schedule is None:
        return SchedulePlan(ScheduleVerdict.WAIT if cursor is None else ScheduleVerdict.REMOVE)
    schedule = parse(spec.schedule)
    if cursor is None or cursor.expression != spec.schedule:
        verdict = ScheduleVerdict.CREATE if cursor is None else ScheduleVerdict.RESET
        return SchedulePlan(verdict, next_fire=next_after(schedule, now))
    if cursor.next_fire is None or cursor.next_fire > now:
        return SchedulePlan(ScheduleVerdict.WAIT)
    latest = max(cursor.next_fire, last_at_or_before(schedule, now) or cursor.next_fire)
    missed = count_between(schedule, cursor.next_fire, latest) - 1
    following = next_after(schedule, now)
    if now - latest <= grace:
        return SchedulePlan(ScheduleVerdict.FIRE, fire_at=latest, next_fire=following, missed=missed)
    if spec.catch_up is CatchUp.RUN_ONCE:
        return SchedulePlan(ScheduleVerdict.FIRE, fire_at=latest, next_fire=following, missed=missed, late=True)
    return SchedulePlan(ScheduleVerdict.SKIP, next_fire=following, missed=missed + 1)


def iso(at: float) -> str:
    """A fire time as the execution's input and the logs show it: ``2026-12-02T02:00:00Z``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_id(workflow: str, fire_at: float) -> str:
    """The execution id of a workflow's firing at ``fire_at``: the same in every sweeper.

    ``<workflow>-<YYYYMMDDTHHMMZ>``; a workflow name with characters an execution id cannot
    hold (``.``) has them replaced and its crc32 appended, so two names never share an id.
    """
    stamp = datetime.fromtimestamp(fire_at, UTC).strftime("%Y%m%dT%H%MZ")
    if _ID_SAFE.fullmatch(workflow):
        return f"{workflow}-{stamp}"
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", workflow)
    return f"{safe}-{zlib.crc32(workflow.encode('utf-8')):08x}-{stamp}"


def scheduled_input(fire_at: float) -> dict[str, Any]:
    """A firing's input: a function of its fire time only, so every start of it is the same start."""
    return {"scheduled_at": iso(fire_at)}
