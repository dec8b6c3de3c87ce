"""The guide's code is real: each file under docs/examples/ runs to the end it asserts (a
subprocess each, as a reader would run it), and tests/unit/test_docs.py keeps each guide block
equal to its region. The one that boots the stack is tests/e2e/test_docs_examples.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IN_PROCESS = {
    "checkout.py": "checkout ",
    "first_test.py": "order_fulfillment ",
    "order_flow.py": "order_flow ",
}


def run_example(name: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / name)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_every_example_file_is_run_by_a_test() -> None:
    files = {p.name for p in (ROOT / "docs" / "examples").glob("*.py")}
    assert files == {*IN_PROCESS, "local_stack.py"}, "run the new example here (or in the e2e test)"


@pytest.mark.parametrize("name", sorted(IN_PROCESS))
def test_the_example_runs_to_its_end(name: str) -> None:
    done = run_example(name, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]  # after the engine's log lines
    assert last.startswith(IN_PROCESS[name]) and "COMPLETED" in last, done.stdout[-2000:]
