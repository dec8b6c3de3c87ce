"""What every scenario shares: its result row, the invariant pass over its executions, its CLI."""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.invariants import Expect, check_execution
from chaos.observe import Watcher
from chaos.target import Target

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Result:
    name: str
    fault: str
    injected: str = ""
    observed: str = ""
    invariant: str = ""
    status: str = PASS
    recovery_seconds: float | None = None
    duration_seconds: float = 0.0
    reason: str = ""  # why it was skipped, or the error that ended it
    violations: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    # Wall-clock start of the run, and its marked spans in seconds from it:
    # {"kind": "fault" | "recovery", "label", "start", "end"} (the HTML report draws them).
    started_at: float | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def span(self, kind: str, label: str, start: float, end: float | None = None) -> None:
        """Mark ``start``..``end`` (wall times, ``time.time()``); a point when ``end`` is None."""
        origin = self.started_at if self.started_at is not None else start
        begin = max(start, origin)  # a wall clock stepped back draws from the run's start, never before it
        stop = begin if end is None else max(begin, end)
        self.timeline.append(
            {"kind": kind, "label": label, "start": round(begin - origin, 3), "end": round(stop - origin, 3)}
        )

    def recovered(self, fault_at: float, recovered_at: float) -> None:
        """The recovery time, from the fault (or the end of it) to the moment all was well again."""
        self.recovery_seconds = round(max(0.0, recovered_at - fault_at), 2)
        if not any(m["kind"] == "fault" for m in self.timeline):  # a scenario may have marked a fault span
            self.span("fault", self.fault, fault_at)
        self.span("recovery", f"recovered in {self.recovery_seconds:.1f}s", fault_at, recovered_at)

    @property
    def passed(self) -> bool:
        return self.status != FAIL

    def fail(self, message: str) -> None:
        self.violations.append(message)
        self.status = FAIL

    def expect(self, condition: bool, message: str) -> None:
        """A scenario-specific piece of evidence that must hold."""
        if not condition:
            self.fail(message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str
    needs: tuple[str, ...]
    run: Callable[[Target, Result], None]
    doc: str = ""


def new_id(name: str, i: int = 0) -> str:
    return f"chaos-{name.replace('_', '-')}-{uuid.uuid4().hex[:8]}-{i}"


def verify(
    result: Result,
    target: Target,
    watcher: Watcher,
    ids: Iterable[str],
    expect: Expect | None = None,
    *,
    api_check: bool = True,
) -> list[Any]:
    """Run the invariant checker over each execution; violations go into the result."""
    reports = []
    checked = 0
    for eid in ids:
        ex = target.get(eid)
        history = target.history(eid)
        report = check_execution(ex, history, target.entries(eid), watcher.trail(eid), expect)
        reports.append(report)
        checked += 1
        for v in report.violations:
            result.fail(f"{eid}: {v}")
        if api_check and ex is not None:
            reported = target.api_status(eid)
            if reported is not None and reported != ex.status.value:
                result.fail(f"{eid}: control plane says {reported}, the table says {ex.status.value}")
    extra = sum(r.extra_writes for r in reports)
    n_fail = len(result.violations)
    result.invariant = (
        f"{checked} execution(s) checked: terminal state, 1 commit/step, versions +1, effects once, none stuck"
        + (f"; {n_fail} violation(s)" if n_fail else "")
    )
    result.evidence.setdefault("versions", {})
    result.evidence["versions"] = {
        "final": [r.final_version for r in reports],
        "accounted_transitions": [r.transitions_accounted for r in reports],
        "start_marks_and_reclaims": extra,
    }
    return reports


def execute(scenario: Scenario, target: Target) -> Result:
    """Run one scenario, turning a skip or a crash of the kit itself into a result row."""
    result = Result(scenario.name, scenario.fault)
    reason = target.why_not(*scenario.needs)
    if reason:
        result.status, result.reason = SKIP, reason
        return result
    # The run's length is measured on the clock its marks are on, the wall clock (some marks are
    # the engine's own timestamps). A sandboxed machine's monotonic clock stands still while the
    # machine is paused and its wall clock does not: measured on the one and marked on the other,
    # a recovery was drawn past the end of its run (CI, two scenarios paused at once).
    result.started_at = time.time()  # the origin of the result's timeline
    try:
        scenario.run(target, result)
    except Exception as exc:  # the row says what broke; the exit code says it failed
        result.fail(f"scenario error: {type(exc).__name__}: {exc}")
        result.reason = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    finally:
        if target.proxy is not None:
            target.proxy.calm()
    result.duration_seconds = round(max(0.0, time.time() - result.started_at), 2)
    if result.violations:
        result.status = FAIL
    return result
