"""The benchmark's measurements, each on a running :class:`loom.bench.inprocess.BenchStack`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import statistics
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any

from engine import Status, StepContext, workflow
from engine.adapters.dynamodb import DynamoStore, step_sk
from engine.adapters.ledger import DynamoLedger
from engine.batch import process_batch
from engine.log import get_logger
from engine.runtime import Engine
from engine.state import Execution, canonical_json
from engine.workflow import StepSpec, default_registry
from loom.bench.inprocess import REGION, BenchStack
from loom.bench.local_speed import read_history
from loom.bench.meter import Call, Meter
from loom.local.lambdas.events import sqs_event
from workflows import examples

WORKFLOW = "pipeline"  # workflows/examples.py: ten plain steps


def workflow_for(steps: int) -> str:
    """``pipeline`` for ten steps; otherwise the same stage functions, ``steps`` of them."""
    if steps == len(default_registry.get(WORKFLOW).steps):
        return WORKFLOW
    name = f"bench_pipeline_{steps}"
    if name not in default_registry.names():
        # examples._stage is the pipeline's own step factory: the same step body, more or fewer of them.
        attrs = {"steps": [examples._stage(f"stage_{i}") for i in range(steps)]}
        workflow(name)(type(name, (), attrs))
    return name


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


# --------------------------------------------------------------------- request tables


def request_table(meter: Meter, calls: list[Call], steps: int) -> list[dict[str, Any]]:
    rows = []
    for (role, service, op), count in sorted(Meter.requests(calls).items()):
        rows.append({"role": role, "service": service, "operation": op, "count": count, "per_step": count / steps})
    return rows


def totals(meter: Meter, calls: list[Call], steps: int) -> dict[str, Any]:
    """Per committed step: requests by service (the ledger apart) and computed capacity units."""
    engine_calls = [c for c in calls if c.role not in ("ledger",)]
    sqs = [c for c in engine_calls if c.service == "sqs"]
    empty = [c for c in sqs if c.operation == "ReceiveMessage" and c.returned_items == 0]
    received = sum(c.returned_items for c in sqs if c.operation == "ReceiveMessage")
    ddb = [c for c in engine_calls if c.service == "dynamodb"]
    capacity = meter.capacity(calls)
    units: dict[str, float] = defaultdict(float)
    for role, tally in capacity.items():
        if role == "ledger":
            continue
        for k, v in tally.items():
            units[k] += v
    worker_units = capacity.get("worker", {})
    return {
        "sqs_requests_per_step": len(sqs) / steps,
        "sqs_requests_per_step_without_empty_receives": (len(sqs) - len(empty)) / steps,
        "sqs_empty_receives": len(empty),
        "messages_received": received,
        "dynamodb_requests_per_step": len(ddb) / steps,
        "ledger_requests_per_step": sum(1 for c in calls if c.role == "ledger") / steps,
        "wcu_per_step": {k.removeprefix("wcu_"): v / steps for k, v in sorted(units.items()) if k.startswith("wcu")},
        "rcu_per_step": {k.removeprefix("rcu_"): v / steps for k, v in sorted(units.items()) if k.startswith("rcu")},
        "worker_wcu_table_per_step": worker_units.get("wcu_table", 0.0) / steps,
        "capacity_by_role": capacity,
        "capacity_method": (
            "computed from item sizes with DynamoDB's rules (loom/bench/capacity.py); "
            "'moto' is what moto's ConsumedCapacity said (a constant per request, not size-based)"
        ),
    }


# -------------------------------------------------------------------------- engine


def run_engine(stack: BenchStack, *, chain: bool, n: int, steps: int, tick: float, timeout: float) -> dict[str, Any]:
    meter = stack.meter
    assert meter is not None and stack.worker is not None
    phase = "chain" if chain else "one_step"
    wf = workflow_for(steps)
    ids = [f"{phase}-{uuid.uuid4().hex[:12]}-{i:05d}" for i in range(n)]
    first_invocation = len(stack.worker.invocations)
    with meter.measuring(phase), stack.mode(chain) as eng:
        stack.start_esm()
        stack.start_sweeper(tick)
        t0 = time.time()
        with meter.role("client"):
            for eid in ids:
                eng.start(wf, {}, execution_id=eid)
        done = _wait_completed(meter, phase, n, timeout)
        t_end = time.time()
        stack.stop_sweeper()
        stack.stop_esm()
    calls = meter.of(phase)
    invocations = stack.worker.invocations[first_invocation:]
    history = _read_back(stack, ids)
    committed = sum(len(h["finished"]) for h in history.values())
    latencies = [lat for h in history.values() for lat in h["latencies"]]
    last_commit = max((max(h["finished"]) for h in history.values() if h["finished"]), default=t_end)
    wall = max(1e-9, last_commit - t0)
    sizes = meter.meta_sizes(calls)
    return {
        "mode": phase,
        "workflow": wf,
        "executions": n,
        "completed_executions": sum(1 for h in history.values() if h["status"] == Status.COMPLETED.value),
        "all_completed": done,
        "committed_steps": committed,
        "seconds": wall,
        "steps_per_second": committed / wall,
        "step_latency_ms": {"p50": percentile(latencies, 50) * 1000, "p99": percentile(latencies, 99) * 1000},
        "requests": request_table(meter, calls, max(1, committed)),
        "totals": totals(meter, calls, max(1, committed)),
        "lambda": {
            "worker_invocations": len(invocations),
            "worker_invocations_per_step": len(invocations) / max(1, committed),
            # Lambda bills each invocation's duration rounded up to the millisecond.
            "worker_billed_seconds_per_step": sum(int(i.duration_ms) + 1 for i in invocations)
            / 1000
            / max(1, committed),
            "memory_mb": stack.worker.memory,
        },
        "execution_item_bytes_by_step": {str(k): round(statistics.mean(v)) for k, v in sorted(sizes.items())},
    }


def _wait_completed(meter: Meter, phase: str, n: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        finished = sum(
            1
            for c in meter.of(phase)
            if c.operation == "PutItem" and c.ok and c.item and c.item.get("status", {}).get("S") == "COMPLETED"
        )
        if finished >= n:
            return True
        time.sleep(0.25)
    return False


def _read_back(stack: BenchStack, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each execution's status, step commit times and per-step latencies (uncounted reads)."""
    assert stack.meter is not None
    db = stack.meter.uncounted("dynamodb")
    out: dict[str, dict[str, Any]] = {}
    for eid in ids:
        history = read_history(db, stack.refs["Table"], eid)
        finished = list(history.finished)
        found = history.status is not None
        created = history.created_at if found else (finished[0] if finished else 0.0)
        marks = [created, *finished]
        out[eid] = {
            "status": history.status,
            "finished": finished,
            "latencies": [b - a for a, b in itertools.pairwise(marks)],
        }
    return out


# --------------------------------------------------------------------------- floor


def run_floor(stack: BenchStack, *, n: int, steps: int, workers: int) -> dict[str, Any]:
    """The same step functions with only the writes a checkpoint needs: a history put and a
    conditional update of the execution item per step. No queue, no reads, no lease."""
    meter = stack.meter
    assert meter is not None
    wf = workflow_for(steps)
    spec = default_registry.get(wf)
    table = stack.refs["Table"]
    db = meter.client("dynamodb", "floor")
    services = {"ledger": DynamoLedger(meter.client("dynamodb", "floor"), table)}
    log = get_logger(component="bench-floor")
    latencies: list[float] = []

    def one(eid: str) -> list[float]:
        data: dict[str, Any] = {}
        lat: list[float] = []
        mark = time.time()
        for idx, st in enumerate(spec.steps):
            if not isinstance(st, StepSpec):
                raise TypeError(f"the floor runs plain steps only, not {type(st).__name__} ({wf} step {idx})")
            ctx = StepContext(eid, wf, idx, st.name, 1, MappingProxyType(dict(data)), log, services)
            started = time.time()
            result = st.fn(ctx) or {}
            finished = time.time()
            attempt = {"attempt": 1, "started_at": started, "finished_at": finished, "outcome": "completed"}
            db.put_item(
                TableName=table,
                Item={
                    "PK": {"S": f"FLOOR#{eid}"},
                    "SK": {"S": step_sk(idx, st.name)},
                    "status": {"S": "COMPLETED"},
                    "result": {"S": canonical_json(result)},
                    "idx": {"N": str(idx)},
                    "name": {"S": st.name},
                    "started_at": {"N": repr(started)},
                    "finished_at": {"N": repr(finished)},
                    "attempts": {"L": [{"S": canonical_json(attempt)}]},
                },
            )
            data.update(result)
            db.update_item(
                TableName=table,
                Key={"PK": {"S": f"FLOOR#{eid}"}, "SK": {"S": "#META"}},
                UpdateExpression="SET context = :c, current_step = :n, version = :next, updated_at = :u",
                ConditionExpression="attribute_not_exists(PK) OR version = :v",
                ExpressionAttributeValues={
                    ":c": {"S": canonical_json(data)},
                    ":n": {"N": str(idx + 1)},
                    ":next": {"N": str(idx + 1)},
                    ":v": {"N": str(idx)},
                    ":u": {"N": repr(finished)},
                },
            )
            now = time.time()
            lat.append(now - mark)
            mark = now
        return lat

    ids = [f"floor-{uuid.uuid4().hex[:12]}-{i:05d}" for i in range(n)]
    with meter.measuring("floor"):
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for lat in pool.map(one, ids):
                latencies.extend(lat)
        wall = time.time() - t0
    calls = meter.of("floor")
    committed = n * len(spec.steps)
    return {
        "mode": "floor",
        "workflow": wf,
        "executions": n,
        "committed_steps": committed,
        "seconds": wall,
        "steps_per_second": committed / wall,
        "step_latency_ms": {"p50": percentile(latencies, 50) * 1000, "p99": percentile(latencies, 99) * 1000},
        "requests": request_table(meter, calls, committed),
        "totals": totals(meter, calls, committed),
    }


# ------------------------------------------------------------------------- sweeper


def sweeper_cost(stack: BenchStack, *, sizes: list[int], due: int = 10) -> list[dict[str, Any]]:
    """One sweeper tick over ``size`` sleeping executions of which ``due`` are due."""
    meter = stack.meter
    assert meter is not None
    eng = stack.engine()
    db = meter.uncounted("dynamodb")
    table = stack.refs["Table"]
    encoder = DynamoStore(db, table, eng.config.shards)
    rows = []
    with meter.measuring("sweep_idle"):
        report = stack.tick_sweeper()
    rows.append(_tick_row(meter, "sweep_idle", 0, 0, report))
    seeded_not_due = 0
    for size in sorted(sizes):
        now = eng.clock.now()
        fresh = [_sleeper(f"due-{size}-{i:05d}", now - 5.0, now) for i in range(due)]
        later = [
            _sleeper(f"later-{uuid.uuid4().hex[:8]}-{i:06d}", now + 30 * 86400.0, now)
            for i in range(max(0, size - due - seeded_not_due))
        ]
        seeded_not_due += len(later)
        _batch_put(db, table, [encoder._item(ex) for ex in fresh + later])
        phase = f"sweep_{size}"
        with meter.measuring(phase):
            report = stack.tick_sweeper()
        rows.append(_tick_row(meter, phase, size, due, report))
        stack.discard_messages()  # the woken executions' next steps are not this measurement's business
    return rows


def _sleeper(eid: str, wake_at: float, now: float) -> Execution:
    # order_fulfillment sleeps at step 2 for an hour: a realistic sleeping execution.
    return Execution(
        id=eid,
        workflow="order_fulfillment",
        status=Status.SLEEPING,
        current_step=2,
        version=3,
        input={"order_id": eid},
        context={"order_id": eid, "reservation": f"res-{eid}", "charged": 10},
        created_at=now - 3600,
        updated_at=now - 3600,
        next_wake_at=wake_at,
    )


def _batch_put(db: Any, table: str, items: list[dict[str, Any]]) -> None:
    for i in range(0, len(items), 25):
        request: dict[str, Any] = {table: [{"PutRequest": {"Item": item}} for item in items[i : i + 25]]}
        while request:
            request = db.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}


def _tick_row(meter: Meter, phase: str, size: int, due: int, report: dict[str, Any]) -> dict[str, Any]:
    calls = meter.of(phase)
    capacity = meter.capacity(calls).get("sweeper", {})
    return {
        "sleeping": size,
        "due": due,
        "report": report,
        "requests": sum(1 for c in calls),
        "by_operation": dict(Counter(f"{c.service}:{c.operation}" for c in calls)),
        "rcu": {k.removeprefix("rcu_"): v for k, v in capacity.items() if k.startswith("rcu") and k != "rcu_moto"},
        "wcu": {k.removeprefix("wcu_"): v for k, v in capacity.items() if k.startswith("wcu") and k != "wcu_moto"},
    }


# ------------------------------------------------------------------------ recovery


class Crash(BaseException):
    """The worker dies: not an Exception, so nothing in the engine catches it."""


#: Where the recovery scenario kills the worker, and what each point means.
CRASH_POINTS = {
    # step N is checkpointed; the message (or chained link) for N+1 never happens
    "after_checkpoint": "killed between checkpoint and enqueue",
    # step N+1 has started (its guard, if any, has run); nothing of it is committed
    "mid_step": "killed mid-step",
}


@dataclasses.dataclass
class CrashAt:
    """Faults port: kill the worker once, ``where`` (a key of ``CRASH_POINTS``) around step ``step``."""

    where: str
    step: int
    fired: bool = False

    def __post_init__(self) -> None:
        if self.where not in CRASH_POINTS:
            raise ValueError(f"crash point must be one of {sorted(CRASH_POINTS)}, not {self.where!r}")

    def point(self, name: str, **info: Any) -> None:
        if self.where == "after_checkpoint":
            hit = name == "after_checkpoint" and info.get("step") == self.step
        else:
            hit = name == "before_step" and info.get("step") == self.step + 1
        if hit and not self.fired:
            self.fired = True
            raise Crash(f"{self.where} at step {self.step}")


def recovery(
    stack: BenchStack,
    *,
    chain: bool,
    steps: int,
    crash_step: int,
    tick: float,
    point: str = "after_checkpoint",
    visibility: float = 20.0,
) -> dict[str, Any]:
    """Kill the worker at ``point`` (see ``CRASH_POINTS``); the sweeper's schedule (``tick``
    seconds of engine time apart, by time travel) and the heartbeat's extension
    (``visibility`` seconds of engine time: the dead worker's message comes back that long
    after its last beat, at the latest) bring it back. Recovered = step ``crash_step + 1``
    committed; the time is from the kill."""
    meter = stack.meter
    assert meter is not None and stack.worker is not None
    sqs = meter.uncounted("sqs")
    queue_url, arn = stack.refs["StepQueue"], stack.refs["StepQueue.Arn"]
    wf = workflow_for(steps)
    eid = f"recover-{point}-{'chain' if chain else 'one'}-{uuid.uuid4().hex[:10]}"
    stack.reset_time()
    with meter.measuring("recovery"), stack.mode(chain) as eng:
        crash = CrashAt(point, crash_step)
        crashing = dataclasses.replace(eng, faults=crash)
        eng.start(wf, {}, execution_id=eid)
        crashed_at = wall_crash = 0.0
        held: list[dict[str, Any]] = []  # the dead worker's messages, invisible until the timeout
        while not crash.fired:
            messages = _receive(sqs, queue_url)
            if not messages:
                raise RuntimeError("the execution stopped before the crash point")
            try:
                process_batch(crashing, sqs_event(messages, arn, REGION), remaining=lambda: 60.0)
            except Crash:
                crashed_at, wall_crash = eng.clock.now(), time.time()
                held = messages
                break
            for m in messages:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
        # Engine time moves in steps of the shorter of the two clocks that recover it: the
        # visibility timeout (the dead worker's messages come back) and the sweeper's tick.
        pace = min(tick, visibility)
        limit = crashed_at + max(2 * eng.config.lease_seconds, visibility) + 3 * tick
        ticks, since_tick, recovered_at = 0, 0.0, None
        while eng.clock.now() <= limit:
            if held and eng.clock.now() >= crashed_at + visibility:
                for m in held:  # the visibility timeout ran out: SQS delivers it again
                    sqs.change_message_visibility(
                        QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                    )
                held = []
            _drain(stack, sqs, queue_url, arn)
            recovered_at = _committed_at(eng, eid, crash_step + 1)
            if recovered_at is not None:
                break
            stack.advance_time(pace)
            since_tick += pace
            if since_tick >= tick:
                stack.tick_sweeper()
                ticks, since_tick = ticks + 1, 0.0
        wall = time.time() - wall_crash
        lease = eng.config.lease_seconds
        # Let the execution finish (a held message may still be due) so its status is final.
        for m in held:
            sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        _drain(stack, sqs, queue_url, arn)
        status = eng.get(eid).status.value
        runs = _runs_of(eng, eid, crash_step + 1)
    stack.reset_time()
    return {
        "mode": "chain" if chain else "one_step",
        "crash_point": point,
        "crash_after_step": crash_step,
        "lease_seconds": lease,
        "visibility_timeout": visibility,
        "sweeper_tick_seconds": tick,
        "sweeper_ticks": ticks,
        "recovered": recovered_at is not None,
        "engine_seconds": None if recovered_at is None else recovered_at - crashed_at,
        "wall_seconds": wall,
        "final_status": status,
        "attempts_recorded": runs,
    }


def _runs_of(eng: Engine, eid: str, index: int) -> int:
    for record in eng.store.history(eid):
        if record.index == index:
            return len(record.attempts)
    return 0


def _receive(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageSystemAttributeNames=["All"]
    ).get("Messages", [])
    return messages


def _drain(stack: BenchStack, sqs: Any, queue_url: str, arn: str) -> None:
    """Deliver whatever is visible to the worker handler until the queue is empty."""
    assert stack.worker is not None
    for _ in range(100):
        messages = _receive(sqs, queue_url)
        if not messages:
            return
        inv = stack.worker.invoke(sqs_event(messages, arn, REGION))
        failed = {f["itemIdentifier"] for f in (inv.result or {}).get("batchItemFailures", [])}
        for m in messages:
            if inv.outcome == "ok" and m["MessageId"] not in failed:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])


def _committed_at(eng: Engine, eid: str, index: int) -> float | None:
    for record in eng.store.history(eid):
        if record.index == index and record.status.value == "COMPLETED":
            return record.finished_at
    return None


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
