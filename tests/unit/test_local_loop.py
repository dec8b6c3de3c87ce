"""The local loop's pure parts: the bounded clock, the CLI's parsing and tables, the reload
watcher's fingerprints, the console renderer."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest
import structlog

from engine.clock import MAX_OFFSET_SECONDS, FakeClock, OffsetClock
from functions.wiring import FileOffsetClock
from loom.cli import build_parser, console, output
from loom.local.emulator import clock as offset_clock
from loom.local.lambdas.reload import SourceWatcher, changed, fingerprint

# ---------------------------------------------------------------------- the clock


@pytest.mark.parametrize("text", ["99999999999d", "1" + "0" * 400, "3653d", "87660h1s" * 100])
def test_an_absurd_duration_is_refused(text):
    with pytest.raises(ValueError, match=r"too far|not a duration"):
        offset_clock.parse_duration(text)


def test_ten_years_is_the_limit_and_advancing_past_it_is_refused(tmp_path):
    path = tmp_path / "clock_offset"
    offset_clock.advance(path, offset_clock.parse_duration("3650d"))
    with pytest.raises(ValueError, match="time reset"):
        offset_clock.advance(path, offset_clock.parse_duration("3d"))
    assert offset_clock.read_offset(path) == 3650 * 86400  # unchanged by the refusal
    with pytest.raises(ValueError):
        offset_clock.advance(path, float("inf"))


@pytest.mark.parametrize("written", ["inf", "nan", "1e300", "-1e12", "soon"])
def test_a_bad_offset_file_is_an_error_the_functions_ignore_and_reset_repairs(tmp_path, written):
    path = tmp_path / "clock_offset"
    path.write_text(written)
    with pytest.raises(ValueError, match="time reset"):
        offset_clock.read_offset(path)
    # The functions' clock never takes it: real time, so every timestamp stays a date.
    now = FileOffsetClock(str(path)).now()
    assert abs(now - time.time()) < 5
    assert offset_clock.reset(path) == 0.0
    assert offset_clock.read_offset(path) == 0.0


def test_each_move_of_the_clock_is_logged_with_its_wall_time_for_the_console(tmp_path, monkeypatch):
    path = tmp_path / "clock_offset"
    walls = iter([1000.0, 1040.0, 1050.0, 1060.0])
    monkeypatch.setattr(offset_clock.time, "time", lambda: next(walls))
    monkeypatch.setattr(offset_clock, "MAX_MOVES", 3)
    offset_clock.advance(path, 7200)
    offset_clock.advance(path, 3600)
    assert offset_clock.read_moves(path) == [(1000.0, 7200.0), (1040.0, 10800.0)]
    with offset_clock.moves_path(path).open("a") as fh:
        fh.write("garbage\n1 2 3\n")  # not two numbers: skipped, never a clock
    offset_clock.reset(path)
    offset_clock.advance(path, 60)
    assert offset_clock.read_moves(path) == [(1040.0, 10800.0), (1050.0, 0.0), (1060.0, 60.0)], "the newest 3"
    assert offset_clock.read_offset(path) == 60.0  # the log never decides the offset


def test_offset_clock_ignores_an_offset_beyond_the_bound():
    base = FakeClock(1_000.0)
    assert OffsetClock(lambda: MAX_OFFSET_SECONDS, base).now() == 1_000.0 + MAX_OFFSET_SECONDS
    assert OffsetClock(lambda: MAX_OFFSET_SECONDS * 2, base).now() == 1_000.0
    assert OffsetClock(lambda: float("nan"), base).now() == 1_000.0


def test_the_functions_see_a_reset_that_lands_within_the_same_mtime(tmp_path):
    path = tmp_path / "clock_offset"
    offset_clock.write_offset(path, 7200)
    clock = FileOffsetClock(str(path))
    assert clock.now() - time.time() > 7000
    stamp = os.stat(path).st_mtime_ns
    offset_clock.reset(path)
    os.utime(path, ns=(stamp, stamp))  # a coarse filesystem: the same mtime as the advance
    assert abs(clock.now() - time.time()) < 5


# ---------------------------------------------------------------------- the CLI's parsing and output


def _parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", ["status", "history", "cancel"])
def test_an_empty_id_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parse(command, "")
    assert exit_.value.code == 2
    assert "cannot be empty" in capsys.readouterr().err


def test_status_filters_are_case_insensitive():
    assert _parse("list", "--status", "running").status == "RUNNING"
    assert _parse("list", "--status", " Completed ").status == "COMPLETED"


def test_version_and_state_dir(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        _parse("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("loom ")
    assert _parse("--state-dir", str(tmp_path), "down").state_dir == str(tmp_path)
    assert _parse("up", "--state-dir", str(tmp_path)).state_dir == str(tmp_path)
    assert _parse("status", "x", "--state-dir", str(tmp_path)).state_dir == str(tmp_path)


def test_up_has_a_description_and_every_flag_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("up", "down", "time"):
        command = sub.choices[name]
        assert command.description, name
        for action in command._actions:
            assert action.help, f"loom {name} {action.option_strings or action.dest} has no help"


def test_list_never_cuts_an_id():
    long_id = "order-" + "x" * 150
    out = io.StringIO()
    output.table(
        [{"id": long_id, "execution_id": long_id, "input": "y" * 200}],
        [("id", "id"), ("execution_id", "execution"), ("input", "input")],
        out,
    )
    row = out.getvalue().splitlines()[1]
    assert row.count(long_id) == 2
    assert "y" * 200 not in row  # other cells are still shortened


# ---------------------------------------------------------------------- reload


def test_fingerprint_sees_edits_additions_and_removals(tmp_path):
    (tmp_path / "pkg").mkdir()
    a = tmp_path / "pkg" / "a.py"
    a.write_text("x = 1\n")
    (tmp_path / "pkg" / "notes.txt").write_text("ignored")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-312.py").write_text("ignored")
    before = fingerprint([tmp_path])
    assert list(before) == [str(a)]
    os.utime(a, ns=(1, 1))
    b = tmp_path / "pkg" / "b.py"
    b.write_text("y = 2\n")
    assert changed(before, fingerprint([tmp_path])) == [str(a), str(b)]


def test_the_watcher_calls_back_once_for_a_burst_of_saves(tmp_path):
    seen: list[list[str]] = []
    watcher = SourceWatcher([tmp_path], seen.append, interval=0.05, settle=0.2).start()
    try:
        for i in range(3):
            (tmp_path / f"m{i}.py").write_text("pass\n")
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        watcher.stop()
    assert len(seen) == 1
    assert [Path(p).name for p in seen[0]] == ["m0.py", "m1.py", "m2.py"]


# ---------------------------------------------------------------------- foreground output


def test_a_json_log_line_is_rendered_for_people_and_anything_else_is_kept():
    renderer = structlog.dev.ConsoleRenderer(colors=False)
    line = json.dumps({"event": "invocation", "level": "info", "timestamp": "2026-12-01T01:02:03.4Z", "pid": 7})
    shown = console.render(line, renderer)
    assert "invocation" in shown and "pid=7" in shown and "01:02:03" in shown and "{" not in shown
    assert console.render("Traceback (most recent call last):\n", renderer) == "Traceback (most recent call last):"


def test_the_supervisor_logs_json_when_piped_and_console_lines_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped, tty = io.StringIO(), Tty()
    assert console.configure("INFO", piped) is False
    structlog.get_logger().info("stack.started", table="loom-dev")
    assert json.loads(piped.getvalue())["event"] == "stack.started"
    assert console.configure("INFO", tty) is True
    structlog.get_logger().info("stack.started", table="loom-dev")
    shown = re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue())
    assert "stack.started" in shown and "table=loom-dev" in shown and "{" not in shown


def test_the_console_relay_renders_what_the_function_processes_write():
    out = io.StringIO()
    relay = console.ConsoleRelay(out).start()
    relay.stream.write(json.dumps({"event": "step.started", "level": "info", "execution_id": "e-1"}) + "\n")
    relay.stream.write("plain text from a print()\n")
    relay.close()
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()
    assert "step.started" in shown[0] and "execution_id=e-1" in shown[0] and "{" not in shown[0]
    assert shown[1] == "plain text from a print()"
