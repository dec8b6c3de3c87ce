"""How fast the embedded local stack runs steps: a burst of executions, and one at a time.

Everything runs as ``loom up`` runs it (:class:`loom.local.stack.LocalStack`): moto's server in
its child process, the worker and control plane in their isolated processes, the SQS event
source mapping feeding the worker. Executions start through the control plane's Function URL;
the figures come from what the engine wrote: each step's ``finished_at`` in the history.

- burst: ``burst`` executions started at once; steps per second = committed steps over the time
  from the first start request to the last commit.
- lone: ``lone`` executions one after another; the time between consecutive steps of one
  execution (the first step's wait for the queue apart: it is the trigger's batching window).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import moto

from loom.local.emulator.client import LocalApi, ok
from loom.local.stack import LocalStack, StackOptions

TARGET_STEPS_PER_SECOND = 150.0
TARGET_GAP_MS = 10.0
# workflows/examples.py, ten sequential steps each. plain_steps' steps only return: the engine's own
# cost, as a peer's benchmark of ten steps measures it. pipeline's steps also land the example's
# side effect through its ledger, two more conditional writes a step (the chaos kit's unit of work).
WORKFLOWS = ("plain_steps", "pipeline")
WORKFLOW = WORKFLOWS[0]
START_THREADS = 8  # concurrent start requests: "at once", within what the control plane takes
DONE = ("COMPLETED", "FAILED", "CANCELLED")
METER_ENV = "LOOM_EMULATOR_METER"
METER_EVERY = 0.5  # seconds between the emulator's writes of its meter (RequestMeter.run's default)
# This machine's CPU runs the same code up to half again slower from one minute to the next (a
# shared host): every figure is printed beside the CPU a fixed piece of work took just before and
# after, so that runs are compared at the same speed (docs/notes/2026-12-08-machine-speed.md).
REFERENCE_ROUNDS = 1000
REFERENCE_REPEATS = 5
_REFERENCE_ITEM = {
    "PK": {"S": "EXEC#0123456789abcdef"},
    "SK": {"S": "STEP#0003#charge"},
    "attempts": {"L": [{"S": json.dumps({"attempt": n, "outcome": "COMPLETED"})} for n in range(4)]},
    **{f"field{n:02d}": {"N": str(n * 1.25)} for n in range(16)},
}


@dataclass(frozen=True)
class History:
    """One execution as the table holds it: status, when it was created, each step's commit time."""

    execution_id: str
    status: str | None
    created_at: float
    finished: tuple[float, ...]  # sorted


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def burst_figures(histories: Iterable[History], started: float) -> dict[str, Any]:
    """Committed steps over the time from the first start request to the last commit."""
    items = list(histories)
    steps = sum(len(h.finished) for h in items)
    last = max((h.finished[-1] for h in items if h.finished), default=started)
    wall = max(1e-9, last - started)
    return {
        "executions": len(items),
        "completed": sum(1 for h in items if h.status == "COMPLETED"),
        "steps": steps,
        "seconds": wall,
        "steps_per_second": steps / wall,
    }


def gap_figures(histories: Iterable[History]) -> dict[str, Any]:
    """The time between consecutive step commits of each execution, in ms."""
    items = list(histories)
    gaps = [(b - a) * 1000 for h in items for a, b in itertools.pairwise(h.finished)]
    first = [(h.finished[0] - h.created_at) * 1000 for h in items if h.finished]
    return {
        "executions": len(items),
        "completed": sum(1 for h in items if h.status == "COMPLETED"),
        "gaps": len(gaps),
        "gap_ms": {"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "max": max(gaps, default=0.0)},
        "first_step_ms": {"p50": percentile(first, 50), "max": max(first, default=0.0)},
    }


def checks(burst: Mapping[str, Any], lone: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "check": f"burst: steps per second >= {TARGET_STEPS_PER_SECOND:g}",
            "value": round(burst["steps_per_second"], 1),
            "met": burst["steps_per_second"] >= TARGET_STEPS_PER_SECOND,
        },
        {
            "check": f"lone execution: p50 between steps <= {TARGET_GAP_MS:g} ms",
            "value": round(lone["gap_ms"]["p50"], 2),
            "met": lone["gaps"] > 0 and lone["gap_ms"]["p50"] <= TARGET_GAP_MS,
        },
        {
            "check": "every execution completed",
            "value": f"{burst['completed'] + lone['completed']}/{burst['executions'] + lone['executions']}",
            "met": burst["completed"] == burst["executions"] and lone["completed"] == lone["executions"],
        },
    ]


# ------------------------------------------------------------------------ the stack


def read_history(db: Any, table: str, execution_id: str) -> History:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": f"EXEC#{execution_id}"}},
    }
    while True:
        answer = db.query(**kwargs)
        items.extend(answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            break
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
    meta = next((i for i in items if i["SK"]["S"] == "#META"), None)
    finished = sorted(
        float(i["finished_at"]["N"])
        for i in items
        if i["SK"]["S"].startswith("STEP#") and i.get("status", {}).get("S") == "COMPLETED"
    )
    return History(
        execution_id,
        meta["status"]["S"] if meta else None,
        float(meta["created_at"]["N"]) if meta else 0.0,
        tuple(finished),
    )


def status(db: Any, table: str, execution_id: str) -> str | None:
    item = db.get_item(
        TableName=table,
        Key={"PK": {"S": f"EXEC#{execution_id}"}, "SK": {"S": "#META"}},
        ProjectionExpression="#s",
        ExpressionAttributeNames={"#s": "status"},
    ).get("Item")
    return item["status"]["S"] if item else None


def wait_done(db: Any, table: str, ids: list[str], timeout: float) -> bool:
    """One light read at a time (the oldest still running), so waiting adds little to the emulator's load."""
    deadline = time.monotonic() + timeout
    pending = list(ids)
    while pending and time.monotonic() < deadline:
        if status(db, table, pending[0]) in DONE:
            pending.pop(0)
        else:
            time.sleep(0.05 if len(pending) == 1 else 0.25)
    return not pending


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes(stack: LocalStack) -> dict[str, list[int]]:
    """The stack's processes by role: the emulator, each function's, and this supervisor."""
    info = stack.info
    out = {"emulator": [info["emulator_pid"]], "supervisor": [os.getpid()]}
    out.update({name: list(pids) for name, pids in info["function_pids"].items()})
    return out


def cpu_per_step(before: Mapping[str, float], after: Mapping[str, float], steps: int) -> dict[str, float]:
    """CPU ms per committed step by role: what the machine's load does not change."""
    return {role: (after[role] - before.get(role, 0.0)) * 1000 / max(1, steps) for role in after}


def cpu_by_role(stack: LocalStack) -> dict[str, float]:
    return {role: sum(cpu_seconds(p) for p in pids) for role, pids in processes(stack).items()}


def read_meter(path: Path) -> dict[str, dict[str, float]]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def meter_per_step(
    before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]], steps: int
) -> dict[str, dict[str, float]]:
    """The emulator's requests and CPU ms per committed step, by operation, between two meter reads."""
    out = {}
    for op, now in after.items():
        was = before.get(op, {})
        count = now["requests"] - was.get("requests", 0)
        if count:
            cpu = now["cpu_seconds"] - was.get("cpu_seconds", 0.0)
            out[op] = {
                "requests_per_step": count / max(1, steps),
                "cpu_ms_per_step": cpu * 1000 / max(1, steps),
                "cpu_ms_per_request": cpu * 1000 / count,
            }
    return out


def start(api: LocalApi, workflow: str) -> str:
    return str(ok(api, "POST", "/executions", {"workflow": workflow, "input": {}})["id"])


def run_burst(stack: LocalStack, n: int, workflow: str, timeout: float, meter: Path) -> dict[str, Any]:
    db, table, api = stack.client("dynamodb"), stack.refs["Table"], stack.api
    meter_before = read_meter(meter)
    cpu_before = cpu_by_role(stack)
    started = time.time()
    with ThreadPoolExecutor(max_workers=START_THREADS) as pool:
        ids = list(pool.map(lambda _: start(api, workflow), range(n)))
    starts_seconds = time.time() - started
    wait_done(db, table, ids, timeout)
    cpu_after = cpu_by_role(stack)
    time.sleep(METER_EVERY * 2)  # the emulator's next write of its totals
    meter_after = read_meter(meter)
    out = burst_figures([read_history(db, table, eid) for eid in ids], started)
    out["start_requests_seconds"] = starts_seconds
    # The supervisor's share includes this process's waiting reads; a pool replaced mid-run loses its dead pids' CPU.
    out["cpu_ms_per_step"] = cpu_per_step(cpu_before, cpu_after, out["steps"])
    out["emulator_by_operation"] = meter_per_step(meter_before, meter_after, out["steps"])
    return out


def run_lone(stack: LocalStack, n: int, workflow: str, timeout: float) -> dict[str, Any]:
    db, table, api = stack.client("dynamodb"), stack.refs["Table"], stack.api
    histories = []
    for _ in range(n):
        eid = start(api, workflow)
        wait_done(db, table, [eid], timeout)
        histories.append(read_history(db, table, eid))
    return gap_figures(histories)


def reference_cpu_ms() -> float:
    """CPU milliseconds (this thread's) of a fixed piece of the stack's kind of work: an item's JSON
    both ways, a SigV4-style HMAC chain, a dict walk. The median of a few short repeats, so that a
    context switch does not count; lower is a faster machine."""
    took = []
    for _ in range(REFERENCE_REPEATS):
        began = time.thread_time()
        for n in range(REFERENCE_ROUNDS):
            text = json.dumps(_REFERENCE_ITEM, sort_keys=True)
            key = hmac.new(b"AWS4secret", str(n).encode(), hashlib.sha256).digest()
            hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
            sum(len(k) + len(next(iter(v))) for k, v in json.loads(text).items())
        took.append((time.thread_time() - began) * 1000)
    return round(statistics.median(took), 2)


def run(
    state_dir: Path,
    *,
    burst: int = 100,
    lone: int = 10,
    workflow: str = WORKFLOW,
    workers: int | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Both measurements on one fresh embedded stack; the figures and the checks against the targets."""
    options = StackOptions(
        port=0,
        api_port=0,
        state_dir=state_dir,
        workers=workers,
        log_file=state_dir / "stack.log",
        write_stack_file=False,
    )
    began = time.time()
    meter = state_dir / "emulator-meter.json"
    os.environ[METER_ENV] = str(meter)  # the emulator inherits it: CPU per operation (loom.local.emulator.moto_http)
    reference_before = reference_cpu_ms()
    with LocalStack(options) as stack:
        workers_used = len(stack.worker_pids())
        lone_figures = run_lone(stack, lone, workflow, timeout)  # first: on an empty table, as a user's first run
        burst_figures_ = run_burst(stack, burst, workflow, timeout, meter)
    reference_after = reference_cpu_ms()
    return {
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "moto": moto.__version__,
            "load_average": os.getloadavg(),
            "reference_cpu_ms": {"before": reference_before, "after": reference_after},
            "total_seconds": round(time.time() - began, 1),
        },
        "parameters": {"burst": burst, "lone": lone, "workflow": workflow, "workers": workers_used},
        "burst": burst_figures_,
        "lone": lone_figures,
        "checks": checks(burst_figures_, lone_figures),
    }


def render(result: Mapping[str, Any]) -> str:
    b, lone, p = result["burst"], result["lone"], result["parameters"]
    lines = [
        f"embedded stack, {p['workers']} worker process(es), workflow {p['workflow']}",
        f"burst: {b['executions']} executions at once, {b['steps']} steps in {b['seconds']:.2f} s "
        f"-> {b['steps_per_second']:.1f} steps/s (target >= {TARGET_STEPS_PER_SECOND:g}); "
        f"start requests took {b['start_requests_seconds']:.2f} s",
        f"lone: {lone['executions']} executions one at a time, {lone['gaps']} gaps between steps: "
        f"p50 {lone['gap_ms']['p50']:.2f} ms, p90 {lone['gap_ms']['p90']:.2f} ms, max {lone['gap_ms']['max']:.2f} ms "
        f"(target p50 <= {TARGET_GAP_MS:g} ms); start to first step p50 {lone['first_step_ms']['p50']:.0f} ms",
        "burst CPU ms per step: "
        + ", ".join(f"{role} {ms:.1f}" for role, ms in sorted(b["cpu_ms_per_step"].items()))
        + f" (load average {result['machine']['load_average'][0]:.2f})",
        "machine speed: the reference work took {before:.2f} ms of CPU before the run, {after:.2f} ms after "
        "(lower is faster; read the figures against it)".format(**result["machine"]["reference_cpu_ms"]),
        "emulator, by operation (requests per step, CPU ms per step, CPU ms per request):",
    ]
    ops = sorted(b["emulator_by_operation"].items(), key=lambda kv: -kv[1]["cpu_ms_per_step"])
    for op, m in ops:
        lines.append(
            f"  {op:<34} {m['requests_per_step']:6.2f} {m['cpu_ms_per_step']:7.2f} {m['cpu_ms_per_request']:7.2f}"
        )
    lines.append("")
    for c in result["checks"]:
        lines.append(f"  [{'ok' if c['met'] else 'MISSED'}] {c['check']}: {c['value']}")
    return "\n".join(lines)
