"""Soak plans are reproducible; reports render; the throttling proxy speaks AWS's error shapes."""

from __future__ import annotations

import io
import random
import xml.etree.ElementTree as ET

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from chaos.report import render_table, to_json, write_junit
from chaos.runner import run_one
from chaos.scenario import FAIL, PASS, SKIP, Result, Scenario
from chaos.soak import TIMED_KINDS, SoakSummary, _Injector, make_plan
from chaos.stall import Stall
from chaos.throttle import ThrottleProxy

pytestmark = pytest.mark.chaos


def test_same_seed_same_plan_and_different_seed_different_plan() -> None:
    a, b, c = make_plan(100, 7), make_plan(100, 7), make_plan(100, 8)
    assert a == b and a.digest == b.digest
    assert a.digest != c.digest
    kinds = {f.kind for f in a.faults}
    assert kinds == set(TIMED_KINDS)
    assert sum(f.kind == "purge" for f in a.faults) == 1
    assert {k for e in a.executions for k in e.knobs} == {
        "crash_in_step",
        "crash_after_checkpoint",
        "transient_failure",
    }


def test_table_json_and_junit(tmp_path) -> None:
    results = [
        Result("duplicate_delivery", "copies", "9 copies", "all stale", "3 checked", "PASS", 1.5),
        Result("throttling", "throttle", status=SKIP, reason="throttle: no proxy"),
        Result(
            "crash_mid_step",
            "kill",
            status=FAIL,
            violations=["x: ran 3 times", "y"],
            reason="Traceback\nboom",
            evidence={"stalls": [{"at": 1.0, "seconds": 3.0}]},
        ),
    ]
    table = render_table(results)
    assert "duplicate_delivery" in table and "1 passed, 1 failed, 1 skipped" in table
    assert "x: ran 3 times (+1 more)" in table
    # Below the totals, the failed scenario again with every violation and its error's last lines.
    tail = table.split("1 passed, 1 failed, 1 skipped", 1)[1].splitlines()
    assert tail == [
        "",
        "FAILED crash_mid_step: observed -",
        "  violation: x: ran 3 times",
        "  violation: y",
        "  the machine stood still: {'at': 1.0, 'seconds': 3.0}",
        "  Traceback",
        "  boom",
    ]
    assert '"ok": false' in to_json(results)
    root = ET.parse(write_junit(results, tmp_path / "j.xml")).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("skipped") == "1"


@pytest.mark.parametrize(
    ("service", "codes"),
    [("dynamodb", {"ProvisionedThroughputExceededException", "ThrottlingException"}), ("sqs", {"RequestThrottled"})],
)
def test_proxy_answers_with_real_throttling_shapes(service: str, codes: set[str]) -> None:
    with ThrottleProxy("http://127.0.0.1:9", seed=3) as proxy:
        proxy.throttle(1.0, 30)
        client = boto3.session.Session(region_name="us-east-1").client(
            service, endpoint_url=proxy.url, config=Config(retries={"mode": "standard", "max_attempts": 2})
        )
        seen, calls = set(), 0
        for _ in range(3):
            with pytest.raises(ClientError) as info:
                if service == "dynamodb":
                    client.get_item(TableName="t", Key={"PK": {"S": "a"}})
                else:
                    client.send_message(QueueUrl=f"{proxy.url}/123456789012/q", MessageBody="x")
            assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            # botocore took it for throttling and retried it.
            retries = info.value.response["ResponseMetadata"]["RetryAttempts"]
            assert retries >= 1
            calls += retries + 1
            seen.add(info.value.response["Error"]["Code"])
        assert seen <= codes and seen
        assert sum(proxy.throttled.values()) == calls


def test_a_background_fault_that_raises_is_reported_as_an_incident_not_lost() -> None:
    injector = _Injector(t=None, w=None, ids=[], rng=random.Random(1))  # type: ignore[arg-type]

    def tick() -> None:
        raise RuntimeError("SweeperFunction timeout: Task timed out after 60.00 seconds")

    injector.background(tick)
    injector.settle()
    assert injector.incidents == ["RuntimeError: SweeperFunction timeout: Task timed out after 60.00 seconds"]
    summary = SoakSummary(seed=1, digest="d", executions=0, planned={}, incidents=injector.incidents)
    assert "incidents during faults: 1" in summary.render()
    assert summary.as_result().status == PASS, "incidents inform; the invariants decide"


def test_the_soak_tallies_runs_repeats_and_absorbed_duplicates_from_the_ledger():
    from chaos.soak import tally

    entries = {"a:0": {"runs": 1, "duplicates": 0}, "a:1": {"runs": 3, "duplicates": 1}}
    assert tally(entries, extra_writes=2) == {
        "step_runs": 4,
        "repeat_runs": 2,
        "absorbed_duplicates": 1,
        "extra_writes": 2,
    }
    summary = SoakSummary(seed=1, digest="d", executions=2, planned={}, figures={"step_runs": 4, "dlq_messages": 0})
    assert "figures: step_runs=4, dlq_messages=0" in summary.render()


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def pause(self, seconds: float) -> None:
        self.now += seconds


def drained_after(monkeypatch, depths: list[int], **kwargs) -> tuple[int, float]:
    """wait_drained over a queue whose depth goes through ``depths`` (then stays at the last)."""
    from chaos import faults

    t = FakeTime()
    seq = iter(depths)
    last = {"n": depths[0]}

    def depth(_target) -> dict[str, int]:
        last["n"] = next(seq, last["n"])
        return {"Visible": last["n"], "NotVisible": 0, "Delayed": 0}

    monkeypatch.setattr(faults, "queue_depth", depth)
    left = faults.wait_drained(None, 30, clock=lambda: t.now, pause=t.pause, **kwargs)  # type: ignore[arg-type]
    return sum(left.values()), t.now


def test_a_long_tail_of_stale_copies_drains_while_a_circulating_message_is_still_caught(monkeypatch) -> None:
    falling = list(range(1500, -1, -10))  # 10 fewer every half second: 75 s to empty
    assert drained_after(monkeypatch, falling) == (890, 30.5), "a fixed 30 s gives up on a queue still emptying"
    left, took = drained_after(monkeypatch, falling, limit=500)
    assert left == 0 and took == 75.0
    left, took = drained_after(monkeypatch, [5, 4, 3, 2, 1, 2, 1, 2, 1], limit=500)
    assert left == 1 and took == 32.5, "stuck at one message: caught 30 s after its last new low"
    left, took = drained_after(monkeypatch, falling, limit=40)
    assert left > 0 and took == 40.5, "and never past the limit"


def test_wait_depth_returns_once_the_timers_are_queued_and_gives_up_at_its_deadline(monkeypatch) -> None:
    """lost_timer purges only once both timers are in the queue: a checkpoint precedes its send."""
    from chaos import faults

    t = FakeTime()
    delayed = iter([0, 1, 1, 2])

    def depth(_target) -> dict[str, int]:
        return {"Visible": 0, "NotVisible": 0, "Delayed": next(delayed, 2)}

    monkeypatch.setattr(faults, "queue_depth", depth)
    seen = faults.wait_depth(None, lambda d: d["Delayed"] >= 2, 5, clock=lambda: t.now, pause=t.pause)  # type: ignore[arg-type]
    assert seen["Delayed"] == 2 and t.now == pytest.approx(0.15)
    monkeypatch.setattr(faults, "queue_depth", lambda _t: {"Visible": 0, "NotVisible": 0, "Delayed": 1})
    seen = faults.wait_depth(None, lambda d: d["Delayed"] >= 2, 5, clock=lambda: t.now, pause=t.pause)  # type: ignore[arg-type]
    assert seen["Delayed"] == 1 and 5.0 < t.now - 0.15 <= 5.1, "a timer that never comes is not waited for forever"


def test_lost_timer_s_timers_outlast_its_wait_for_both_executions() -> None:
    """Both timers must still be pending at the purge, however late the second execution reaches its
    wait: with 4 s timers, one that came 4 s before the other was delivered, not lost, and the run failed."""
    from chaos import lost_timer, workflows
    from engine.workflow import SleepSpec

    nap = next(s for s in workflows.LostNap.spec.steps if isinstance(s, SleepSpec))  # type: ignore[attr-defined]
    retry = workflows.Backoff.spec.steps[1].retry  # type: ignore[attr-defined]
    before_purge = 2 * lost_timer.SEE_WAIT + lost_timer.SEE_TIMERS
    assert nap.seconds > before_purge and retry.base > before_purge and retry.max_delay >= retry.base
    assert max(nap.seconds, retry.max_delay) <= 900, "longer than SQS's delay: no delayed message to lose"


class _Paused:
    """A machine paused mid-run: its wall clock moves on, its monotonic clock stands still."""

    def __init__(self) -> None:
        self.wall = 1_000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return 5.0


class _Bare:
    proxy = None

    def why_not(self, *needs: str) -> str:
        return ""


def test_a_run_s_length_is_on_the_clock_its_marks_are_on(monkeypatch) -> None:
    """CI drew two recoveries past their run's end: marks on the wall clock, length on the
    monotonic one, which a paused machine stops. Both are the wall clock's now."""
    import chaos.scenario as scenario_module

    clock = _Paused()
    monkeypatch.setattr(scenario_module, "time", clock)

    def run(_target: object, r: Result) -> None:
        fault_at = clock.time()
        clock.wall += 40.0  # paused for 40 s while recovering
        r.recovered(fault_at, clock.time())
        clock.wall += 1.0

    result = scenario_module.execute(scenario_module.Scenario("paused", "a pause", (), run), _Bare())  # type: ignore[arg-type]
    assert result.status == PASS and result.recovery_seconds == 40.0
    assert result.duration_seconds == 41.0
    assert all(0 <= m["start"] <= m["end"] <= result.duration_seconds for m in result.timeline), result.timeline


def test_a_wall_clock_stepped_back_draws_no_mark_before_the_run() -> None:
    r = Result("stepped", "a step back")
    r.started_at = 1_000.0
    r.recovered(990.0, 1_003.0)
    assert [(m["start"], m["end"]) for m in r.timeline] == [(0.0, 0.0), (0.0, 3.0)]


class _Watch:
    """A stall watch whose stalls the test sets: each run of a scenario sees the next list."""

    def __init__(self, *per_run: list[Stall]) -> None:
        self.per_run = list(per_run)

    def within(self, start: float, end: float) -> list[Stall]:
        return self.per_run.pop(0) if self.per_run else []


def _flaky_scenario(fails: int) -> tuple[Scenario, list[int]]:
    runs: list[int] = []

    def run(_target: object, r: Result) -> None:
        runs.append(1)
        r.observed = f"run {len(runs)}"
        r.expect(len(runs) > fails, f"run {len(runs)}: a second delivery happened")

    return Scenario("stalled", "a planned fault", (), run), runs


def test_a_failure_while_the_machine_stood_still_runs_once_more_and_says_so() -> None:
    stood = [Stall(at=1.0, seconds=9.0, wall_gap=9.25, monotonic_gap=0.25)]
    sc, runs = _flaky_scenario(fails=1)
    out = io.StringIO()
    result = run_one(sc, _Bare(), _Watch(stood, []), out)  # type: ignore[arg-type]
    assert len(runs) == 2 and result.status == PASS
    assert result.observed == (
        "run 2; run twice: the machine stood still 9.0s during the first run, which failed (1 violation(s))"
    )
    assert result.evidence["first_run"] == {
        "violations": ["run 1: a second delivery happened"],
        "stalls": [{"at": 1.0, "seconds": 9.0, "wall_gap": 9.25, "monotonic_gap": 0.25}],
    }
    assert "FAIL in" in out.getvalue() and "the machine stood still 9.0s: running it again" in out.getvalue()


def test_a_failure_with_the_machine_running_stands_and_a_stalled_rerun_is_not_run_a_third_time() -> None:
    sc, runs = _flaky_scenario(fails=5)
    result = run_one(sc, _Bare(), _Watch([]), None)  # type: ignore[arg-type]
    assert len(runs) == 1 and result.status == FAIL and "first_run" not in result.evidence
    stood = [Stall(at=1.0, seconds=3.0, wall_gap=3.25, monotonic_gap=3.25)]
    sc, runs = _flaky_scenario(fails=5)
    result = run_one(sc, _Bare(), _Watch(stood, stood, stood), None)  # type: ignore[arg-type]
    assert len(runs) == 2 and result.status == FAIL
    assert result.evidence["stalls"] == result.evidence["first_run"]["stalls"], "both runs' stalls are kept"
