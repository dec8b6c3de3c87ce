"""`loom time advance` fires a scheduled workflow at once: the stack's sweeper ticks when the
functions' clock moves, not only on its schedule (booted as a user boots it, `loom up --detach`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from loom.local.emulator.client import LocalApi, ok
from tests.e2e.support import alive, all_pids, log_lines, loom, stack_info, wait_for, wait_status

pytestmark = [pytest.mark.e2e]


def nightly(api: LocalApi) -> list[str]:
    return sorted(e["id"] for e in ok(api, "GET", "/executions?workflow=nightly_report&limit=100")["executions"])


def test_time_advance_fires_the_nightly_report_at_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # A tick an hour apart: only the tick at start and the clock's moves run the sweeper here.
    done = loom(state, "up", "--detach", "--port", "0", "--api-port", "0", "--tick", "3600", "--workers", "1")
    assert done.returncode == 0, done.stderr
    info: dict[str, Any] = stack_info(state) or {}
    api = LocalApi.from_info(info)
    try:
        # The first tick, at start, makes the schedule's cursor.
        wait_for("the schedule's cursor", lambda: any(e.get("event") == "schedule.created" for e in log_lines(state)))
        schedule = next(w for w in ok(api, "GET", "/workflows")["workflows"] if w["name"] == "nightly_report")
        fire = schedule["schedule"]["next_fire_epoch"]
        assert nightly(api) == []
        jump = int(fire - time.time()) + 30  # to 30 s past the next 02:00 UTC
        moved = loom(state, "time", "advance", f"{jump}s")
        assert moved.returncode == 0, moved.stderr
        assert "the sweeper runs now" in moved.stdout
        stamp = time.strftime("%Y%m%dT%H%MZ", time.gmtime(fire))
        ids = wait_for("the night's execution", lambda: nightly(api), timeout=20)
        assert ids == [f"nightly_report-{stamp}"]
        ex = wait_status(api, ids[0], "COMPLETED", timeout=30)
        assert ex["input"] == {"scheduled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fire))}
    finally:
        pids = all_pids(stack_info(state) or info)
        assert loom(state, "down").returncode == 0
        wait_for("every stack process to exit", lambda: not any(alive(p) for p in pids), timeout=30)
