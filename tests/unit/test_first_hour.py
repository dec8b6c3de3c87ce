"""Frictions a new user met in the first hour (issue #25): each has its fix tested here or
beside the code it touched (test_local_imports.py, test_cli.py, test_waits_api.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engine import Registry, step, workflow
from engine.state import Execution, StepRecord
from loom import stackfile
from loom.testing import WorkflowTest

README = Path(__file__).resolve().parents[2] / "loom" / "testing" / "README.md"


def _reg() -> Registry:
    reg = Registry()

    def hello(ctx: Any) -> dict[str, Any]:
        return {"greeting": f"hello {ctx.data['name']}"}

    workflow("first_hour", registry=reg)(type("FirstHour", (), {"steps": [step(hello)]}))
    return reg


def test_an_execution_calls_its_context_output_as_the_api_and_the_cli_do() -> None:
    with WorkflowTest(_reg()) as t:
        ex = t.run(t.start("first_hour", {"name": "ada"}))
        assert ex is not None and ex.output == {"name": "ada", "greeting": "hello ada"}
        assert ex.output is ex.context


def test_the_testing_readme_lists_fields_an_execution_and_a_step_record_have() -> None:
    text = README.read_text()
    execution = re.search(r"Its\s+fields: (.*?)`history` gives", text, re.S)
    record = re.search(r"`history` gives one `StepRecord` per step:(.*?)\n\n", text, re.S)
    assert execution and record, "the README lists the fields"
    named = set(re.findall(r"`(\w+)`", execution.group(1))) - {"COMPLETED", "FAILED", "COMPENSATED", "WAITING"}
    named -= {"run", "execution", "run_workflow", "Execution", "output"}
    assert {"id", "status", "error", "input", "context"} <= named
    assert all(hasattr(Execution, f) or f in Execution.__dataclass_fields__ for f in named), named
    assert hasattr(Execution, "output")
    fields = set(re.findall(r"`(\w+)`", record.group(1))) - {"outcome", "started_at", "finished_at", "retry_delay"}
    assert fields and fields <= set(StepRecord.__dataclass_fields__), fields


def test_no_stack_found_says_where_it_looked_and_how_to_point_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOM_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    message = stackfile.no_stack_message()
    assert f"looked for {tmp_path / '.loom' / 'stack.json'}, from the current directory's .loom" in message
    assert "LOOM_STATE_DIR" in message and "--state-dir" in message
