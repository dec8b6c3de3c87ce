#!/usr/bin/env python3
"""What a Loom step costs: AWS requests, DynamoDB capacity units, time; chained and one step per message.

Runs on the embedded emulator (moto's server in a child process) with the worker
and sweeper handlers in this process, fed by the local stack's SQS event source
emulator, and counts every request with botocore's event hooks. Prints tables;
--json writes everything measured.

    .venv/bin/python scripts/bench.py                  # 200 executions x 10 steps, ~5-10 minutes
    .venv/bin/python scripts/bench.py --quick --json bench.json
    .venv/bin/python scripts/bench.py --waits-only     # what a callback, signal, poll, child costs (seconds)
    .venv/bin/python scripts/bench.py --from-json bench.json --html bench.html   # redraw, no run
    .venv/bin/python scripts/bench.py --map-items 1000 --map-concurrency 50   # what a map item costs
    .venv/bin/python scripts/bench.py --local-throughput   # the embedded stack's steps/s and ms between steps
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import moto

from engine import log
from loom.bench import fanout, html, local_speed, scenarios, storage, waits
from loom.bench.inprocess import BenchStack
from loom.bench.projection import project
from loom.bench.report import render, render_recovery
from loom.local.stack import extension_env

#: Issue #23's target: engine seconds from a worker's death to its step running again, at the
#: template's settings, for both kill points.
RECOVERY_TARGET_SECONDS = 30


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--executions", "-n", type=int, default=200, help="executions per mode (default 200)")
    p.add_argument("--steps", type=int, default=10, help="steps per execution (default 10: the pipeline workflow)")
    p.add_argument("--workers", type=int, default=2, help="concurrent worker invocations (default 2)")
    p.add_argument("--modes", default="chain,one_step", help="comma-separated: chain, one_step")
    p.add_argument("--sweep-sizes", default="10,1000,10000", help="sleeping executions per sweeper measurement")
    p.add_argument("--tick", type=float, default=10.0, help="wall seconds between sweeper ticks during runs")
    p.add_argument("--idle-pollers", type=int, default=2, help="SQS pollers Lambda keeps on an idle queue")
    p.add_argument("--batching-window", type=float, default=None, help="override the trigger's batching window")
    p.add_argument("--timeout", type=float, default=600.0, help="give up on a mode after this many seconds")
    p.add_argument("--lease", type=float, default=None, help="LOOM_LEASE_SECONDS instead of the template's")
    p.add_argument(
        "--extension",
        type=int,
        default=None,
        help="LOOM_VISIBILITY_TIMEOUT (the heartbeat's extension) instead of the template's; "
        "the heartbeat is a quarter of it",
    )
    p.add_argument("--recovery-only", action="store_true", help="only the recovery scenarios")
    p.add_argument("--quick", action="store_true", help="CI-sized: 20 executions, sweeper at 10/100/1000")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--html", type=Path, help="also draw the cost per step and the sweeper's cost on one page (SVG)")
    p.add_argument("--from-json", type=Path, help="no run: write the --html page from a saved --json")
    p.add_argument("--waits-only", action="store_true", help="only the waits' costs (loom/bench/waits.py)")
    p.add_argument(
        "--storage-only",
        action="store_true",
        help="only the storage row: bytes per ended execution of each example, executions a month in 25 GB",
    )
    p.add_argument(
        "--retention-days", type=float, default=30.0, help="the storage row's retention (template: RetentionDays)"
    )
    p.add_argument("--map-items", type=int, help="only a map's cost per item: one map of this many items")
    p.add_argument("--map-concurrency", type=int, default=50, help="the map's max_concurrency (default 50)")
    p.add_argument(
        "--local-throughput",
        action="store_true",
        help="only the embedded stack's speed (loom/bench/local_speed.py): --burst executions at once, "
        "then --lone one at a time",
    )
    p.add_argument("--burst", type=int, default=100, help="--local-throughput: executions started at once")
    p.add_argument("--lone", type=int, default=10, help="--local-throughput: executions run one at a time")
    p.add_argument(
        "--workflow",
        default=local_speed.WORKFLOW,
        choices=local_speed.WORKFLOWS,
        help="--local-throughput: plain_steps (the default: steps that only return, the engine's own cost) "
        "or pipeline (each step also writes the example's ledger twice)",
    )
    p.add_argument("--state-dir", type=Path, help="where the emulator's log goes (default: a temp dir)")
    args = p.parse_args(argv)
    if args.quick:
        args.executions = min(args.executions, 20)
        args.sweep_sizes = "10,100,1000"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("chain", "one_step")]
    if bad or not modes:
        p.error(f"--modes takes chain and/or one_step, not {bad or args.modes!r}")
    args.mode_list = modes
    if args.html is not None and args.html.is_dir():
        p.error(f"--html {args.html} is a directory; name the file to write")
    if args.from_json is not None and not args.from_json.is_file():
        p.error(f"--from-json {args.from_json}: no such file")
    if args.from_json is not None and args.html is None:
        p.error("--from-json redraws the --html page: name it with --html PATH")
    try:
        args.sizes = sorted({int(s) for s in args.sweep_sizes.split(",") if s.strip()})
    except ValueError:
        p.error("--sweep-sizes is a comma-separated list of integers")
    if args.executions < 1 or args.steps < 1 or args.workers < 1:
        p.error("--executions, --steps and --workers must be at least 1")
    if args.map_items is not None and (args.map_items < 1 or args.map_concurrency < 1):
        p.error("--map-items and --map-concurrency must be at least 1")
    if not 0 < args.retention_days <= 3650:
        p.error("--retention-days must be above 0 and at most 3650 (0 keeps for ever: nothing to project)")
    if args.extension is not None and args.extension < 1:
        p.error("--extension must be at least 1 second")
    if args.burst < 1 or args.lone < 1:
        p.error("--burst and --lone must be at least 1")
    if any(s < 10 for s in args.sizes):
        p.error("--sweep-sizes must each be at least 10 (10 of them are due)")
    return args


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """The worker's settings that --lease and --extension change (the trade-off table's rows)."""
    env = {} if args.lease is None else {"LOOM_LEASE_SECONDS": f"{args.lease:g}"}
    if args.extension is not None:
        env |= extension_env(args.extension)
    return env


def recoveries(stack: BenchStack, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both kill points in every mode at the template's settings (the sweeper's rate(1 minute),
    the heartbeat's extension: a dead worker's last beat hid its batch that long). An
    ``at_most_once`` step killed mid-step is judged lost by a delayed copy, which moto's SQS
    holds back in wall time, not the bench's engine time: tests/integration/test_engine_races.py
    measures that path on a clock that honours the delay."""
    crash_step = max(0, min(args.steps - 2, args.steps // 2))
    visibility = float(stack.env.get("LOOM_VISIBILITY_TIMEOUT", "20"))
    shape = {"steps": args.steps, "crash_step": crash_step, "tick": 60.0, "visibility": visibility}
    return [
        scenarios.recovery(stack, chain=(mode == "chain"), point=point, **shape)
        for point in scenarios.CRASH_POINTS
        for mode in args.mode_list
    ]


def recovery_checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checks = []
    for rec in rows:
        checks.append(
            {
                "check": f"{rec['mode']}, {rec['crash_point']}: "
                f"recovered within {RECOVERY_TARGET_SECONDS} s of engine time",
                "value": rec["engine_seconds"],
                "met": rec["recovered"] and rec["engine_seconds"] <= RECOVERY_TARGET_SECONDS,
            }
        )
    return checks


def run_recovery(args: argparse.Namespace) -> int:
    """Only the recovery scenarios (the trade-off table's rows: --lease, --extension)."""
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="loom-bench-"))
    with BenchStack(
        workers=args.workers, state_dir=state, batching_window=args.batching_window, overrides=overrides(args)
    ) as stack:
        rows = recoveries(stack, args)
    checks = recovery_checks(rows)
    print(render_recovery(rows))
    for c in checks:
        print(f"{'ok  ' if c['met'] else 'MISS'} {c['check']}: {c['value']}")
    if args.json:
        measured = {
            "recovery": rows,
            "checks": checks,
            "parameters": {"lease": args.lease, "extension": args.extension},
        }
        args.json.write_text(scenarios.dumps(measured), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0 if all(c["met"] for c in checks) else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="loom-bench-"))
    started = time.time()
    with BenchStack(
        workers=args.workers, state_dir=state, batching_window=args.batching_window, overrides=overrides(args)
    ) as stack:
        runs = [
            scenarios.run_engine(
                stack,
                chain=(mode == "chain"),
                n=args.executions,
                steps=args.steps,
                tick=args.tick,
                timeout=args.timeout,
            )
            for mode in args.mode_list
        ]
        floor = scenarios.run_floor(stack, n=args.executions, steps=args.steps, workers=args.workers)
        recovery = recoveries(stack, args)
        sweeper = scenarios.sweeper_cost(stack, sizes=args.sizes)
        sweeper_invocations = stack.sweeper.invocations if stack.sweeper else []
        sweeper_seconds = (
            sum(int(i.duration_ms) + 1 for i in sweeper_invocations) / 1000 / max(1, len(sweeper_invocations))
        )
        sweeper_memory = stack.sweeper.memory if stack.sweeper else 256
    idle = sweeper[0]
    projection = [
        project(
            r,
            sweeper_idle=idle,
            sweeper_seconds_per_tick=sweeper_seconds,
            sweeper_memory_mb=sweeper_memory,
            idle_pollers=args.idle_pollers,
        )
        for r in runs
    ]
    overhead = []
    floor_req = floor["totals"]["dynamodb_requests_per_step"] + floor["totals"]["sqs_requests_per_step"]
    floor_wcu = sum(v for k, v in floor["totals"]["wcu_per_step"].items() if k != "moto")
    for r in runs:
        t = r["totals"]
        overhead.append(
            {
                "mode": r["mode"],
                "requests": (t["dynamodb_requests_per_step"] + t["sqs_requests_per_step"]) / floor_req,
                "wcu": sum(v for k, v in t["wcu_per_step"].items() if k != "moto") / floor_wcu,
                "time": floor["steps_per_second"] / r["steps_per_second"],
            }
        )
    checks = []
    for r, p in zip(runs, projection, strict=True):
        if r["mode"] != "chain":
            continue
        t = r["totals"]
        checks += [
            {
                # Empty receives are the pollers idling (a fixed monthly cost in the projection).
                "check": "chain: SQS requests per step <= 1 (empty receives apart)",
                "value": t["sqs_requests_per_step_without_empty_receives"],
                "met": t["sqs_requests_per_step_without_empty_receives"] <= 1,
            },
            {
                "check": "chain: worker's DynamoDB write units per step <= 2",
                "value": t["worker_wcu_table_per_step"],
                "met": t["worker_wcu_table_per_step"] <= 2,
            },
            {
                "check": "chain: steps a month in the free tier >= 1M",
                "value": p["steps_per_month"],
                "met": p["steps_per_month"] >= 1_000_000,
            },
        ]
    for r in runs:
        checks.append(
            {
                "check": f"{r['mode']}: every execution completed",
                "value": f"{r['completed_executions']}/{r['executions']}",
                "met": r["completed_executions"] == r["executions"],
            }
        )
    checks += recovery_checks(recovery)
    return {
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "moto": moto.__version__,
            "platform": platform.platform(),
            "command": shlex.join([Path(sys.executable).name, *sys.argv]),
            "load_average": os.getloadavg(),
            "total_seconds": time.time() - started,
        },
        "parameters": {
            "executions": args.executions,
            "steps": args.steps,
            "workers": args.workers,
            "sweeper_tick_during_runs": args.tick,
            "idle_pollers": args.idle_pollers,
            "sweep_sizes": args.sizes,
            "lease_seconds": args.lease,
            "extension_seconds": args.extension,
        },
        "runs": runs,
        "floor": floor,
        "sweeper": sweeper,
        "recovery": recovery,
        "projection": projection,
        "overhead": overhead,
        "checks": checks,
    }


def redraw(args: argparse.Namespace) -> int:
    """The page from a saved result: a chart without a ten-minute run."""
    import json

    try:
        page = html.render(json.loads(args.from_json.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"bench.py: --from-json {args.from_json} is not a bench result: {exc}", file=sys.stderr)
        return 2
    write_html(args.html, page)
    return 0


def write_html(path: Path, page: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    print(f"wrote {path}")


def run_map(args: argparse.Namespace) -> int:
    """Only the map measurement (loom/bench/fanout.py)."""
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="loom-bench-"))
    with BenchStack(
        workers=args.workers, state_dir=state, batching_window=args.batching_window, overrides=overrides(args)
    ) as stack:
        measured = fanout.run_map(
            stack, items=args.map_items, concurrency=args.map_concurrency, tick=args.tick, timeout=args.timeout
        )
    measured["machine"] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "moto": moto.__version__,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "load_average": os.getloadavg(),
    }
    print(fanout.render_map(measured))
    if args.json:
        args.json.write_text(scenarios.dumps(measured), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0 if all(c["met"] for c in measured["checks"]) else 1


def run_local_throughput(args: argparse.Namespace) -> int:
    """Only the embedded stack's speed; exits 1 when a target is missed."""
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="loom-speed-"))
    log.configure("WARNING")  # the supervisor's per-invocation lines would bury the figures
    measured = local_speed.run(state, burst=args.burst, lone=args.lone, timeout=args.timeout, workflow=args.workflow)
    measured["machine"]["command"] = shlex.join([Path(sys.executable).name, *sys.argv])
    print(local_speed.render(measured))
    if args.json:
        args.json.write_text(scenarios.dumps(measured), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0 if all(c["met"] for c in measured["checks"]) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.local_throughput:
        return run_local_throughput(args)
    if args.recovery_only:
        return run_recovery(args)
    if args.from_json is not None:
        return redraw(args)
    if args.waits_only:
        measured = waits.wait_costs()
        print(waits.render(measured))
        if args.json:
            args.json.write_text(scenarios.dumps(measured), encoding="utf-8")
        return 0 if all(c["met"] for c in measured["checks"]) else 1
    if args.storage_only:
        log.configure("ERROR")  # each step's lines (a saga's warnings too) would bury the table
        stored = storage.storage(args.retention_days)
        print(storage.render(stored))
        if args.json:
            args.json.write_text(scenarios.dumps(stored), encoding="utf-8")
        return 0 if not any(r["unstamped"] for r in stored["rows"]) else 1
    if args.map_items is not None:
        return run_map(args)
    result = run(args)
    result["waits"] = waits.wait_costs()
    result["checks"] += result["waits"]["checks"]
    result["storage"] = storage.storage(args.retention_days)
    result["machine"]["total_seconds"] = round(result["machine"]["total_seconds"], 1)
    print(render(result))
    print("\n" + waits.render(result["waits"]))
    print("\n" + storage.render(result["storage"]))
    print(f"\ntotal: {result['machine']['total_seconds']} s")
    if args.json:
        args.json.write_text(scenarios.dumps(result), encoding="utf-8")
        print(f"wrote {args.json}")
    if args.html:
        write_html(args.html, html.render(result))
    return 0 if all(c["met"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
