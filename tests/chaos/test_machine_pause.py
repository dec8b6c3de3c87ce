"""A paused machine, made real: this process and every process of its chaos stack stopped at once.

CI's machines are sometimes paused. Stopping the whole process tree with SIGSTOP is the same thing
seen from inside it: every lease and visibility timeout lapses while nothing runs. A pause longer
than the lease while concurrent_sweep's pipelines run can make a step run twice (it did in one
run of two here: "a step ran 2 times while sweepers ticked"), which the scenario rightly calls
a failure. The kit must see the stall and run the scenario once more, instead of failing the
table on a fault it did not plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.runner import run_all
from chaos.scenario import PASS
from chaos.target import Target

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(600)]

PAUSER = Path(__file__).with_name("pause_tree.py")
AFTER = 6.0  # seconds into the scenario: its pipelines run under forced sweeps
LENGTH = 10.0  # longer than the chaos stack's 6 s lease


def test_a_pause_of_the_whole_machine_is_seen_and_never_fails_the_table(chaos_target: Target) -> None:
    pauser = subprocess.Popen([sys.executable, str(PAUSER), str(os.getpid()), str(AFTER), str(LENGTH)])
    try:
        [row] = run_all(chaos_target, names=["concurrent_sweep"], out=None)
    finally:
        assert pauser.wait(timeout=120) == 0
    stalls = row.evidence.get("first_run", row.evidence).get("stalls", [])
    assert stalls and max(s["seconds"] for s in stalls) >= LENGTH - 1.5, row.evidence
    assert row.status == PASS, row.violations
    if "first_run" in row.evidence:  # the pause broke the first run: the row says so, and why
        assert "run twice: the machine stood still" in row.observed
        broken = row.evidence["first_run"]["violations"]
        assert broken
        # What a pause may break is the scenario's own "nothing ran twice"; the engine's invariants
        # (one commit a step, effects once, versions +1), reported per execution, must still hold.
        assert not [v for v in broken if v.startswith("chaos-")], broken
