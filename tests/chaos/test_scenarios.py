"""Every scenario against the embedded stack: it must PASS and show its specific evidence."""

from __future__ import annotations

import pytest

from chaos.runner import scenario
from chaos.scenario import PASS, Result, execute
from chaos.target import Target

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(240)]


def run(name: str, target: Target) -> Result:
    result = execute(scenario(name), target)
    assert result.status == PASS, (result.violations, result.reason)
    return result


def test_duplicate_delivery(chaos_target: Target) -> None:
    r = run("duplicate_delivery", chaos_target)
    assert r.evidence["copies"] > 0
    assert r.evidence["effects"] == 30  # 3 executions x 10 steps: one effect each however many copies ran
    assert not any(r.evidence["queue_after"].values())  # every copy was consumed (as stale or a losing run)


def test_crash_mid_step(chaos_target: Target) -> None:
    r = run("crash_mid_step", chaos_target)
    assert r.evidence["killed"]
    assert r.evidence["ledger"]["runs"] == 2 and r.evidence["ledger"]["duplicates"] == 1
    assert r.evidence["pid"] not in r.evidence["pids_after"]


def test_crash_after_checkpoint(chaos_target: Target) -> None:
    r = run("crash_after_checkpoint", chaos_target)
    assert r.evidence["stall_seconds"] > 0.5 and r.evidence["reclaimed"]
    assert r.evidence["stall_seconds"] <= r.evidence["bound"]


def test_visibility_timeout(chaos_target: Target) -> None:
    r = run("visibility_timeout", chaos_target)
    assert r.evidence["without_heartbeat"]["runs"] >= 2 and r.evidence["without_heartbeat"]["commits"] == 1
    assert r.evidence["with_heartbeat"]["runs"] == 1


def test_poison_step(chaos_target: Target) -> None:
    r = run("poison_step", chaos_target)
    assert set(r.evidence["attempts"].values()) == {2}
    assert sorted(e[1] for e in r.evidence["errors"].values()) == ["DownstreamBroken", "WorkerLost"]
    assert len(r.evidence["dlq"]) >= 2


def test_concurrent_sweep(chaos_target: Target) -> None:
    r = run("concurrent_sweep", chaos_target)
    assert r.evidence["redriven_inflight"] == 0
    assert r.evidence["wakes"] == [1, 1, 1] and r.evidence["after_runs"] == [1, 1, 1]


def test_lost_timer(chaos_target: Target) -> None:
    r = run("lost_timer", chaos_target)
    assert r.evidence["depth_before"]["Delayed"] >= 1 and r.evidence["depth_after"]["Delayed"] == 0
    assert all(v <= 6.0 for v in r.evidence["lateness"].values())


def test_throttling(chaos_target: Target) -> None:
    r = run("throttling", chaos_target)
    assert any(k.startswith("dynamodb:") for k in r.evidence["throttled"])
    assert any(k.startswith("sqs:") for k in r.evidence["throttled"])
