"""`loom history` shows each failed step's cause in one line: type, message, where."""

from __future__ import annotations

import argparse

import pytest

from loom.cli.executions import history

pytestmark = pytest.mark.unit


class FakeClient:
    def history(self, execution_id: str) -> dict:
        frame = {"file": "myapp/flows.py", "line": 12, "function": "reserve"}
        error = {"type": "KeyError", "message": "'user'", "traceback": [frame]}
        attempts = [{"attempt": 1, "outcome": "failed", "error": error, "retry_delay": 2.0}]
        step = {"index": 0, "name": "reserve", "status": "RETRYING", "attempts": attempts, "error": error}
        return {"id": execution_id, "steps": [step]}


def test_history_names_the_exception_type_and_the_frame(capsys: pytest.CaptureFixture[str]) -> None:
    assert history(FakeClient(), argparse.Namespace(id="x", json=False)) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "KeyError: 'user' (at myapp/flows.py:12 in reserve)" in out
