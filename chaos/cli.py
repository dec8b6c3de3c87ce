"""``loom chaos`` and ``python -m chaos.<name>``: run a failure scenario, all of them, or a seeded soak;
table, JSON, JUnit.

The chaos kit owns its arguments; the ``loom`` command line only registers them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from chaos import SCENARIOS, html_report, report
from chaos.runner import open_target, run_all, scenario
from chaos.soak import make_plan, run_soak

EMULATORS = ("embedded", "localstack", "aws")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "chaos",
        help="inject failures and check the invariants",
        description="Run chaos scenarios (each failure mode of the design) or a seeded soak, "
        "then check every invariant. Exits non-zero on any violation.",
    )
    parser.add_argument("scenario", choices=(*SCENARIOS, "all", "soak", "list"), help="what to run")
    parser.add_argument(
        "--emulator",
        choices=EMULATORS,
        default="embedded",
        help="embedded (default: the kit starts its own stack), localstack, or aws (a deployed stack)",
    )
    parser.add_argument(
        "--only",
        type=_names,
        default=None,
        metavar="NAME[,NAME...]",
        help="with `all`: just these scenarios, in the table's order (one stack for all of them)",
    )
    parser.add_argument("--stack", default="loom-dev", help="the deployed stack's name (with --emulator aws)")
    parser.add_argument(
        "--running", action="store_true", help="use the stack `loom up` started (stack.json) instead of starting one"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    parser.add_argument("--junit", metavar="PATH", help="also write a JUnit XML report")
    parser.add_argument(
        "--html", metavar="PATH", help="also write one HTML page: each scenario's timeline, invariants, recovery"
    )
    parser.add_argument("--executions", type=int, default=100, help="soak: executions at once")
    parser.add_argument(
        "--seed", type=int, default=1, help="the soak's fault plan seed; also seeds --sqs-standard-chaos"
    )
    # Five: a soak's workers mostly wait on the emulator, which is its bottleneck; five kept it
    # busier than three and took a quarter off a 300-execution soak (docs/notes/2026-12-07-soak-time.md).
    parser.add_argument("--workers", type=int, default=5, help="soak: worker processes of the kit's stack")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=None,
        help="soak: seconds every execution may take to end once the faults are in "
        "(default: 240, or 2.4 s an execution when more)",
    )
    parser.add_argument("--plan", action="store_true", help="soak: print the fault plan and exit")
    parser.add_argument(
        "--sqs-standard-chaos",
        type=float,
        nargs="?",
        const=0.1,
        default=0.0,
        metavar="RATE",
        help="the kit's own stack delivers step messages like a standard queue (shuffled, at RATE held back "
        "or delivered twice; default 0.1) for the whole run; AWS's queues do so already",
    )
    parser.set_defaults(func=run)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not scenarios: {unknown or text!r} (`loom chaos list` names them)")
    return names


def run(args: argparse.Namespace) -> int:
    if args.scenario == "list":
        for name in SCENARIOS:
            sc = scenario(name)
            print(f"{name:24} {sc.fault}")
        return 0
    progress = sys.stderr if args.json else sys.stdout
    if args.scenario == "soak":
        return _soak(args, progress)

    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    if args.only is not None:
        if args.scenario != "all":
            print("--only goes with `all`", file=sys.stderr)
            return 2
        names = [name for name in SCENARIOS if name in args.only]
    if not _standard_chaos_ok(args) or not _html_ok(args):
        return 2
    results = run_all(
        names=names,
        emulator=args.emulator,
        out=progress,
        running=args.running,
        stack_name=args.stack,
        sqs_standard_chaos=args.sqs_standard_chaos,
        sqs_chaos_seed=args.seed,
    )
    print(report.to_json(results) if args.json else report.render_table(results))
    if args.junit:
        report.write_junit(results, args.junit)
    if args.html:
        print(f"wrote {html_report.write(results, args.html, now=time.time())}", file=progress)
    return 0 if all(r.passed for r in results) else 1


def _html_ok(args: argparse.Namespace) -> bool:
    """Refuse a report path that cannot be written before the run, not after five minutes of it."""
    if not getattr(args, "html", None):
        return True
    target = Path(args.html)
    if target.is_dir():
        print(f"--html {args.html} is a directory; name the file to write", file=sys.stderr)
        return False
    parent = target.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        print(f"--html {args.html}: {parent} is not writable", file=sys.stderr)
        return False
    return True


def _soak(args: argparse.Namespace, progress: object) -> int:
    if args.executions < 1:
        print("--executions must be at least 1", file=sys.stderr)
        return 2
    if args.plan:
        plan = make_plan(args.executions, args.seed)
        print(f"plan digest {plan.digest}: {dict(plan.counts())}")
        print(f"kinds: {dict(sorted(plan.kinds().items()))}; expected ends: {plan.expected_by_kind()}")
        for f in plan.faults:
            print(f"  t+{f.at:5.1f}s {f.kind:12} {f.params}")
        return 0
    if not _standard_chaos_ok(args) or not _html_ok(args):
        return 2
    with open_target(
        emulator=args.emulator,
        running=args.running,
        stack_name=args.stack,
        workers=args.workers,
        sqs_standard_chaos=args.sqs_standard_chaos,
        sqs_chaos_seed=args.seed,
    ) as target:
        settle = args.settle_timeout or max(240.0, 2.4 * args.executions)
        summary = run_soak(target, args.executions, args.seed, out=progress, timeout=settle)  # type: ignore[arg-type]
    result = summary.as_result()
    if args.json:
        print(json.dumps({"summary": summary.__dict__, "ok": not summary.violations}, indent=2, default=str))
    else:
        print(summary.render())
    if args.junit:
        report.write_junit([result], args.junit, suite="loom-chaos-soak")
    if args.html:
        html_report.write([result], args.html, now=time.time())
    return 0 if not summary.violations else 1


def _standard_chaos_ok(args: argparse.Namespace) -> bool:
    rate = args.sqs_standard_chaos
    if not 0.0 <= rate <= 1.0:
        print(f"--sqs-standard-chaos is a rate between 0 and 1, not {rate}", file=sys.stderr)
        return False
    if rate and args.running:
        print("--sqs-standard-chaos needs the kit's own stack; use `loom up --sqs-standard-chaos`", file=sys.stderr)
        return False
    if rate and args.emulator == "aws":
        print("note: --sqs-standard-chaos is ignored against AWS: its standard queues reorder already", file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chaos.<name>`` lands here with ``[name, *flags]``."""
    parser = argparse.ArgumentParser(prog="loom")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["chaos", *(argv or [])])
    return int(args.func(args) or 0)


def main_for(name: str, argv: Sequence[str] | None = None) -> int:
    """``python -m chaos.<name>``: the same as ``loom chaos <name>``."""
    return main([name, *(sys.argv[1:] if argv is None else argv)])
