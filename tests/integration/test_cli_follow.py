"""``loom watch``, ``loom wait`` and ``loom logs`` against a control plane on moto (the
``stack`` fixture of test_cli.py). Time is moved by hand: the pause of each loop runs the
worker (or appends to the log) instead of sleeping."""

from __future__ import annotations

import argparse
import io
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from loom import stackfile
from loom.cli import follow, logs
from tests.integration import test_cli
from tests.integration.api_support import Functions
from tests.integration.test_cli import loom

pytestmark = [pytest.mark.integration, pytest.mark.server]

# test_cli.py's fixtures: a moto server and a control plane in front of it.
moto_url = test_cli.moto_url
stack = test_cli.stack


class Hands:
    """A clock moved by the loops' pauses; ``on_pause`` runs at each (the world moving on)."""

    def __init__(self, on_pause: Any = None) -> None:
        self.t = 1000.0
        self.pauses: list[float] = []
        self.on_pause = on_pause

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.t += seconds
        if self.on_pause is not None:
            self.on_pause()

    def pace(self) -> follow.Pace:
        return follow.Pace(now=lambda: self.t, monotonic=lambda: self.t, sleep=self.sleep)


def test_wait_exit_codes_tell_the_end(
    stack: dict[str, Any], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn: Functions = stack["fn"]
    hands = Hands(on_pause=fn.drain)
    monkeypatch.setattr(follow, "PACE", hands.pace())
    loom(capsys, "start", "pipeline", "--id", "w-ok")
    code, out, _ = loom(capsys, "wait", "w-ok", "--interval", "2")
    assert (code, out.strip()) == (0, "w-ok COMPLETED")
    assert hands.pauses == [2.0], "one look while RUNNING, the worker ran in the pause, then the end"

    loom(capsys, "start", "order_fulfillment", "--input", '{"order_id": "o", "amount": -5}', "--id", "w-bad")
    assert loom(capsys, "wait", "w-bad")[0] == follow.EXIT_BY_STATUS["FAILED"] == 3
    loom(capsys, "start", "pipeline", "--id", "w-cancel")
    loom(capsys, "cancel", "w-cancel")
    code, out, _ = loom(capsys, "wait", "w-cancel", "--json")
    assert code == 4 and json.loads(out)["status"] == "CANCELLED"


def test_wait_gives_up_after_its_timeout(
    stack: dict[str, Any], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hands = Hands()  # nothing runs the worker: the execution stays RUNNING
    monkeypatch.setattr(follow, "PACE", hands.pace())
    loom(capsys, "start", "pipeline", "--id", "w-slow")
    code, out, err = loom(capsys, "wait", "w-slow", "--timeout", "5", "--interval", "2")
    assert code == follow.EXIT_TIMEOUT == 7 and out == ""
    assert "w-slow is still RUNNING after 5s" in err
    assert hands.pauses == [2.0, 2.0, 1.0], "the last pause ends at the deadline, not past it"
    assert loom(capsys, "wait", "nobody", "--timeout", "1")[0] == 1  # an API error is an error
    code, out, _ = loom(capsys, "status", "w-slow")
    assert code == 0 and "doing:" in out and "running step stage_0 (attempt 1)" in out


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan"])
def test_wait_refuses_a_bad_timeout(stack: dict[str, Any], capsys: pytest.CaptureFixture, bad: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        loom(capsys, "wait", "x", "--timeout", bad)
    assert exit_.value.code == 2 and "seconds" in capsys.readouterr().err


def test_watch_redraws_on_change_and_ends_with_the_execution(
    stack: dict[str, Any], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn: Functions = stack["fn"]
    looks: list[int] = []
    hands = Hands(on_pause=lambda: fn.drain() if len(looks) >= 1 else looks.append(1))
    monkeypatch.setattr(follow, "PACE", hands.pace())
    loom(capsys, "start", "pipeline", "--id", "watched")
    code, out, _ = loom(capsys, "watch", "watched", "--interval", "3")
    assert code == 0
    pages = out.split("\n\n")  # not a terminal: one page per change, a blank line between
    assert len(pages) == 2, "the unchanged second look drew nothing"
    assert pages[0].startswith("watched  RUNNING  running step stage_0 (attempt 1)")
    assert [row.split()[3] for row in pages[0].splitlines() if row.startswith("9 ")] == ["pending"]
    assert pages[1].startswith("watched  COMPLETED  completed") and "pending" not in pages[1]
    assert hands.pauses == [3.0, 3.0]


def test_watch_exit_code_is_the_end_status(stack: dict[str, Any], capsys: pytest.CaptureFixture) -> None:
    fn: Functions = stack["fn"]
    loom(capsys, "start", "order_fulfillment", "--input", '{"order_id": "o", "amount": -5}', "--id", "wf")
    fn.drain()
    code, out, _ = loom(capsys, "watch", "wf")
    assert code == 3 and "FAILED" in out and "NonRetryableError" in out


# ----------------------------------------------------------------------- loom logs


LINE_TIME = "2026-12-01T22:52:00.5Z"


def line(execution_id: str | None, event: str, **data: Any) -> str:
    record = {"event": event, "level": "info", "timestamp": LINE_TIME, **data}
    if execution_id is not None:
        record["execution_id"] = execution_id
    return json.dumps(record, sort_keys=True) + "\n"


def logs_args(*argv: str) -> argparse.Namespace:
    root = argparse.ArgumentParser()
    logs.register(root.add_subparsers())
    return root.parse_args(["logs", *argv])


def test_logs_show_only_that_executions_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    (tmp_path / "stack.log").write_text(
        "emulator listening on 127.0.0.1:4566\n"
        + line("e1", "step.started", step=0, attempt=1, step_name="reserve")
        + line("e2", "step.started", step=0, attempt=1)
        + "{not json\n"
        + line(None, "api.request", method="GET", path="/executions/e1/history", status=200)
        + line(None, "api.request", method="GET", path="/executions/e10", status=200)
        + line("e1", "step.completed", step=0, attempt=1, duration_ms=3.5)
    )
    out = io.StringIO()
    # Read on the lines' own day: the stamp is a bare time then, whatever today's date is.
    same_day = follow.Pace(
        now=lambda: datetime.fromisoformat(LINE_TIME).timestamp(), monotonic=lambda: 0.0, sleep=lambda _s: None
    )
    assert logs.run(logs_args("e1"), pace=same_day, out=out) == 0
    shown = out.getvalue().splitlines()
    assert len(shown) == 2, "the reads of `loom watch` and the console are left out"
    assert shown[0].split()[1:3] == ["info", "step.started"] and "step_name=reserve" in shown[0]
    assert "api.request" not in out.getvalue() and "e10" not in out.getvalue()
    out = io.StringIO()
    logs.run(logs_args("e1", "--json", "--reads"), out=out)
    assert [json.loads(x)["event"] for x in out.getvalue().splitlines()] == [
        "step.started",
        "api.request",
        "step.completed",
    ]


def test_logs_read_the_file_the_stack_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    given = tmp_path / "mine.log"
    given.write_text(line("e1", "execution.started"))
    stackfile.write({"control_plane_url": "http://127.0.0.1:1", "log_file": str(given)})
    out = io.StringIO()
    assert logs.run(logs_args("e1"), out=out) == 0 and "execution.started" in out.getvalue()


def test_logs_refuse_a_log_older_than_the_foreground_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    old = tmp_path / "stack.log"
    old.write_text(line("e1", "step.started", step=0, attempt=1))
    os.utime(old, (1_000_000, 1_000_000))  # written by an earlier `loom up -d`
    stackfile.write({"control_plane_url": "http://127.0.0.1:1", "started_at": 2_000_000})
    out = io.StringIO()
    assert logs.run(logs_args("e1"), out=out) == 1 and out.getvalue() == ""
    err = capsys.readouterr().err
    assert "was last written before the running stack started" in err and "Pass --file" in err
    assert logs.run(logs_args("e1", "--file", str(old)), out=out) == 0 and "step.started" in out.getvalue()


def test_logs_without_a_log_say_where_it_would_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "none"))
    assert logs.run(logs_args("e1")) == 1
    err = capsys.readouterr().err
    assert "stack.log" in err and "loom up -d" in err and "--log-file" in err


def test_logs_follow_prints_new_lines_as_they_come(tmp_path: Path) -> None:
    log = tmp_path / "stack.log"
    log.write_text(line("e1", "step.started", step=0))
    later = [line("e1", "step.completed", step=0), '{"event": "step.started", "execution_id": "e1", "ste', 'p": 1}\n']

    def more() -> None:
        if not later:
            raise KeyboardInterrupt  # the user's Ctrl-C ends --follow
        with open(log, "a") as fh:
            fh.write(later.pop(0))

    out = io.StringIO()
    assert logs.run(logs_args("e1", "--follow", "--file", str(log)), pace=Hands(on_pause=more).pace(), out=out) == 0
    events = [next(w for w in x.split() if w.startswith("step.")) for x in out.getvalue().splitlines()]
    assert events == ["step.started", "step.completed", "step.started"], (
        "a line written in two parts prints once, whole"
    )


def test_watch_on_a_terminal_redraws_in_place_as_the_countdown_moves() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    state = {"kind": "sleeping", "reason": "sleeping until x", "until_epoch": 1060.0, "step": 0}
    answers = [
        {"id": "t", "steps": [], "pending": [{"index": 0, "name": "nap", "kind": "sleep"}], "state": state},
        {"id": "t", "steps": [], "pending": [], "state": {"kind": "completed", "reason": "completed"}},
    ]

    class Client:
        def history(self, execution_id: str) -> dict:
            return answers[0] if len(hands.pauses) < 2 else answers[1]

    hands = Hands()
    out = Tty()
    args = argparse.Namespace(id="t", interval=30.0, traceback=False)
    assert follow.watch(Client(), args, hands.pace(), out) == 0  # type: ignore[arg-type]
    pages = out.getvalue().split(follow.CLEAR)[1:]
    assert len(pages) == 3, "the same answer redrawn once because its countdown moved, then the end"
    assert "(in 1m00s)" in pages[0] and "(in 30.0s)" in pages[1] and pages[2].startswith("t  COMPLETED")
