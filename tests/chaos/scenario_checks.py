"""What each chaos scenario's row must show beyond PASS, and how the suite splits the table.

The scenarios run in two groups, each on a chaos stack of its own (tests/chaos/test_scenarios.py
and test_scenarios_more.py), so that two test processes run them at once: a scenario spends most
of its time waiting for a lease, a visibility timeout or a sweeper tick, not on the CPU. Each
group is ``chaos.runner.run_all`` over its names, as ``loom chaos all`` runs them all.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable

from chaos import html_report
from chaos.report import render_table, to_json, write_junit
from chaos.scenario import PASS, Result

# Balanced by their durations on the 2-core machine (about 175 s each, loaded).
GROUPS: tuple[tuple[str, ...], ...] = (
    (
        "visibility_timeout",
        "composite_saga",
        "poison_step",
        "callback_race",
        "lost_timer",
        "schedule_overlap",
        "redeploy",
        "fanout_batch",
    ),
    (
        "crash_after_checkpoint",
        "concurrent_sweep",
        "throttling",
        "duplicate_delivery",
        "saga_compensation",
        "child_crash",
        "fanout_join",
        "signal_race",
        "crash_mid_step",
    ),
)


def row(rows: dict[str, Result], name: str) -> Result:
    r = rows[name]
    assert r.status == PASS, (r.violations, r.reason)
    assert r.injected and r.observed and r.invariant and not r.violations
    return r


def check_table(rows: dict[str, Result], names: tuple[str, ...], tmp_path) -> None:
    """The group's table, JSON and JUnit as ``loom chaos all`` writes them: every row PASS."""
    assert tuple(rows) == names
    failed = {n: (r.status, r.violations[:3], r.reason[-500:]) for n, r in rows.items() if r.status != PASS}
    assert failed == {}
    table = render_table(list(rows.values()))
    assert f"{len(names)} passed, 0 failed, 0 skipped" in table
    assert json.loads(to_json(list(rows.values())))["ok"] is True
    suite = ET.parse(write_junit(list(rows.values()), tmp_path / "chaos.xml")).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == str(len(names)) and suite.get("failures") == "0"
    # The HTML report draws each run's marks: every measured recovery has its fault and recovery span.
    for name, r in rows.items():
        if r.recovery_seconds is not None:
            kinds = [m["kind"] for m in r.timeline]
            assert "fault" in kinds and "recovery" in kinds, (name, r.timeline)
            assert all(0 <= m["start"] <= m["end"] <= r.duration_seconds + 1 for m in r.timeline), (name, r.timeline)
    page = html_report.write(list(rows.values()), tmp_path / "chaos.html").read_text(encoding="utf-8")
    assert page.count("<svg ") == len(names)


def _duplicate_delivery(r: Result) -> None:
    assert r.evidence["copies"] > 0
    assert r.evidence["effects"] == 30  # 3 executions x 10 steps: one effect each however many copies ran
    assert not any(r.evidence["queue_after"].values())  # every copy was consumed (as stale or a losing run)


def _crash_mid_step(r: Result) -> None:
    assert r.evidence["killed"]
    assert r.evidence["ledger"]["runs"] == 2 and r.evidence["ledger"]["duplicates"] == 1
    assert r.evidence["pid"] not in r.evidence["pids_after"]


def _crash_after_checkpoint(r: Result) -> None:
    assert r.evidence["stall_seconds"] > 0.5 and r.evidence["reclaimed"]
    assert r.evidence["stall_seconds"] <= r.evidence["bound"]


def _visibility_timeout(r: Result) -> None:
    assert r.evidence["without_heartbeat"]["runs"] >= 2 and r.evidence["without_heartbeat"]["commits"] == 1
    assert r.evidence["with_heartbeat"]["runs"] == 1


def _poison_step(r: Result) -> None:
    assert set(r.evidence["attempts"].values()) == {2}
    assert sorted(e[1] for e in r.evidence["errors"].values()) == ["DownstreamBroken", "WorkerLost"]
    assert len(r.evidence["dlq"]) >= 2


def _concurrent_sweep(r: Result) -> None:
    assert r.evidence["redriven_inflight"] == 0
    assert r.evidence["wakes"] == [1, 1, 1] and r.evidence["after_runs"] == [1, 1, 1]


def _schedule_overlap(r: Result) -> None:
    assert set(r.evidence["per_fire"].values()) == {1}
    assert all(n >= 2 for n in r.evidence["on_time"]) and all(n <= 1 for n in r.evidence["fired_by_racers"])


def _redeploy(r: Result) -> None:
    assert r.evidence["blocked"]["reason"] == "definition_changed" and r.evidence["blocked"]["from"] == "SLEEPING"
    # Nothing past a ran while it was blocked, through a recheck; then a and b once each, on v1.
    assert len(r.evidence["at_block"]["entries"]) == len(r.evidence["at_recheck"]["entries"]) == 1
    assert r.evidence["runs"] == {"0": 1, "2": 1} and r.evidence["history"] == ["a", "park", "b"]
    assert r.evidence["dlq"][1] <= r.evidence["dlq"][0]


def _lost_timer(r: Result) -> None:
    assert r.evidence["depth_before"]["Delayed"] == 2 and r.evidence["depth_after"]["Delayed"] == 0
    assert all(-1.0 <= v <= 6.0 for v in r.evidence["lateness"].values())


def _throttling(r: Result) -> None:
    assert any(k.startswith("dynamodb:") for k in r.evidence["throttled"])
    assert any(k.startswith("sqs:") for k in r.evidence["throttled"])


def _callback_race(r: Result) -> None:
    assert len(r.evidence["winners"]) == 3 and "none" not in r.evidence["winners"].values()
    race = r.evidence["timeout_race"]
    assert (race["api"], race["history"]) in ((200, "completed"), (410, "failed"))


def _signal_race(r: Result) -> None:
    assert all(v == {"kept": 4, "consumed": 1} for v in r.evidence["signals"].values())
    assert r.evidence["late_status"] == 409


def _child_crash(r: Result) -> None:
    assert r.evidence["after_children_runs"] == 1
    assert sorted(r.evidence["statuses"].values()) == ["CANCELLED", "CANCELLED", "COMPLETED"]


def _saga_compensation(r: Result) -> None:
    assert r.evidence["killed"] and r.evidence["copies"] > 0
    assert all(order == [1, 0] for order in r.evidence["undone"].values()), "charge, then reserve, for every saga"
    refund = r.evidence["refund"]
    assert refund["runs"] >= 2 and refund["effect"] is not None, "the killed refund ran again and landed once"


def _fanout_join(r: Result) -> None:
    assert r.evidence["copies"] > 0
    for items in r.evidence["items"].values():
        assert items["ok"] == 6 and len(items["versions_at_step_1"]) >= 1, items


def _fanout_batch(r: Result) -> None:
    assert r.evidence["copies"] > 0
    for batch in r.evidence["batches"].values():
        assert batch["failed"] == [1] and batch["declined"], batch  # line 1's slot declines line 4 at least
        assert not set(batch["declined"]) & set(batch["ok"]), batch


def _composite_saga(r: Result) -> None:
    roles = r.evidence["roles"]
    assert r.evidence["killed"] and r.evidence["copies"] >= 9
    assert r.evidence["refund"]["runs"] >= 2 and r.evidence["refund"]["effect"] is not None
    lines = [f"prices[{i}]#compensate" for i in range(5, -1, -1)]
    assert r.evidence["undo_order"] == ["charge#compensate", *lines], "charge, then the lines last to first"
    assert all(items["ok"] == 6 for items in r.evidence["items"].values()), r.evidence["items"]
    assert set(r.evidence["callbacks"]) == set(roles.values())
    for answers in r.evidence["callbacks"].values():  # two identical completions: one wins, one is a repeat
        assert sorted(map(tuple, answers)) in ([(200, False), (200, True)], [(200, False), (409, False)]), answers
    assert r.evidence["tokens_in_log"] == 0  # the kit's stack has a log, and no token is in it
    aimed = {("shipped", 0), ("shipped's child", 0), ("caught", 3), ("undone", 0)}
    assert aimed <= {tuple(c) for c in r.evidence["crashes"]}, r.evidence["crashes"]
    assert not any(r.evidence["queue"].values())


CHECKS: dict[str, Callable[[Result], None]] = {
    "duplicate_delivery": _duplicate_delivery,
    "crash_mid_step": _crash_mid_step,
    "crash_after_checkpoint": _crash_after_checkpoint,
    "visibility_timeout": _visibility_timeout,
    "poison_step": _poison_step,
    "concurrent_sweep": _concurrent_sweep,
    "lost_timer": _lost_timer,
    "throttling": _throttling,
    "callback_race": _callback_race,
    "signal_race": _signal_race,
    "child_crash": _child_crash,
    "saga_compensation": _saga_compensation,
    "fanout_join": _fanout_join,
    "fanout_batch": _fanout_batch,
    "composite_saga": _composite_saga,
    "schedule_overlap": _schedule_overlap,
    "redeploy": _redeploy,
}
