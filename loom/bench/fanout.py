"""What a map item costs: DynamoDB write units and SQS requests per item, on the embedded stack.

One execution of a one-step workflow whose step is ``map(items=range(n), max_concurrency=c)``,
run by the in-process worker behind the local SQS event source, with every request counted
(loom/bench/meter.py). Per item: the engine's write units (computed from item sizes with
DynamoDB's rules, a transaction billed at twice a plain write), its SQS sends (what the engine
asks for) and every SQS request including the event source's receives and deletes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from engine import StepContext, map_items, workflow
from engine.workflow import default_registry
from loom.bench.inprocess import BenchStack
from loom.bench.scenarios import _wait_completed, request_table, totals

SENDS = ("SendMessage", "SendMessageBatch")
ITEM_WCU_BUDGET = 5
ITEM_SQS_BUDGET = 1


def _price(ctx: StepContext) -> dict[str, Any]:
    return {"line": ctx.item, "price": int(ctx.item) * 10}


def _lines(ctx: StepContext) -> list[int]:
    return list(range(int(ctx.data["items"])))


def map_workflow(concurrency: int) -> str:
    name = f"bench_map_{concurrency}"
    if name not in default_registry.names():
        steps = [map_items(items=_lines, run=_price, name="prices", max_concurrency=concurrency)]
        workflow(name)(type(name, (), {"steps": steps}))
    return name


def run_map(stack: BenchStack, *, items: int, concurrency: int, tick: float, timeout: float) -> dict[str, Any]:
    meter = stack.meter
    assert meter is not None and stack.worker is not None
    phase = "map"
    wf = map_workflow(concurrency)
    eid = f"map-{uuid.uuid4().hex[:12]}"
    with meter.measuring(phase), stack.mode(True) as eng:
        stack.start_esm()
        stack.start_sweeper(tick)
        t0 = time.time()
        with meter.role("client"):
            eng.start(wf, {"items": items}, execution_id=eid)
        done = _wait_completed(meter, phase, 1, timeout)
        seconds = time.time() - t0
        stack.stop_sweeper()
        stack.stop_esm()
    calls = meter.of(phase)
    engine = stack.engine()
    ex = engine.get(eid)
    join = engine.store.get_join(eid, 0)
    # Per item that became final: a run cut short by the timeout is not flattered by its unrun items.
    final = max(1, (join.ok + join.failed) if join is not None else items)
    per_item = totals(meter, calls, final)
    engine_sqs = [c for c in calls if c.service == "sqs" and c.role in ("worker", "client", "sweeper")]
    sends = sum(1 for c in engine_sqs if c.operation in SENDS)
    worker_wcu = sum(v for k, v in per_item["capacity_by_role"].get("worker", {}).items() if k.startswith("wcu_"))
    worker_wcu -= per_item["capacity_by_role"].get("worker", {}).get("wcu_moto", 0.0)
    figures = {
        "wcu_per_item": worker_wcu / final,
        "sqs_sends_per_item": sends / final,
        "sqs_requests_per_item_all": per_item["sqs_requests_per_step_without_empty_receives"],
        "dynamodb_requests_per_item": per_item["dynamodb_requests_per_step"],
    }
    results = ex.context.get("prices")
    in_order = isinstance(results, list) and [r["line"] for r in results] == list(range(items))
    return {
        "mode": phase,
        "items": items,
        "final_items": final,
        "redrives": sum(1 for c in calls if c.role == "sweeper" and c.operation == "SendMessageBatch"),
        "max_concurrency": concurrency,
        "execution": eid,
        "status": ex.status.value,
        "completed": done and ex.status.value == "COMPLETED",
        "results_in_order": in_order,
        "seconds": seconds,
        "items_per_second": items / max(1e-9, seconds),
        "per_item": figures,
        "requests": request_table(meter, calls, final),
        "totals": per_item,
        "checks": checks(figures, ex.status.value, in_order),
    }


def checks(figures: dict[str, float], status: str, in_order: bool) -> list[dict[str, Any]]:
    return [
        {"check": "map: every item completed, results in order", "value": status, "met": in_order},
        {
            "check": f"map: write units per item <= {ITEM_WCU_BUDGET}",
            "value": round(figures["wcu_per_item"], 3),
            "met": figures["wcu_per_item"] <= ITEM_WCU_BUDGET,
        },
        {
            "check": f"map: SQS sends per item <= {ITEM_SQS_BUDGET}",
            "value": round(figures["sqs_sends_per_item"], 3),
            "met": figures["sqs_sends_per_item"] <= ITEM_SQS_BUDGET,
        },
    ]


def render_map(result: dict[str, Any]) -> str:
    f = result["per_item"]
    lines = [
        f"map of {result['items']} items @ max_concurrency {result['max_concurrency']}: "
        f"{result['status']} in {result['seconds']:.1f} s ({result['items_per_second']:.1f} items/s)",
        f"  write units per item (worker, table + indexes):  {f['wcu_per_item']:.3f}",
        f"  SQS sends per item (engine):                     {f['sqs_sends_per_item']:.3f}",
        f"  SQS requests per item (with the event source's): {f['sqs_requests_per_item_all']:.3f}",
        f"  DynamoDB requests per item:                      {f['dynamodb_requests_per_item']:.3f}",
    ]
    lines += [f"  [{'ok' if c['met'] else 'MISSED'}] {c['check']}: {c['value']}" for c in result["checks"]]
    return "\n".join(lines)
