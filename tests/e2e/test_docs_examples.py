"""The local-loop guide's stack from Python (docs/examples/local_stack.py) runs as shown."""

from __future__ import annotations

import pytest

from tests.integration.test_docs_examples import run_example

pytestmark = pytest.mark.e2e


def test_the_stack_from_python_starts_answers_and_stops() -> None:
    done = run_example("local_stack.py", timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "workflows;" in done.stdout and "invocations" in done.stdout, done.stdout
