"""The function pool: warm processes, Lambda's context, timeouts and crashes, replacement."""

from __future__ import annotations

import os
import signal
import time

import pytest

from loom.local.pool import FunctionPool

pytestmark = pytest.mark.e2e

H = "tests.e2e.fake_handlers"


def _pool(handler: str, *, timeout: float = 10, size: int = 1, env: dict[str, str] | None = None) -> FunctionPool:
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.getcwd(), **(env or {})}
    return FunctionPool(function="Fake", handler=f"{H}.{handler}", env=base, timeout=timeout, size=size).start()


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_warm_process_gets_event_context_and_env():
    pool = _pool("echo", timeout=7, env={"FAKE_SETTING": "from-template"})
    try:
        first = pool.invoke({"n": 1}, request_id="req-1")
        second = pool.invoke({"n": 2})
        assert first.outcome == second.outcome == "ok"
        assert first.result["event"] == {"n": 1}
        assert first.result["request_id"] == "req-1"
        assert first.result["function_name"] == "Fake"
        assert first.result["arn"].endswith(":function:Fake")
        assert 5000 < first.result["remaining_ms"] <= 7000
        assert first.result["env"] == "from-template"
        # Warm: the same process, the module imported once.
        assert first.result["pid"] == second.result["pid"] == first.pid
        assert first.result["pid"] != os.getpid()
        assert first.result["imported_at"] == second.result["imported_at"]
    finally:
        pool.stop()


def test_invocation_past_timeout_is_killed_and_replaced():
    pool = _pool("sleepy", timeout=1)
    try:
        old = pool.pids()
        t0 = time.monotonic()
        inv = pool.invoke({"seconds": 30})
        assert inv.outcome == "timeout"
        assert inv.error["errorType"] == "Sandbox.Timedout"
        assert time.monotonic() - t0 < 10
        assert _gone(old[0])
        assert pool.pids() and pool.pids() != old
        assert pool.invoke({"seconds": 0}).outcome == "ok"
    finally:
        pool.stop()


def test_os_exit_mid_invocation_is_a_crash_and_the_process_is_replaced():
    pool = _pool("dies")
    try:
        old = pool.pids()
        inv = pool.invoke({})
        assert inv.outcome == "crash"
        assert "status 3" in inv.error["errorMessage"]
        assert pool.pids() != old and len(pool.pids()) == 1
        assert pool.replaced == 1
    finally:
        pool.stop()


def test_handler_exception_is_an_error_and_the_process_stays_warm():
    pool = _pool("fails")
    try:
        before = pool.pids()
        inv = pool.invoke({})
        assert inv.outcome == "error"
        assert inv.error["errorType"] == "ValueError"
        assert "on purpose" in inv.error["errorMessage"]
        assert pool.pids() == before
    finally:
        pool.stop()


def test_unserializable_answer_is_an_error():
    pool = _pool("unserializable")
    try:
        assert pool.invoke({}).outcome == "error"
    finally:
        pool.stop()


def test_missing_handler_answers_every_invocation_with_the_import_error():
    pool = FunctionPool(
        function="Missing",
        handler="tests.e2e.no_such_module.handler",
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.getcwd()},
        timeout=5,
    ).start()
    try:
        inv = pool.invoke({})
        assert inv.outcome == "error"
        assert inv.error["errorType"] == "Runtime.ImportModuleError"
    finally:
        pool.stop()


def test_process_killed_while_idle_is_replaced():
    changes = []
    pool = FunctionPool(
        function="Fake",
        handler=f"{H}.echo",
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.getcwd()},
        timeout=5,
        size=2,
        on_change=lambda p: changes.append(p.pids()),
    ).start()
    try:
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (victim in pool.pids() or len(pool.pids()) != 2):
            time.sleep(0.05)
        assert victim not in pool.pids() and len(pool.pids()) == 2
        assert changes and victim not in changes[-1]
        assert pool.invoke({}).outcome == "ok"
    finally:
        pool.stop()


def test_stop_leaves_no_process():
    pool = _pool("echo", size=2)
    pids = pool.pids()
    pool.stop()
    assert all(_gone(pid) for pid in pids)
