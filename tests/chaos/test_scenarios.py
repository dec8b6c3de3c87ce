"""`loom chaos all` on the embedded emulator, as CI runs it: every row PASS, each with its own evidence.

The scenarios run once (chaos.runner.run_all on the shared chaos stack); each
test below then reads that scenario's row, so a failure names its scenario.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from chaos import SCENARIOS, html_report
from chaos.report import render_table, to_json, write_junit
from chaos.runner import run_all
from chaos.scenario import PASS, Result
from chaos.target import Target

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def rows(chaos_target: Target) -> dict[str, Result]:
    return {r.name: r for r in run_all(chaos_target, out=None)}


def row(rows: dict[str, Result], name: str) -> Result:
    r = rows[name]
    assert r.status == PASS, (r.violations, r.reason)
    assert r.injected and r.observed and r.invariant and not r.violations
    return r


def test_chaos_all_passes_with_a_table_json_and_junit(rows: dict[str, Result], tmp_path) -> None:
    assert list(rows) == list(SCENARIOS)
    failed = {n: (r.status, r.violations[:3], r.reason[-500:]) for n, r in rows.items() if r.status != PASS}
    assert failed == {}
    table = render_table(list(rows.values()))
    assert f"{len(SCENARIOS)} passed, 0 failed, 0 skipped" in table
    assert json.loads(to_json(list(rows.values())))["ok"] is True
    suite = ET.parse(write_junit(list(rows.values()), tmp_path / "chaos.xml")).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == str(len(SCENARIOS)) and suite.get("failures") == "0"
    # The HTML report draws each run's marks: every measured recovery has its fault and recovery span.
    for name, r in rows.items():
        if r.recovery_seconds is not None:
            kinds = [m["kind"] for m in r.timeline]
            assert "fault" in kinds and "recovery" in kinds, (name, r.timeline)
            assert all(0 <= m["start"] <= m["end"] <= r.duration_seconds + 1 for m in r.timeline), (name, r.timeline)
    page = html_report.write(list(rows.values()), tmp_path / "chaos.html").read_text(encoding="utf-8")
    assert page.count("<svg ") == len(SCENARIOS)


def test_duplicate_delivery(rows: dict[str, Result]) -> None:
    r = row(rows, "duplicate_delivery")
    assert r.evidence["copies"] > 0
    assert r.evidence["effects"] == 30  # 3 executions x 10 steps: one effect each however many copies ran
    assert not any(r.evidence["queue_after"].values())  # every copy was consumed (as stale or a losing run)


def test_crash_mid_step(rows: dict[str, Result]) -> None:
    r = row(rows, "crash_mid_step")
    assert r.evidence["killed"]
    assert r.evidence["ledger"]["runs"] == 2 and r.evidence["ledger"]["duplicates"] == 1
    assert r.evidence["pid"] not in r.evidence["pids_after"]


def test_crash_after_checkpoint(rows: dict[str, Result]) -> None:
    r = row(rows, "crash_after_checkpoint")
    assert r.evidence["stall_seconds"] > 0.5 and r.evidence["reclaimed"]
    assert r.evidence["stall_seconds"] <= r.evidence["bound"]


def test_visibility_timeout(rows: dict[str, Result]) -> None:
    r = row(rows, "visibility_timeout")
    assert r.evidence["without_heartbeat"]["runs"] >= 2 and r.evidence["without_heartbeat"]["commits"] == 1
    assert r.evidence["with_heartbeat"]["runs"] == 1


def test_poison_step(rows: dict[str, Result]) -> None:
    r = row(rows, "poison_step")
    assert set(r.evidence["attempts"].values()) == {2}
    assert sorted(e[1] for e in r.evidence["errors"].values()) == ["DownstreamBroken", "WorkerLost"]
    assert len(r.evidence["dlq"]) >= 2


def test_concurrent_sweep(rows: dict[str, Result]) -> None:
    r = row(rows, "concurrent_sweep")
    assert r.evidence["redriven_inflight"] == 0
    assert r.evidence["wakes"] == [1, 1, 1] and r.evidence["after_runs"] == [1, 1, 1]


def test_lost_timer(rows: dict[str, Result]) -> None:
    r = row(rows, "lost_timer")
    assert r.evidence["depth_before"]["Delayed"] >= 1 and r.evidence["depth_after"]["Delayed"] == 0
    assert all(-1.0 <= v <= 6.0 for v in r.evidence["lateness"].values())


def test_throttling(rows: dict[str, Result]) -> None:
    r = row(rows, "throttling")
    assert any(k.startswith("dynamodb:") for k in r.evidence["throttled"])
    assert any(k.startswith("sqs:") for k in r.evidence["throttled"])


def test_callback_race(rows: dict[str, Result]) -> None:
    r = row(rows, "callback_race")
    assert len(r.evidence["winners"]) == 3 and "none" not in r.evidence["winners"].values()
    race = r.evidence["timeout_race"]
    assert (race["api"], race["history"]) in ((200, "completed"), (409, "failed"))


def test_signal_race(rows: dict[str, Result]) -> None:
    r = row(rows, "signal_race")
    assert all(v == {"kept": 4, "consumed": 1} for v in r.evidence["signals"].values())
    assert r.evidence["late_status"] == 409


def test_child_crash(rows: dict[str, Result]) -> None:
    r = row(rows, "child_crash")
    assert r.evidence["after_children_runs"] == 1
    assert sorted(r.evidence["statuses"].values()) == ["CANCELLED", "CANCELLED", "COMPLETED"]


def test_saga_compensation(rows: dict[str, Result]) -> None:
    r = row(rows, "saga_compensation")
    assert r.evidence["killed"] and r.evidence["copies"] > 0
    assert all(order == [1, 0] for order in r.evidence["undone"].values()), "charge, then reserve, for every saga"
    refund = r.evidence["refund"]
    assert refund["runs"] >= 2 and refund["effect"] is not None, "the killed refund ran again and landed once"


def test_fanout_join(rows: dict[str, Result]) -> None:
    r = row(rows, "fanout_join")
    assert r.evidence["copies"] > 0
    for items in r.evidence["items"].values():
        assert items["ok"] == 6 and len(items["versions_at_step_1"]) >= 1, items
