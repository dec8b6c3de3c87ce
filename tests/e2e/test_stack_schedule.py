"""The local stack runs the template's concurrency and EventBridge's schedule semantics:
processes capped by ReservedConcurrentExecutions / MaximumConcurrency, sweeper ticks that
overlap a slow run, and failed ticks retried by the function's EventInvokeConfig."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loom.local.lambdas.async_invoke import Verdict
from loom.local.lambdas.concurrency import CapSource
from loom.local.lambdas.package import makefile_sources
from loom.local.stack import LocalStack, StackOptions
from loom.template import load

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def until(what: str, check: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def overlapping(records: list[dict[str, Any]]) -> bool:
    spans = sorted((r["start"], r["end"]) for r in records)
    return any(b[0] < a[1] for a, b in itertools.pairwise(spans))


def test_template_concurrency_and_an_overlapping_retried_schedule(tmp_path: Path) -> None:
    doc = load()
    worker = doc["Resources"]["WorkerFunction"]["Properties"]
    worker["ReservedConcurrentExecutions"] = 3
    worker["Events"]["Steps"]["Properties"]["ScalingConfig"] = {"MaximumConcurrency": 2}
    sweeper = doc["Resources"]["SweeperFunction"]["Properties"]
    sweeper["Handler"] = "tests.e2e.sched_handlers.slow_failing_sweep"
    sweeper["ReservedConcurrentExecutions"] = 3
    sweeper["EventInvokeConfig"] = {"MaximumRetryAttempts": 1}
    template = tmp_path / "template.json"
    template.write_text(json.dumps(doc))
    record = tmp_path / "runs.jsonl"
    opts = StackOptions(
        port=0,
        api_port=0,
        state_dir=tmp_path / "state",
        template=template,
        tick=0.5,
        # The fake sweeper lives in tests/: it goes in the functions' package as a SOURCES entry.
        sources=(*makefile_sources(), str(ROOT / "tests")),
        function_env={"SweeperFunction": {"SCHED_RECORD": str(record), "SCHED_SLEEP": "1.2", "SCHED_FAIL": "1"}},
    )
    with LocalStack(opts) as stack:
        # The smaller of the two caps, as AWS applies them; the control plane says it is approximate.
        plan = stack.concurrency["WorkerFunction"]
        assert (plan.size, plan.source) == (2, CapSource.TEMPLATE)
        assert len(stack.worker_pids()) == 2
        assert stack.concurrency["SweeperFunction"].size == 3
        assert "approximation" in stack.info["concurrency"]["ControlPlaneFunction"]["note"]

        # Ticks every 0.5 s, runs of 1.2 s: EventBridge does not wait, so runs overlap.
        until("two sweeper runs at once", lambda: overlapping(runs(record)))

        # Each failed tick waits a minute for its retry: move the functions' clock past it.
        stack.advance_time(61)
        retried = until(
            "a failed tick run again",
            lambda: [i for i, n in Counter(r["id"] for r in runs(record)).items() if n == 2],
        )
        assert retried
        attempts = until(
            "a retried tick given up",
            lambda: [a for a in stack.sweeper_async.attempts if a.verdict is Verdict.EXHAUSTED],
        )
        # MaximumRetryAttempts 1: the second attempt is the last.
        assert {a.attempt for a in attempts} == {2}
        assert all(a.verdict is Verdict.RETRY for a in stack.sweeper_async.attempts if a.attempt == 1)
