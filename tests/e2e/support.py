"""Drive a local stack the way a user does: `loom up --detach`, HTTP, `loom down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loom.local.emulator.client import LocalApi, call, ok
from tests.logs import json_lines

LOOM = [sys.executable, "-m", "loom"]
ROOT = Path(__file__).resolve().parents[2]


def loom(
    state_dir: Path,
    *args: str,
    timeout: float = 180,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOM_STATE_DIR": str(state_dir), **(env or {})}
    return subprocess.run([*LOOM, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def stack_info(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / "stack.json").read_text())
    except FileNotFoundError:
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def wait_taken(pool: Any) -> None:
    """Until the pool's only idle process has been taken by an invocation (a thread's, under way)."""
    wait_for("an invocation to take the pool's process", pool._idle.empty, timeout=15, every=0.01)


def all_pids(info: dict[str, Any]) -> list[int]:
    pids = [info["supervisor_pid"], info["emulator_pid"]]
    for group in info["function_pids"].values():
        pids.extend(group)
    return pids


def start(api: LocalApi, workflow: str, data: dict[str, Any]) -> str:
    status, body = call(api, "POST", "/executions", {"workflow": workflow, "input": data})
    assert status == 201, body
    return body["id"]


def status_of(api: LocalApi, ex_id: str) -> dict[str, Any]:
    return ok(api, "GET", f"/executions/{ex_id}")


def wait_status(api: LocalApi, ex_id: str, wanted: str, timeout: float = 60.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        ex = status_of(api, ex_id)
        if ex["status"] in ("COMPLETED", "FAILED", "CANCELLED") and ex["status"] != wanted:
            raise AssertionError(f"{ex_id} ended {ex['status']}, wanted {wanted}: {ex.get('error')}")
        return ex if ex["status"] == wanted else None

    return wait_for(f"{ex_id} to be {wanted}", check, timeout)


def log_lines(state_dir: Path) -> list[dict[str, Any]]:
    return json_lines((state_dir / "stack.log").read_text(errors="replace"))
