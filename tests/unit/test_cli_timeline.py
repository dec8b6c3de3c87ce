"""`loom history` for people (loom/cli/timeline.py): current state on its row, pending steps,
durations, compact local times, each failed attempt with its retry delay, the cancel entry."""

from __future__ import annotations

import argparse
from datetime import UTC, timedelta, timezone

import pytest

from loom.cli import timeline
from loom.cli.executions import history

pytestmark = pytest.mark.unit

NOW = 1_796_165_520.0  # 2026-12-01 22:52:00Z
CET = timezone(timedelta(hours=1))
TRACE = [
    {"file": "shop/pay.py", "line": 12, "function": "charge"},
    {"cut_frames": 3},
    {"file": "x.py", "line": 1, "function": "f"},
]


def attempt(n: int, outcome: str, error: dict | None = None, delay: float | None = None) -> dict:
    return {"attempt": n, "outcome": outcome, "error": error, "retry_delay": delay, "duration_seconds": 0.25}


def sleeping_body() -> dict:
    boom = {"type": "TimeoutError", "message": "bank slow", "traceback": TRACE}
    steps = [
        {
            "index": 0,
            "name": "reserve",
            "kind": "step",
            "phase": "forward",
            "status": "COMPLETED",
            "attempts": [attempt(1, "completed")],
            "started_at_epoch": NOW - 75,
            "duration_seconds": 0.12,
        },
        {
            "index": 1,
            "name": "charge",
            "kind": "step",
            "phase": "forward",
            "status": "COMPLETED",
            "attempts": [attempt(1, "failed", boom, 2.0), attempt(2, "completed")],
            "started_at_epoch": NOW - 70,
            "duration_seconds": 64.0,
        },
    ]
    pending = [{"index": 2, "name": "sleep_1h", "kind": "sleep"}, {"index": 3, "name": "ship", "kind": "step"}]
    state = {"kind": "sleeping", "reason": "sleeping until 2026-12-01 23:52:00Z", "until_epoch": NOW + 3600, "step": 2}
    events = [{"kind": "started", "at_epoch": NOW - 80}]
    return {"id": "e1", "steps": steps, "pending": pending, "state": state, "events": events}


def test_compact_local_times_and_durations() -> None:
    assert timeline.local_time(NOW, NOW, UTC) == "22:52:00"
    assert timeline.local_time(NOW, NOW, CET) == "23:52:00"
    assert timeline.local_time(NOW + 3600, NOW, CET) == "Dec 02 00:52"  # another day: the date
    assert timeline.local_time(None, NOW) == "-"
    assert [timeline.duration(s) for s in (0.123, 12.34, 245, 7380, 273600)] == [
        "0.12s",
        "12.3s",
        "4m05s",
        "2h03m",
        "3d04h",
    ]
    assert timeline.relative(NOW + 90, NOW) == "in 1m30s" and timeline.relative(NOW - 5, NOW) == "5.00s ago"


def test_a_sleeping_execution_reads_at_a_glance() -> None:
    text = timeline.render(sleeping_body(), NOW, UTC)
    lines = text.splitlines()
    assert lines[0] == "e1  SLEEPING  sleeping until 23:52:00 (in 1h00m)"
    assert lines[1] == "started 22:50:40"
    assert lines[2].split() == ["#", "STEP", "KIND", "STATUS", "ATTEMPTS", "STARTED", "TOOK", "NOTE"]
    assert lines[3].split() == ["0", "reserve", "step", "COMPLETED", "1", "22:50:45", "0.12s"]
    assert lines[4].split() == ["1", "charge", "step", "COMPLETED", "2", "22:50:50", "1m04s"]
    # The retried attempt under its step, with the cause in one line and the delay.
    assert lines[5].strip() == (
        "attempt 1 failed after 0.25s: TimeoutError: bank slow (at x.py:1 in f); next attempt 2.00s later"
    )
    assert lines[6].split()[:4] == ["2", "sleep_1h", "sleep", "SLEEPING"]
    assert lines[6].endswith("sleeping until 23:52:00 (in 1h00m)")
    assert lines[7].split() == ["3", "ship", "step", "pending", "-"]
    assert "File shop/pay.py" not in text, "the whole trace only with --traceback"


def test_traceback_prints_the_whole_trace() -> None:
    text = timeline.render(sleeping_body(), NOW, UTC, traceback=True)
    assert "  File shop/pay.py, line 12, in charge" in text
    assert "... 3 frame(s) cut to fit the record" in text
    assert text.index("File shop/pay.py") > text.index("attempt 1 failed")


def test_a_wait_and_a_retry_show_on_the_current_row() -> None:
    body = sleeping_body()
    body["steps"].append({"index": 2, "name": "approve", "kind": "callback", "status": "RUNNING", "attempts": []})
    body["pending"] = []
    body["state"] = {
        "kind": "waiting",
        "reason": "waiting for callback approve (timeout 2026-12-01 23:00:00Z)",
        "until_epoch": NOW + 480,
    }
    row = [line for line in timeline.render(body, NOW, UTC).splitlines() if line.startswith("2 ")]
    assert len(row) == 1 and row[0].endswith("waiting for callback approve, timeout 23:00:00 (in 8m00s)")
    body["state"] = {
        "kind": "retrying",
        "reason": "retrying step approve (attempt 2) at 2026-12-01 22:52:10Z",
        "until_epoch": NOW + 10,
    }
    row = [line for line in timeline.render(body, NOW, UTC).splitlines() if line.startswith("2 ")]
    assert len(row) == 1 and row[0].endswith("retrying step approve (attempt 2) at 22:52:10 (in 10.0s)")


def test_the_cancel_entry_and_the_end_follow_the_table() -> None:
    body = {
        "id": "c1",
        "steps": [],
        "pending": [],
        "state": {"kind": "compensated", "reason": "compensated after: Cancelled: cancelled with compensate"},
        "events": [
            {"kind": "started", "at_epoch": NOW - 9},
            {"kind": "cancelled", "at_epoch": NOW - 5, "compensate": True},
            {"kind": "compensated", "at_epoch": NOW, "error": "Cancelled: cancelled with compensate"},
        ],
    }
    lines = timeline.render(body, NOW, UTC).splitlines()
    assert lines[-2:] == [
        "cancelled 22:51:55 (with compensation)",
        "compensated 22:52:00: Cancelled: cancelled with compensate",
    ]
    assert lines[1] == "started 22:51:51"


def test_an_older_control_plane_without_the_new_fields_still_prints(capsys: pytest.CaptureFixture[str]) -> None:
    class Old:
        def history(self, execution_id: str) -> dict:
            return {"id": execution_id, "steps": [{"index": 0, "name": "a", "status": "COMPLETED", "attempts": []}]}

    assert history(Old(), argparse.Namespace(id="x", json=False, traceback=False)) == 0  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["#", "STEP", "STATUS", "ATTEMPTS"] and lines[1].split()[:3] == [
        "0",
        "a",
        "COMPLETED",
    ]


def test_relative_times_count_in_the_control_planes_clock() -> None:
    body = sleeping_body() | {"read_at_epoch": NOW + 7200}  # `loom time advance 2h`: the wake is past
    assert timeline.render(body, NOW, UTC).splitlines()[0] == "e1  SLEEPING  sleeping until Dec 01 23:52 (1h00m ago)"


def test_a_record_newer_than_the_state_is_not_overwritten() -> None:
    body = sleeping_body()
    # The sleep ended between the two reads: its record says COMPLETED, the state still sleeping.
    body["steps"].append({"index": 2, "name": "sleep_1h", "kind": "sleep", "status": "COMPLETED", "attempts": []})
    body["pending"] = [{"index": 3, "name": "ship", "kind": "step"}]
    rows = timeline.rows_of(body, NOW, UTC)
    assert [(r["name"], r["status"]) for r in rows[2:]] == [("sleep_1h", "COMPLETED"), ("ship", "pending")]


def test_a_maps_items_are_nested_under_its_row() -> None:
    items = [
        {"index": i, "status": "COMPLETED", "attempts": [attempt(1, "completed")], "duration_seconds": 0.5}
        for i in range(22)
    ]
    items[1] = {"index": 1, "status": "RETRYING", "attempts": [attempt(1, "failed", {"type": "E", "message": "m"})]}
    body = {"id": "m", "steps": [{"index": 0, "name": "fan", "kind": "map", "status": "RUNNING", "items": items}]}
    lines = timeline.render(body | {"steps": [body["steps"][0] | {"items_next": "c"}]}, NOW, UTC).splitlines()
    nested = [line.strip() for line in lines if line.startswith("      ")]
    assert nested[0] == "item 0: COMPLETED, 1 attempt(s), 0.50s"
    assert nested[1] == "item 1: RETRYING, 1 attempt(s), -: E: m"
    assert len(nested) == 20 + 2 and nested[-2].startswith("... and 2 more item(s)") and "items_next" in nested[-1]


def test_a_named_map_item_shows_its_name_beside_its_index() -> None:
    items = [
        {"index": 0, "name": "line 0: tea", "status": "COMPLETED", "attempts": [attempt(1, "completed")]},
        {"index": 1, "status": "PENDING", "attempts": []},  # not recorded yet: no name, the index says which
    ]
    body = {"id": "m", "steps": [{"index": 0, "name": "prices", "kind": "map", "status": "RUNNING", "items": items}]}
    nested = [line.strip() for line in timeline.render(body, NOW, UTC).splitlines() if line.startswith("      ")]
    assert nested[0].startswith("item 0 line 0: tea: COMPLETED") and nested[1].startswith("item 1: PENDING")
