"""The embedded stack end to end, booted as a user boots it: `loom up --detach` in a subprocess."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loom.local.emulator.client import LocalApi, ok
from tests.e2e.support import (
    alive,
    all_pids,
    log_lines,
    loom,
    stack_info,
    start,
    wait_for,
    wait_status,
)

pytestmark = [pytest.mark.e2e]

WORKER_TIMEOUT = 12  # seconds: above the engine's 10 s chain reserve, short enough to watch a kill


def up(state_dir: Path, *extra: str) -> dict[str, Any]:
    done = loom(
        state_dir,
        "up",
        "--detach",
        "--port",
        "0",
        "--api-port",
        "0",
        "--tick",
        "1",
        "--visibility-timeout",
        "5",
        "--workers",
        "2",
        *extra,
    )
    assert done.returncode == 0, done.stderr
    info = stack_info(state_dir)
    assert info is not None
    return info


def down(state_dir: Path, info: dict[str, Any]) -> None:
    pids = all_pids(stack_info(state_dir) or info)
    done = loom(state_dir, "down")
    assert done.returncode == 0, done.stderr
    wait_for("every stack process to exit", lambda: not any(alive(p) for p in pids), timeout=30)
    assert stack_info(state_dir) is None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    state_dir = tmp_path_factory.mktemp("stack")
    # The hold knob these tests use is obeyed only with the chaos switch on.
    info = up(state_dir, "--timeout", f"WorkerFunction={WORKER_TIMEOUT}", "--parameter", "ChaosCrashAfterCheckpoint=on")
    try:
        yield {**info, "state_dir": state_dir, "api": LocalApi.from_info(info)}
    finally:
        down(state_dir, info)


def test_stack_file_describes_the_running_stack(stack):
    assert stack["emulator"] == "embedded"
    assert stack["aws_endpoint_url"].startswith("http://127.0.0.1:")
    assert stack["table"] == "loom-dev"
    assert stack["queue_url"].endswith("/loom-dev-steps")
    assert stack["dlq_url"].endswith("/loom-dev-dlq")
    assert len(stack["worker_pids"]) == 2
    assert all(alive(pid) for pid in all_pids(stack))
    assert stack["worker_pids"] == stack["function_pids"]["WorkerFunction"]
    assert set(stack["function_pids"]) == {"WorkerFunction", "SweeperFunction", "ControlPlaneFunction"}


def test_every_function_runs_from_the_built_package_not_the_venv(stack):
    package = stack["package"]
    task_root = Path(package["task_root"])
    assert package["sources"] == ["engine", "functions", "workflows"]  # the Makefile's SOURCES
    tops = sorted(p.name for p in task_root.iterdir() if not p.name.startswith("structlog"))
    assert tops == ["engine", "functions", "workflows"]
    for pids in stack["function_pids"].values():
        for pid in pids:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert [a.decode() for a in argv[1:6]] == ["-I", "-S", "-B", "-u", f"{package['runtime_dir']}/bootstrap.py"]
            assert os.readlink(f"/proc/{pid}/cwd") == str(task_root)
            environ = dict(
                item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item
            )
            assert environ["LAMBDA_TASK_ROOT"] == str(task_root)
            assert "PYTHONPATH" not in environ


def test_a_second_up_in_the_same_state_dir_is_refused(stack):
    done = loom(stack["state_dir"], "up", "--detach", "--port", "0", "--api-port", "0")
    assert done.returncode == 1
    assert "already running" in done.stderr


def test_execution_started_over_http_completes(stack):
    ex_id = start(stack["api"], "pipeline", {"n": 1})
    ex = wait_status(stack["api"], ex_id, "COMPLETED")
    assert ex["current_step"] == 10
    history = ok(stack["api"], "GET", f"/executions/{ex_id}/history")
    steps = history["steps"] if isinstance(history, dict) else history
    assert [s["status"] for s in steps] == ["COMPLETED"] * 10


def test_every_invocation_is_logged(stack):
    def worker_lines() -> list[dict[str, Any]]:
        return [
            line
            for line in log_lines(stack["state_dir"])
            if line.get("event") == "invocation" and line.get("function") == "WorkerFunction"
        ]

    lines = wait_for("a worker invocation in the log", worker_lines, timeout=30)
    line = lines[0]
    assert line["outcome"] == "ok"
    assert line["request_id"] and line["pid"] and line["duration_ms"] >= 0
    functions = {ln.get("function") for ln in log_lines(stack["state_dir"]) if ln.get("event") == "invocation"}
    assert {"WorkerFunction", "SweeperFunction", "ControlPlaneFunction"} <= functions


def test_killed_workers_are_replaced_and_the_work_still_finishes(stack):
    api, state_dir = stack["api"], stack["state_dir"]
    # The first step: its own message is the one in flight, so redelivery (not the lease) recovers it.
    ex_id = start(api, "pipeline", {"chaos": {"hold": {"stage_0": 3}}})

    def stage_0_running() -> bool:
        return any(
            line.get("event") == "step.started" and line.get("execution_id") == ex_id for line in log_lines(state_dir)
        )

    wait_for("stage_0 to be running", stage_0_running, timeout=30, every=0.05)
    victims = stack_info(state_dir)["worker_pids"]
    for pid in victims:  # one of them is inside stage_0 right now
        os.kill(pid, signal.SIGKILL)

    def replaced() -> list[int] | None:
        pids = (stack_info(state_dir) or {}).get("worker_pids") or []
        return pids if len(pids) == 2 and not set(pids) & set(victims) else None

    fresh = wait_for("the pool to replace both workers", replaced, timeout=30)
    assert all(alive(p) for p in fresh)
    # The message comes back after the queue's 5 s visibility timeout and a new process finishes it.
    wait_status(api, ex_id, "COMPLETED", timeout=60)
    crashes = [
        line
        for line in log_lines(state_dir)
        if line.get("event") == "invocation" and line.get("outcome") == "crash" and line.get("pid") in victims
    ]
    assert crashes and "killed by signal 9" in crashes[0]["error_message"]


def test_invocation_past_the_timeout_is_killed(stack):
    api, state_dir = stack["api"], stack["state_dir"]
    ex_id = start(api, "pipeline", {"chaos": {"hold": {"stage_0": WORKER_TIMEOUT + 30}}})

    def timed_out() -> list[dict[str, Any]]:
        return [
            line
            for line in log_lines(state_dir)
            if line.get("event") == "invocation"
            and line.get("outcome") == "timeout"
            and line.get("function") == "WorkerFunction"
        ]

    line = wait_for("a worker invocation to time out", timed_out, timeout=WORKER_TIMEOUT + 30)[0]
    assert line["error_type"] == "Sandbox.Timedout"
    assert line["duration_ms"] >= WORKER_TIMEOUT * 1000
    wait_for("the timed-out process to be gone", lambda: not alive(line["pid"]), timeout=10)
    wait_for(
        "the pool back to full strength",
        lambda: (
            len((stack_info(state_dir) or {}).get("worker_pids") or []) == 2
            and line["pid"] not in stack_info(state_dir)["worker_pids"]
        ),
        timeout=30,
    )
    ok(api, "POST", f"/executions/{ex_id}/cancel")


def test_sweeper_tick_and_time_travel_wake_a_sleeping_execution(stack):
    # Last in this module: every later function call would see the clock two hours ahead.
    api, state_dir = stack["api"], stack["state_dir"]
    ex_id = start(api, "order_fulfillment", {"order_id": "o-1", "amount": 5})
    sleeping = wait_status(api, ex_id, "SLEEPING", timeout=60)
    assert sleeping["current_step_name"] == "sleep_1h"
    done = loom(state_dir, "time", "advance", "2h")
    assert done.returncode == 0, done.stderr
    assert "+2h" in done.stdout
    shown = loom(state_dir, "time", "show")
    assert "(7200s)" in shown.stdout
    # The sweeper ticks every second: the hour-long sleep ends in a few seconds of real time.
    ex = wait_status(api, ex_id, "COMPLETED", timeout=30)
    assert ex["updated_at_epoch"] - sleeping["updated_at_epoch"] >= 3600
    history = ok(api, "GET", f"/executions/{ex_id}/history")
    steps = history["steps"] if isinstance(history, dict) else history
    assert [s["name"] for s in steps][-2:] == ["ship_order", "notify_customer"]


def test_down_leaves_no_process(tmp_path):
    info = up(tmp_path)
    pids = all_pids(info)
    # supervisor, emulator, workers, sweeper (2: its scheduled runs may overlap), control plane
    assert len(pids) == 2 + 2 + 2 + 2
    down(tmp_path, info)
    assert not any(alive(pid) for pid in pids)
    assert loom(tmp_path, "down").returncode == 0  # a second down is harmless


def test_the_state_dir_is_owner_only_and_its_log_holds_no_secret(stack):
    state_dir = Path(stack["state_dir"])
    # The emulator saves its data every couple of seconds once a request changed it.
    wait_for("the emulator's saved state", lambda: (state_dir / "emulator-state.json").is_file(), timeout=30)
    assert state_dir.stat().st_mode & 0o777 == 0o700
    wider = []
    for path in state_dir.rglob("*"):
        mode = path.lstat().st_mode
        if path.is_file() and not path.is_symlink() and mode & 0o077:
            wider.append((str(path.relative_to(state_dir)), oct(mode & 0o777)))
    assert wider == [], f"files another local user can read: {wider[:10]}"
    for name in ("stack.json", "stack.log", "emulator-state.json", "clock_offset"):
        found = list(state_dir.glob(name + "*"))
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in found), name
    info = stack_info(state_dir)
    log = (state_dir / "stack.log").read_text(errors="replace")
    secrets = [info["control_plane_credentials"]["secret_access_key"]]
    if info.get("console_url"):
        secrets.append(info["console_url"].rpartition("token=")[2])
    if info.get("emulator_credentials"):
        secrets.append(info["emulator_credentials"]["secret_access_key"])
    assert all(s and s not in log for s in secrets), "a secret of the stack is in stack.log"
