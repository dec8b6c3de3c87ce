"""Run scenarios against a target and collect their result rows."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from chaos import SCENARIOS, stall
from chaos.scenario import FAIL, Result, Scenario, execute
from chaos.stackctl import chaos_stack
from chaos.target import Target
from engine.log import configure
from loom import stackfile


def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise KeyError(f"unknown chaos scenario {name!r}; known: {', '.join(SCENARIOS)}")
    found = importlib.import_module(f"chaos.{name}").SCENARIO
    if not isinstance(found, Scenario):
        raise TypeError(f"chaos.{name}.SCENARIO is a {type(found).__name__}, not a Scenario")
    return found


@contextlib.contextmanager
def open_target(
    stack: Any = None,
    *,
    emulator: str = "embedded",
    running: bool = False,
    stack_name: str | None = None,
    workers: int = 2,
    sqs_standard_chaos: float = 0.0,
    sqs_chaos_seed: int = 0,
) -> Iterator[Target]:
    """The target to run against: a given stack, the running one, a deployed one, or a fresh chaos stack."""
    if stack is not None:
        yield stack if isinstance(stack, Target) else Target.from_stack(stack)
        return
    if emulator == "aws":
        yield Target.deployed(stack_name or "loom-dev")
        return
    if running:
        info = stackfile.read()
        if info is None:
            raise RuntimeError(f"no running stack: {stackfile.path()} does not exist (run `loom up` first)")
        yield Target.from_stackfile(info)
        return

    configure("WARNING", stream=sys.stderr)  # the stack's own info logs would drown the table
    with chaos_stack(
        emulator=emulator, workers=workers, sqs_standard_chaos=sqs_standard_chaos, sqs_chaos_seed=sqs_chaos_seed
    ) as target:
        yield target


def run_all(
    stack: Any = None,
    *,
    names: Sequence[str] | None = None,
    emulator: str = "embedded",
    out: TextIO | None = sys.stdout,
    running: bool = False,
    stack_name: str | None = None,
    sqs_standard_chaos: float = 0.0,
    sqs_chaos_seed: int = 0,
) -> list[Result]:
    """Run the named scenarios (all by default), one after another, on one target."""
    chosen = [scenario(n) for n in (names or SCENARIOS)]
    results: list[Result] = []
    with (
        open_target(
            stack,
            emulator=emulator,
            running=running,
            stack_name=stack_name,
            sqs_standard_chaos=sqs_standard_chaos,
            sqs_chaos_seed=sqs_chaos_seed,
        ) as target,
        stall.StallWatch() as watch,
    ):
        if out is not None:
            print(
                f"chaos: {len(chosen)} scenario(s) against {target.kind} ({target.describe()})",
                file=out,
                flush=True,
            )
        for sc in chosen:
            results.append(run_one(sc, target, watch, out))
    return results


def run_one(sc: Scenario, target: Target, watch: stall.StallWatch, out: TextIO | None) -> Result:
    """One scenario; run once more if it failed while the machine stood still (chaos/stall.py)."""
    first: tuple[Result, list[stall.Stall]] | None = None
    while True:
        if out is not None:
            print(f"chaos: {sc.name}: {sc.fault} ...", file=out, flush=True)
        result = execute(sc, target)
        began = result.started_at or 0.0
        stalls = watch.within(began, began + result.duration_seconds)
        if stalls:
            result.evidence["stalls"] = stall.evidence(stalls)
        again = stall.verdict(result.status == FAIL, stalls, already_rerun=first is not None)
        _progress(out, sc, result, f"{stall.describe(stalls)}: running it again" if again is stall.Rerun.AGAIN else "")
        if again is stall.Rerun.KEEP:
            break
        first = (result, stalls)
    if first is not None:
        failed, stood = first
        result.observed += (
            f"; run twice: {stall.describe(stood)} during the first run, which failed"
            f" ({len(failed.violations)} violation(s))"
        )
        result.evidence["first_run"] = {"violations": failed.violations, "stalls": stall.evidence(stood)}
    return result


def _progress(out: TextIO | None, sc: Scenario, result: Result, note: str) -> None:
    if out is None:
        return
    extra = f" ({result.reason.splitlines()[0]})" if result.status == "SKIP" and result.reason else ""
    first = f" - {result.violations[0]}" if result.status == FAIL and result.violations else ""
    tail = f"; {note}" if note else ""
    print(
        f"chaos: {sc.name}: {result.status} in {result.duration_seconds:.1f}s{extra}{first}{tail}", file=out, flush=True
    )
