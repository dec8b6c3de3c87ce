"""Local-only controls of the console: the functions' clock and the chaos scenarios.

They call the kit (loom.local.emulator.clock, the stack's sweeper, chaos.runner), never the table
directly. A deployed stack has none of them: its clock is real time and its faults are real.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos import SCENARIOS
from chaos.runner import run_one, scenario
from chaos.stall import StallWatch
from loom.local.emulator import clock as offset_clock

MAX_RUNS = 50  # kept in memory, newest last


class KitError(Exception):
    """A local control refused its input or cannot act; ``status`` is the HTTP answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class ChaosRun:
    id: str
    scenario: str
    fault: str
    state: str = "running"  # running | done
    status: str | None = None  # PASS | FAIL | SKIP once done
    started_at: float = 0.0  # on the functions' clock, as the executions' times are
    finished_at: float | None = None
    injected: str = ""
    observed: str = ""
    invariant: str = ""
    recovery_seconds: float | None = None
    reason: str = ""
    violations: list[str] = field(default_factory=list)
    executions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Kit:
    """``target`` builds the chaos kit's Target for the running stack; ``list_ids`` lists executions (API)."""

    def __init__(
        self,
        offset_file: Path,
        target: Callable[[], Any],
        list_ids: Callable[[str, float], list[str]],
    ) -> None:
        self.offset_file = offset_file
        self._target = target
        self._list_ids = list_ids
        self._runs: list[ChaosRun] = []
        self._lock = threading.Lock()
        self._chaos_busy = threading.Lock()  # one scenario at a time: they share the stack's workers

    # ------------------------------------------------------------------ clock

    def _now(self) -> float:
        """The functions' time: executions are stamped with it, so chaos runs are too (same timeline)."""
        try:
            return time.time() + offset_clock.read_offset(self.offset_file)
        except ValueError:
            return time.time()

    def clock(self) -> dict[str, Any]:
        try:
            offset = offset_clock.read_offset(self.offset_file)
        except ValueError as exc:
            raise KitError(500, "bad_clock", str(exc)) from None
        now = time.time() + offset
        return {
            "offset_seconds": offset,
            "offset": offset_clock.format_duration(offset),
            "now_epoch": now,
            "now": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            # Each move (wall-clock epoch, new offset): the console ages executions on the wall clock.
            "moves": [{"at_epoch": at, "offset_seconds": o} for at, o in offset_clock.read_moves(self.offset_file)],
        }

    def advance(self, body: Any) -> dict[str, Any]:
        """Move the clock by ``{"duration": "2h"}``, then run the sweeper once so due sleepers wake now."""
        if not isinstance(body, dict) or set(body) != {"duration"} or not isinstance(body["duration"], str):
            raise KitError(400, "invalid_input", 'send {"duration": "90s" | "15m" | "2h" | "1d"}')
        try:
            seconds = offset_clock.parse_duration(body["duration"])
            if seconds <= 0:
                raise ValueError("advance by more than 0s")
            offset_clock.advance(self.offset_file, seconds)
        except ValueError as exc:
            raise KitError(400, "invalid_input", str(exc)) from None
        try:
            sweep = self._target().tick_sweeper()
        except Exception as exc:  # the clock moved; the scheduled sweeper still wakes them later
            return {**self.clock(), "advanced_seconds": seconds, "sweep": None, "sweep_error": str(exc)}
        return {**self.clock(), "advanced_seconds": seconds, "sweep": sweep}

    # ------------------------------------------------------------------ chaos

    def scenarios(self) -> dict[str, Any]:
        target = self._target()
        rows = []
        for name in SCENARIOS:
            sc = scenario(name)
            reason = target.why_not(*sc.needs)
            rows.append({"name": name, "fault": sc.fault, "available": reason is None, "reason": reason or ""})
        return {"scenarios": rows, "runs": self.runs()}

    def runs(self, execution: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            found = [r.to_dict() for r in self._runs]
        if execution:
            found = [r for r in found if execution in r["executions"]]
        return found

    def run(self, name: str) -> dict[str, Any]:
        if name not in SCENARIOS:
            raise KitError(404, "unknown_scenario", f"no chaos scenario {name!r}; known: {', '.join(SCENARIOS)}")
        if not self._chaos_busy.acquire(blocking=False):
            raise KitError(409, "busy", "a chaos scenario is already running; wait for it to end")
        sc = scenario(name)
        record = ChaosRun(uuid.uuid4().hex[:12], name, sc.fault, started_at=self._now())
        with self._lock:
            self._runs = [*self._runs, record][-MAX_RUNS:]
        threading.Thread(target=self._execute, args=(sc, record), name=f"chaos-{name}", daemon=True).start()
        return record.to_dict()

    def _execute(self, sc: Any, record: ChaosRun) -> None:
        try:
            # As `loom chaos` runs it: once more if it failed while the machine stood still.
            with StallWatch() as watch:
                result = run_one(sc, self._target(), watch, None)
            record.status, record.injected, record.observed = result.status, result.injected, result.observed
            record.invariant, record.recovery_seconds = result.invariant, result.recovery_seconds
            record.reason, record.violations = result.reason, list(result.violations)
        except Exception as exc:  # the kit itself broke: say so on the row
            record.status, record.reason = "FAIL", f"{type(exc).__name__}: {exc}"
        finally:
            try:
                # Scenario ids are chaos-<name>-<hex>-<i> (chaos.scenario.new_id).
                record.executions = self._list_ids(f"chaos-{sc.name.replace('_', '-')}-", record.started_at)
            except Exception as exc:
                record.reason = (record.reason + f"; listing its executions failed: {exc}").lstrip("; ")
            record.finished_at = self._now()
            record.state = "done"
            self._chaos_busy.release()
