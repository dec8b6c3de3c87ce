"""The local speed figures (loom.bench.local_speed) come from the histories' commit times."""

from __future__ import annotations

import json

import pytest

from loom.bench import local_speed
from loom.bench.local_speed import (
    TARGET_GAP_MS,
    TARGET_STEPS_PER_SECOND,
    History,
    burst_figures,
    checks,
    cpu_per_step,
    gap_figures,
    meter_per_step,
)
from loom.local.emulator.meter import RequestMeter, operation

pytestmark = pytest.mark.unit


def test_burst_is_committed_steps_over_first_start_to_last_commit() -> None:
    histories = [
        History("a", "COMPLETED", 100.0, (100.5, 101.0, 102.0)),
        History("b", "COMPLETED", 100.1, (100.6, 104.0)),
        History("c", "RUNNING", 100.2, ()),
    ]
    got = burst_figures(histories, started=100.0)
    assert got["steps"] == 5 and got["executions"] == 3 and got["completed"] == 2
    assert got["seconds"] == pytest.approx(4.0)
    assert got["steps_per_second"] == pytest.approx(5 / 4.0)


def test_gaps_are_between_consecutive_commits_of_one_execution_the_first_step_apart() -> None:
    histories = [
        History("a", "COMPLETED", 10.0, (11.0, 11.004, 11.010, 11.012)),  # gaps 4, 6, 2 ms
        History("b", "COMPLETED", 20.0, (20.5, 20.508)),  # gap 8 ms
    ]
    got = gap_figures(histories)
    assert got["gaps"] == 4
    assert got["gap_ms"]["p50"] == pytest.approx(6.0, abs=1e-6)  # of 2, 4, 6, 8: rank round(0.5 * 3) = 2
    assert got["gap_ms"]["max"] == pytest.approx(8.0, abs=1e-6)
    assert got["first_step_ms"]["max"] == pytest.approx(1000.0)


def test_checks_follow_the_figures_against_the_targets() -> None:
    lone = gap_figures([History("a", "COMPLETED", 0.0, (1.0, 1.0 + TARGET_GAP_MS / 2000))])
    slow = burst_figures([History("b", "COMPLETED", 0.0, (1.0, 2.0))], started=0.0)
    fast = {**slow, "steps_per_second": TARGET_STEPS_PER_SECOND}
    assert [c["met"] for c in checks(slow, lone)] == [False, True, True]
    assert [c["met"] for c in checks(fast, lone)] == [True, True, True]
    no_gaps = gap_figures([History("c", "COMPLETED", 0.0, (1.0,))])
    assert checks(fast, no_gaps)[1]["met"] is False, "no gap measured is no target met"


def test_cpu_and_the_emulator_meter_are_per_committed_step() -> None:
    assert cpu_per_step({"emulator": 1.0}, {"emulator": 3.0, "worker": 0.5}, 100) == {
        "emulator": pytest.approx(20.0),
        "worker": pytest.approx(5.0),
    }
    before = {"dynamodb.UpdateItem": {"requests": 10, "cpu_seconds": 0.1}}
    after = {
        "dynamodb.UpdateItem": {"requests": 40, "cpu_seconds": 0.4},
        "dynamodb.GetItem": {"requests": 5, "cpu_seconds": 0.01},
        "amazonsqs.ReceiveMessage": {"requests": 3, "cpu_seconds": 0.003},
    }
    got = meter_per_step({**before, "amazonsqs.ReceiveMessage": after["amazonsqs.ReceiveMessage"]}, after, 10)
    assert got["dynamodb.UpdateItem"] == {
        "requests_per_step": 3.0,
        "cpu_ms_per_step": pytest.approx(30.0),
        "cpu_ms_per_request": pytest.approx(10.0),
    }
    assert "amazonsqs.ReceiveMessage" not in got, "no request in the phase, no row"


def test_the_emulator_meter_names_operations_by_their_target(tmp_path) -> None:
    assert operation({"X-Amz-Target": "DynamoDB_20120810.UpdateItem"}, "/") == "dynamodb.UpdateItem"
    assert operation({"X-Amz-Target": "AmazonSQS.ReceiveMessage"}, "/") == "amazonsqs.ReceiveMessage"
    assert operation({}, "/moto-api/data.json") == "moto-api"
    meter = RequestMeter(tmp_path / "m.json")
    meter.add("dynamodb.GetItem", 0.002)
    meter.add("dynamodb.GetItem", 0.004)
    meter.dump()
    assert json.loads((tmp_path / "m.json").read_text()) == {
        "dynamodb.GetItem": {"requests": 2, "cpu_seconds": pytest.approx(0.006)}
    }


def test_the_reference_work_is_timed_on_this_thread_s_cpu_as_a_median(monkeypatch) -> None:
    # Five repeats taking 10, 30, 20, 11 and 500 ms of this thread's CPU: the outlier (a context
    # switch, a neighbour) does not move the figure.
    ticks = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.020, 3.0, 3.011, 4.0, 4.500])
    monkeypatch.setattr(local_speed.time, "thread_time", lambda: next(ticks))
    monkeypatch.setattr(local_speed, "REFERENCE_ROUNDS", 1)
    assert local_speed.reference_cpu_ms() == 20.0
    assert next(ticks, None) is None, "every repeat is timed"


def test_the_figures_are_printed_beside_the_machine_s_speed() -> None:
    burst = {
        "completed": 100,
        "executions": 100,
        "steps": 1000,
        "seconds": 5.0,
        "steps_per_second": 200.0,
        "start_requests_seconds": 1.0,
        "cpu_ms_per_step": {"WorkerFunction": 3.0, "emulator": 4.0},
        "emulator_by_operation": {},
    }
    lone = {
        "completed": 10,
        "executions": 10,
        "gaps": 90,
        "gap_ms": {"p50": 7.0, "p90": 9.0, "max": 20.0},
        "first_step_ms": {"p50": 900},
    }
    result = {
        "machine": {"load_average": (1.0, 1.0, 1.0), "reference_cpu_ms": {"before": 24.5, "after": 31.25}},
        "parameters": {"workers": 2, "workflow": "plain_steps"},
        "burst": burst,
        "lone": lone,
        "checks": checks(burst, lone),
    }
    text = local_speed.render(result)
    assert "the reference work took 24.50 ms of CPU before the run, 31.25 ms after" in text
    assert "200.0 steps/s" in text and "p50 7.00 ms" in text
