"""`scripts/bench.py --local-throughput` on a real embedded stack, with tiny numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loom.bench.local_speed import TARGET_GAP_MS, TARGET_STEPS_PER_SECOND

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10  # the plain_steps workflow's (the default)


def test_the_figures_come_from_what_the_engine_wrote(tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    tiny = ["--local-throughput", "--burst", "3", "--lone", "2", "--json", str(out), "--state-dir", str(tmp_path / "s")]
    done = subprocess.run(
        [sys.executable, "scripts/bench.py", *tiny],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(out.read_text())
    burst, lone = result["burst"], result["lone"]
    assert burst["executions"] == burst["completed"] == 3
    assert burst["steps"] == 3 * STEPS
    assert burst["steps_per_second"] == pytest.approx(burst["steps"] / burst["seconds"])
    assert lone["executions"] == lone["completed"] == 2 and lone["gaps"] == 2 * (STEPS - 1)
    assert 0 < lone["gap_ms"]["p50"] <= lone["gap_ms"]["p90"] <= lone["gap_ms"]["max"]
    # Every step commits its history item through the emulator's UpdateItem.
    updates = result["burst"]["emulator_by_operation"]["dynamodb.UpdateItem"]
    assert updates["requests_per_step"] >= 1 and updates["cpu_ms_per_request"] > 0
    assert result["burst"]["cpu_ms_per_step"]["emulator"] > 0
    met = [c["met"] for c in result["checks"]]
    assert met[0] == (burst["steps_per_second"] >= TARGET_STEPS_PER_SECOND)
    assert met[1] == (lone["gap_ms"]["p50"] <= TARGET_GAP_MS)
    assert done.returncode == (0 if all(met) else 1), done.stderr
    assert f"{burst['steps_per_second']:.1f} steps/s" in done.stdout


def test_an_unknown_workflow_is_refused_before_any_stack_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench.py", "--local-throughput", "--workflow", "nope", "--state-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "invalid choice: 'nope'" in done.stderr
    assert not any(tmp_path.iterdir()), "nothing was started"
