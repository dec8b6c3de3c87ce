"""Process ownership and the CLI around a stack that is not there: no full stack is started here.

`loom down` (and the next `loom up`) signal a pid only when its start time and command
line match stack.json; a function process dies with its supervisor even mid-invocation;
commands against a dead stack say so.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from loom.local import procs
from tests.e2e.support import ROOT, alive, loom, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def sleeper():
    """An unrelated program that must survive whatever a stale stack file says."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _stack_file(state_dir: Path, supervisor: int, processes: dict[str, Any], **extra: Any) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    info = {
        "emulator": "embedded",
        "region": "us-east-1",
        "control_plane_url": "http://127.0.0.1:9",
        "supervisor_pid": supervisor,
        "processes": processes,
        **extra,
    }
    (state_dir / "stack.json").write_text(json.dumps(info))


def ended_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether ``proc`` ends before the deadline: a kill that was sent shows well within it."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_stale_stack_file_never_kills_another_program(tmp_path, sleeper):
    # After a reboot the recorded pids belong to whoever got them: same pid, other start, other program.
    impostor = {
        str(sleeper.pid): {"pid": sleeper.pid, "started": "old-boot:12345", "cmdline": "python -m loom.cli.local up"}
    }
    _stack_file(tmp_path, sleeper.pid, impostor, worker_pids=[sleeper.pid], emulator_pid=sleeper.pid)
    done = loom(tmp_path, "down", "--timeout", "2")
    assert done.returncode == 0, done.stderr
    assert "is not running" in done.stderr
    assert not ended_within(sleeper, 0.3), "loom down killed a program that was not the stack's"
    assert not (tmp_path / "stack.json").exists()


def test_a_file_without_identities_kills_nothing(tmp_path, sleeper):
    # The stack file of an older loom: pids only, nothing to prove them with.
    _stack_file(tmp_path, sleeper.pid, {}, worker_pids=[sleeper.pid])
    assert loom(tmp_path, "down", "--timeout", "1").returncode == 0
    assert not ended_within(sleeper, 0.3)


def test_leftovers_that_are_provably_the_stacks_are_ended(tmp_path, sleeper):
    other = subprocess.Popen(["sleep", "300"])
    try:
        mine = wait_for("sleep to exec", lambda: (found := procs.identify(other.pid)) and found.cmdline and found)
        assert mine.cmdline == "sleep 300"
        records = {
            str(other.pid): mine.record(),
            str(sleeper.pid): {**mine.record(), "pid": sleeper.pid, "started": "somewhen-else"},
        }
        _stack_file(tmp_path, _dead_pid(), records)
        done = loom(tmp_path, "down")
        assert done.returncode == 0, done.stderr
        assert f"ended 1 leftover processes of that stack: [{other.pid}]" in done.stderr
        assert other.wait(timeout=10) == -signal.SIGKILL
        assert sleeper.poll() is None
    finally:
        other.kill()
        other.wait()


def test_commands_against_a_dead_stack_say_so(tmp_path):
    _stack_file(tmp_path, _dead_pid(), {})
    for argv in (["status", "some-id"], ["list"], ["time", "advance", "1h"]):
        done = loom(tmp_path, *argv)
        assert done.returncode != 0, argv
        assert "the stack at http://127.0.0.1:9 is not running (it died at " in done.stderr, argv
        assert "Connection refused" not in done.stderr and "Traceback" not in done.stderr


def test_time_advance_needs_a_running_stack(tmp_path):
    done = loom(tmp_path, "time", "advance", "1h")
    assert done.returncode != 0
    assert "no local stack is running" in done.stderr
    assert not (tmp_path / "clock_offset").exists()


def test_an_absurd_advance_is_refused_and_reset_repairs_a_bad_file(tmp_path):
    done = loom(tmp_path, "time", "advance", "99999999999d")
    assert done.returncode == 2
    assert "too far" in done.stderr
    (tmp_path / "clock_offset").write_text("1e300")
    shown = loom(tmp_path, "time", "show")
    assert shown.returncode == 1 and "time reset" in shown.stderr and "Traceback" not in shown.stderr
    assert loom(tmp_path, "time", "reset").returncode == 0
    assert "(0s)" in loom(tmp_path, "time", "show").stdout


@pytest.mark.parametrize("flag", ["--port", "--api-port"])
def test_a_taken_port_is_named(tmp_path, flag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--api-port" if flag == "--port" else "--port"
        done = loom(tmp_path, "up", flag, str(port), other, "0", timeout=60)
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken ({flag})" in done.stderr
    assert not (tmp_path / "stack.json").exists()


def test_a_closed_pipe_is_not_a_traceback(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "loom", "time", "show"],
        cwd=ROOT,
        env={**os.environ, "LOOM_STATE_DIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # `| head -0`: the reader is gone before the first line
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()


DRIVER = textwrap.dedent(
    """
    import json, sys, tempfile, threading
    from loom.local.lambdas.package import build
    from loom.local.lambdas.pool import FunctionPool
    package = build(tempfile.mkdtemp(), [sys.argv[1] + "/tests"])
    pool = FunctionPool(function="Fake", handler="tests.e2e.fake_handlers.sleepy",
                        env={"PATH": "/usr/bin:/bin"}, timeout=120, package=package).start()
    threading.Thread(target=pool.invoke, args=({"seconds": 100},), daemon=True).start()
    print(json.dumps(pool.pids()), flush=True)
    threading.Event().wait()
    """
)


def test_a_function_process_dies_with_its_supervisor_even_mid_invocation():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(ROOT)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        (pid,) = json.loads(driver.stdout.readline())
        time.sleep(0.5)  # the invocation is under way: stdin is no longer being read
        assert alive(pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        wait_for("the orphaned function process to exit", lambda: not procs.identify(pid), timeout=10, every=0.1)
    finally:
        driver.kill()
        driver.wait()
