"""The local loop keeps your work: one stack's life as a user lives it, through `loom up -d`.

Restart (even after `kill -9` of the supervisor) keeps the executions; `--reload` swaps the
function processes when the code changes; the clock refuses absurd moves and a reset
leaves the stack answering; `--fresh` starts empty.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loom.local import procs
from loom.local.emulator.client import LocalApi, call
from tests.e2e.support import loom, stack_info, start, status_of, wait_for, wait_status

pytestmark = [pytest.mark.e2e]


def _up(state_dir: Path, *extra: str) -> tuple[dict[str, Any], str]:
    done = loom(
        state_dir,
        "up",
        "-d",
        "--port",
        "0",
        "--api-port",
        "0",
        "--tick",
        "1",
        "--visibility-timeout",
        "5",
        "--workers",
        "1",
        *extra,
    )
    assert done.returncode == 0, done.stderr
    info = stack_info(state_dir)
    assert info is not None
    return info, done.stderr


def _function_pids(info: dict[str, Any]) -> set[int]:
    return {pid for group in info["function_pids"].values() for pid in group}


def _reaped_after_stamping(state_dir: Path, execution_id: str) -> bool:
    lines = (state_dir / "stack.log").read_text().splitlines()
    stamped = [i for i, line in enumerate(lines) if "retention.stamped" in line and execution_id in line]
    return bool(stamped) and any("ttl.deleted" in line for line in lines[stamped[-1] + 1 :])


def _down(state_dir: Path) -> None:
    done = loom(state_dir, "down")
    assert done.returncode == 0, done.stderr
    assert "stopping the stack" in done.stderr  # progress while it waits


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    loom(path, "down")  # whatever failed above, no stack outlives its test


def test_restart_reload_and_kill_keep_the_work(tmp_path, state):
    code = tmp_path / "code"
    code.mkdir()
    (code / "mine.py").write_text("VERSION = 1\n")
    info, said = _up(state, "--reload", "--watch", str(code))
    assert "starting the stack in the background" in said  # progress while it waits
    api = LocalApi.from_info(info)
    ex_id = start(api, "order_fulfillment", {"order_id": "o-1", "amount": 5})
    assert wait_status(api, ex_id, "SLEEPING")["current_step_name"] == "sleep_1h"

    # --reload: new code, every function process replaced; the sleeping execution carries on.
    old = _function_pids(info)
    (code / "mine.py").write_text("VERSION = 2\n")

    def reloaded() -> dict[str, Any] | None:
        now = stack_info(state) or {}
        pids = _function_pids(now) if now.get("function_pids") else set()
        return now if len(pids) == len(old) and not pids & old else None

    info = wait_for("--reload to replace every function process", reloaded, timeout=60)
    assert status_of(api, ex_id)["status"] == "SLEEPING"

    # kill -9 of the supervisor: its children go too, and the data was saved on the way out.
    recorded = info["processes"]
    os.kill(info["supervisor_pid"], signal.SIGKILL)
    wait_for("every process of the killed stack to exit", lambda: not procs.owned(recorded), timeout=30)
    dead = loom(state, "status", ex_id)
    assert dead.returncode == 1
    assert f"the stack at {api.url} is not running (it died at " in dead.stderr

    # The next `loom up` clears what is left and finds the execution where it was.
    info, said = _up(state)
    assert "is not running (it died at" in said
    assert "state.restored" in (state / "stack.log").read_text()
    api = LocalApi.from_info(info)
    assert status_of(api, ex_id)["status"] == "SLEEPING"
    advanced = loom(state, "time", "advance", "2h")
    assert advanced.returncode == 0, advanced.stderr
    assert wait_status(api, ex_id, "COMPLETED", timeout=60)["current_step"] == 5

    # The clock: an absurd move is refused; the furthest allowed one, then a reset, leaves the stack answering.
    absurd = loom(state, "time", "advance", "99999999999d")
    assert absurd.returncode == 2 and "too far" in absurd.stderr
    assert loom(state, "time", "advance", "3640d").returncode == 0
    # Ten years on, the first execution's 30 days of retention are long past: the readers hide
    # it at once, and the kit's TTL (loom/ttl.py), which runs after every clock jump, deletes it.
    gone = loom(state, "status", ex_id)
    assert gone.returncode != 0 and "no execution" in gone.stderr, gone.stderr
    # Deleted by a look after the sweep the jump fired has stamped its records (a look before
    # it may have found only what had expired already): then the reset cannot bring it back.
    wait_for("the kit's TTL to delete it", lambda: _reaped_after_stamping(state, ex_id), timeout=30)
    future = start(api, "pipeline", {"n": 1})
    wait_status(api, future, "COMPLETED", timeout=60)
    assert loom(state, "time", "reset").returncode == 0
    listed = loom(state, "list", "--status", "completed")
    assert listed.returncode == 0, listed.stderr
    assert ex_id not in listed.stdout and future in listed.stdout
    assert loom(state, "status", future).returncode == 0
    _down(state)

    # A clean `loom down` and `loom up` keep what is left too (the snapshot has no deleted item).
    info, _ = _up(state)
    assert status_of(LocalApi.from_info(info), future)["status"] == "COMPLETED"
    _down(state)

    # --fresh forgets it all.
    info, _ = _up(state, "--fresh")
    try:
        code_, _body = call(LocalApi.from_info(info), "GET", f"/executions/{ex_id}")
        assert code_ == 404
    finally:
        _down(state)
