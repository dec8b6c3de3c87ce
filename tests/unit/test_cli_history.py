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


class SagaClient:
    def history(self, execution_id: str) -> dict:
        def rec(index: int, name: str, phase: str, status: str) -> dict:
            return {"index": index, "name": name, "phase": phase, "status": status, "attempts": []}

        steps = [
            rec(0, "reserve", "forward", "COMPLETED"),
            rec(1, "ship", "forward", "FAILED"),
            rec(0, "reserve#compensate", "compensation", "COMPLETED"),
        ]
        return {"id": execution_id, "steps": steps}


def test_history_marks_compensations_in_a_phase_column(capsys: pytest.CaptureFixture[str]) -> None:
    assert history(SagaClient(), argparse.Namespace(id="x", json=False)) == 0  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert "PHASE" in lines[0].upper()
    undo = [line for line in lines if "reserve#compensate" in line]
    assert len(undo) == 1 and "compensation" in undo[0]
    assert history(FakeClient(), argparse.Namespace(id="x", json=False)) == 0  # type: ignore[arg-type]
    assert "PHASE" not in capsys.readouterr().out.splitlines()[0].upper(), "a plain history keeps its columns"


def test_cancel_compensate_asks_the_control_plane_to_undo(capsys: pytest.CaptureFixture[str]) -> None:
    from loom.cli.executions import cancel
    from loom.client import ControlPlane

    sent: list[tuple[str, str, object]] = []

    class Plane(ControlPlane):
        def __init__(self) -> None:
            pass

        def request(self, method, path, *, query=None, body=None):  # type: ignore[no-untyped-def]
            sent.append((method, path, body))
            return 200, {"id": "x", "status": "COMPENSATING", "current_step": 1}

    assert cancel(Plane(), argparse.Namespace(id="x", compensate=True, json=False)) == 0
    assert sent == [("POST", "/executions/x/cancel", {"compensate": True})]
    assert "compensating x" in capsys.readouterr().out
    Plane().cancel("y")
    assert sent[-1] == ("POST", "/executions/y/cancel", None), "a plain cancel sends no body, as before"
