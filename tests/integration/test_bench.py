"""Smoke test of the benchmark machinery (scripts/bench.py) on tiny sizes.

Assertions are on counts, never on timings: the requests are counted, chaining
needs fewer SQS requests than one step per message, the floor is cheaper than
the engine, the sweeper's tick does not grow with executions that are not due,
and a crash between checkpoint and enqueue is recovered through the lease.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.bench import capacity as cap
from loom.bench import scenarios
from loom.bench.inprocess import BenchStack
from loom.bench.projection import project
from loom.bench.report import render_recovery

pytestmark = [pytest.mark.integration, pytest.mark.server]

N, STEPS = 3, 4


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict:
    state = Path(tmp_path_factory.mktemp("bench"))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.setenv(name, "testing")
        with BenchStack(workers=1, state_dir=state, batching_window=0.0) as stack:
            runs = {
                mode: scenarios.run_engine(stack, chain=(mode == "chain"), n=N, steps=STEPS, tick=3600, timeout=120)
                for mode in ("chain", "one_step")
            }
            floor = scenarios.run_floor(stack, n=N, steps=STEPS, workers=1)
            recovery = scenarios.recovery(stack, chain=True, steps=STEPS, crash_step=1, tick=60.0)
            mid_step = scenarios.recovery(stack, chain=False, steps=STEPS, crash_step=1, tick=60.0, point="mid_step")
            # The dead worker's message never comes back (as if lost): the lease and the sweeper recover it.
            lost = scenarios.recovery(stack, chain=True, steps=STEPS, crash_step=1, tick=60.0, visibility=10_000.0)
            sweeper = scenarios.sweeper_cost(stack, sizes=[10, 40])
    return {
        "runs": runs,
        "floor": floor,
        "recovery": recovery,
        "mid_step": mid_step,
        "lost": lost,
        "sweeper": sweeper,
    }


def test_every_execution_completes_and_its_requests_are_counted(measured):
    for run in measured["runs"].values():
        assert run["all_completed"] and run["completed_executions"] == N
        assert run["committed_steps"] == N * STEPS
        ops = {(r["role"], r["service"], r["operation"]): r["count"] for r in run["requests"]}
        assert ops[("client", "dynamodb", "PutItem")] == N  # one create per execution
        assert ops[("client", "sqs", "SendMessage")] == N
        assert ops[("worker", "dynamodb", "UpdateItem")] == N * STEPS  # one history commit per step
        assert ops[("worker", "dynamodb", "PutItem")] == N * STEPS  # one conditional put per step
        assert ops[("esm", "sqs", "ReceiveMessage")] > 0 and ops[("esm", "sqs", "DeleteMessageBatch")] > 0
        assert ops[("ledger", "dynamodb", "UpdateItem")] == 2 * N * STEPS  # kept apart from the engine's
        assert run["totals"]["wcu_per_step"]["table"] > 0 and run["totals"]["rcu_per_step"]["table"] > 0
        assert run["lambda"]["worker_invocations"] > 0
        assert set(run["execution_item_bytes_by_step"]) == {str(i) for i in range(STEPS + 1)}


def test_chaining_needs_fewer_sqs_requests_and_reads_than_one_step_per_message(measured):
    chain, one = measured["runs"]["chain"], measured["runs"]["one_step"]
    ops = {m: {(r["role"], r["operation"]): r["count"] for r in run["requests"]} for m, run in measured["runs"].items()}
    assert ops["chain"].get(("worker", "SendMessage"), 0) == 0
    assert ops["one_step"][("worker", "SendMessage")] == N * (STEPS - 1)
    assert ops["chain"][("worker", "GetItem")] == N  # one read per chain, none between links
    assert ops["one_step"][("worker", "GetItem")] == N * STEPS
    c, o = chain["totals"], one["totals"]
    assert c["sqs_requests_per_step_without_empty_receives"] < o["sqs_requests_per_step_without_empty_receives"]
    assert c["sqs_requests_per_step_without_empty_receives"] <= 1
    assert c["worker_wcu_table_per_step"] <= 2


def test_the_floor_is_cheaper_than_the_engine(measured):
    floor = measured["floor"]["totals"]
    ops = {(r["role"], r["operation"]): r["count"] for r in measured["floor"]["requests"]}
    assert ops == {
        ("floor", "PutItem"): N * STEPS,
        ("floor", "UpdateItem"): N * STEPS,
        ("ledger", "UpdateItem"): 2 * N * STEPS,
    }
    for run in measured["runs"].values():
        t = run["totals"]
        assert t["dynamodb_requests_per_step"] + t["sqs_requests_per_step"] > floor["dynamodb_requests_per_step"]
        assert t["wcu_per_step"]["table"] >= floor["wcu_per_step"]["table"]


def test_the_sweepers_tick_stays_flat_in_the_executions_not_due(measured):
    idle, small, large = measured["sweeper"]
    # One query per shard, and one for the schedule cursors (the examples have a scheduled workflow).
    assert idle["due"] == 0 and idle["by_operation"] == {"dynamodb:Query": 5}
    assert small["report"]["woken"] == large["report"]["woken"] == 10
    assert small["by_operation"] == large["by_operation"]
    assert small["rcu"] == large["rcu"]


def test_a_crash_between_checkpoint_and_enqueue_is_recovered_by_the_redelivery(measured):
    rec = measured["recovery"]
    assert rec["recovered"] and rec["final_status"] == "COMPLETED"
    # The dead chain's message comes back after the heartbeat's extension and adopts the step
    # its worker never sent (verdicts.may_adopt): no sweeper tick, well inside the lease.
    assert rec["visibility_timeout"] <= rec["engine_seconds"] <= rec["visibility_timeout"] + 1
    assert rec["sweeper_ticks"] == 0 and rec["engine_seconds"] < rec["lease_seconds"]


def test_a_worker_killed_mid_step_is_recovered_by_the_redelivery(measured):
    rec = measured["mid_step"]
    assert rec["crash_point"] == "mid_step" and rec["recovered"] and rec["final_status"] == "COMPLETED"
    assert rec["visibility_timeout"] <= rec["engine_seconds"] <= rec["visibility_timeout"] + 1
    assert rec["sweeper_ticks"] == 0
    assert rec["attempts_recorded"] == 1, "the step ran once more, as one committed attempt"


def test_the_recovery_table_has_a_row_per_scenario(measured):
    rows = [measured["recovery"], measured["mid_step"], measured["lost"]]
    lines = render_recovery(rows).strip().splitlines()
    assert lines[1].split()[:3] == ["mode", "killed", "after"] and len(lines) == 3 + len(rows)
    assert all("COMPLETED" in line for line in lines[3:])


def test_a_message_that_never_comes_back_is_recovered_by_the_lease(measured):
    rec = measured["lost"]
    assert rec["recovered"] and rec["final_status"] == "COMPLETED" and rec["sweeper_ticks"] >= 1
    assert rec["lease_seconds"] <= rec["engine_seconds"] <= 2 * rec["lease_seconds"] + 2 * rec["sweeper_tick_seconds"]


def test_the_projection_names_the_binding_limit(measured):
    idle = measured["sweeper"][0]
    p = project(measured["runs"]["chain"], sweeper_idle=idle, sweeper_seconds_per_tick=0.05, sweeper_memory_mb=256)
    assert p["binding"] in p["limits"]
    assert p["steps_per_month"] == min(v["steps_per_month"] for v in p["limits"].values())


def test_capacity_rules():
    item = {"PK": {"S": "EXEC#a"}, "n": {"N": "123.45"}, "l": {"L": [{"S": "ab"}, {"BOOL": True}]}}
    # "PK"+"EXEC#a" = 8; "n" + 5 significant digits -> 1 + 3 + 1 = 5; "l" + 3 + (1+2) + (1+1) = 9
    assert cap.item_size(item) == 8 + 5 + 9
    assert cap.write_units(0, 1024) == 1 and cap.write_units(1025, 10) == 2
    assert cap.read_units(0, consistent=True) == 1.0 and cap.read_units(4097, consistent=False) == 1.0
    keys = ("GSI1PK", "GSI1SK")
    a = {"GSI1PK": {"S": "DUE#1"}, "GSI1SK": {"N": "10"}}
    b = {"GSI1PK": {"S": "DUE#1"}, "GSI1SK": {"N": "20"}}
    assert cap.index_writes(a, a, keys) == 0
    assert cap.index_writes(a, b, keys) == 2
    assert cap.index_writes(None, a, keys) == 1 and cap.index_writes(a, {}, keys) == 1


def test_the_html_page_draws_the_measured_costs(measured, tmp_path):
    import re
    import xml.etree.ElementTree as ET

    from loom.bench import html

    result = {"runs": list(measured["runs"].values()), "floor": measured["floor"], "sweeper": measured["sweeper"]}
    page = html.render(result)
    svgs = re.findall(r"<svg .*?</svg>", page)
    assert len(svgs) == 2
    costs, sweep = (ET.fromstring(s) for s in svgs)
    ns = "{http://www.w3.org/2000/svg}"
    tips = [t.text or "" for t in costs.iter(f"{ns}title")]
    chain_sqs = measured["runs"]["chain"]["totals"]["sqs_requests_per_step"]
    assert f"SQS requests, chain: {chain_sqs:g} per committed step" in tips
    assert any(t.startswith("SQS requests, floor: ") for t in tips)
    points = [t.text or "" for t in sweep.iter(f"{ns}title") if (t.text or "").startswith("requests: ")]
    assert [p.rsplit(" at ", 1)[1] for p in points] == ["10", "40"], "one point per sleeper count measured"
