"""The function pool: warm processes, Lambda's context, timeouts and crashes, replacement.

Every test runs twice: with processes forked from the function's template (Linux's default)
and with a fresh interpreter each (elsewhere): the pool promises the same in both.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import botocore
import pytest

from loom.local.lambdas import pool as pool_module
from loom.local.lambdas.package import FunctionPackage, build
from loom.local.lambdas.pool import FunctionPool
from tests.e2e.support import wait_taken

pytestmark = pytest.mark.e2e

H = "tests.e2e.fake_handlers"
ROOT = Path(__file__).resolve().parents[2]
BASE_ENV = {"PATH": os.environ.get("PATH", "")}

_packages: list[FunctionPackage] = []


@pytest.fixture(autouse=True, scope="module")
def _fake_package(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The fake handlers' own deployment package: tests/ (as a SOURCES entry) plus requirements.txt."""
    _packages[:] = [build(tmp_path_factory.mktemp("pool-package"), [str(ROOT / "tests")])]


@pytest.fixture(autouse=True, scope="module", params=[True, False], ids=["forked", "fresh"])
def forked(request: pytest.FixtureRequest) -> Iterator[bool]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool_module, "forks_by_default", lambda: request.param)
        yield request.param


def _built() -> FunctionPackage:
    return _packages[0]


def _pool(
    handler: str, *, timeout: float = 10, size: int = 1, env: dict[str, str] | None = None, memory: int = 128
) -> FunctionPool:
    return FunctionPool(
        function="Fake",
        handler=f"{H}.{handler}",
        env={**BASE_ENV, **(env or {})},
        timeout=timeout,
        size=size,
        memory=memory,
        package=_built(),
    ).start()


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
        function="Missing", handler="tests.e2e.no_such_module.handler", env=BASE_ENV, timeout=5, package=_built()
    ).start()
    try:
        inv = pool.invoke({})
        assert inv.outcome == "error"
        assert inv.error["errorType"] == "Runtime.ImportModuleError"
        assert inv.error["errorMessage"] == (
            "Unable to import module 'tests.e2e.no_such_module': No module named 'tests.e2e.no_such_module'"
        )
    finally:
        pool.stop()


def test_process_killed_while_idle_is_replaced():
    changes = []
    pool = FunctionPool(
        function="Fake",
        handler=f"{H}.echo",
        env=BASE_ENV,
        timeout=5,
        size=2,
        package=_built(),
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


# ---------------------------------------------------------------------- the deployment package, as in AWS


def test_function_sees_its_package_and_the_runtimes_boto3_only():
    pool = _pool("probe")
    try:
        wanted = ["moto", "yaml", "loom", "pytest", "boto3", "botocore", "s3transfer", "structlog", "tests.e2e"]
        inv = pool.invoke({"modules": wanted})
        assert inv.outcome == "ok", inv.error
        importable = inv.result["importable"]
        assert [m for m in ("moto", "yaml", "loom", "pytest") if importable[m]] == []
        assert all(importable[m] for m in ("boto3", "botocore", "s3transfer", "structlog", "tests.e2e"))
        package = _built()
        assert inv.result["cwd"] == inv.result["task_root"] == str(package.task_root)
        assert inv.result["sys_path"][:2] == [str(package.task_root), str(package.runtime_dir)]
        assert not any("site-packages" in p for p in inv.result["sys_path"])
        assert inv.result["site_builtins"]  # exit, quit, help: Lambda's interpreter runs site
    finally:
        pool.stop()


def test_a_stray_import_fails_every_invocation_as_aws_does():
    pool = FunctionPool(
        function="Stray", handler="tests.e2e.stray_import.handler", env=BASE_ENV, timeout=5, package=_built()
    ).start()
    try:
        for _ in range(2):
            inv = pool.invoke({"n": 1})
            assert inv.outcome == "error"
            assert inv.error["errorType"] == "Runtime.ImportModuleError"
            assert inv.error["errorMessage"] == (
                "Unable to import module 'tests.e2e.stray_import': No module named 'yaml'"
            )
            assert inv.error["stackTrace"] == []
    finally:
        pool.stop()


def test_task_root_runtime_and_stdlib_are_read_only_and_tmp_is_writable(tmp_path: Path):
    pool = _pool("writes")
    root = str(_built().task_root)
    here = f"{root}/tests/e2e/fake_handlers.py"
    probes = [
        Path(botocore.__file__).parent / "loom-read-only-probe.txt",
        Path(os.__file__).parent / "loom-read-only-probe.txt",
    ]
    try:
        inv = pool.invoke({"tmp": str(tmp_path)})
        assert inv.outcome == "ok", inv.error
        erofs = "OSError: [Errno 30] Read-only file system: "
        assert inv.result == {
            "runtime": f"{erofs}'{_built().runtime_dir}/botocore/loom-read-only-probe.txt'",
            "stdlib": f"{erofs}'{probes[1]}'",
            "create": f"{erofs}'{root}/new.txt'",
            "append": f"{erofs}'{here}'",
            "os_open": f"{erofs}'{root}/raw.txt'",
            "mkdir": f"{erofs}'{root}/newdir'",
            "remove": f"{erofs}'{here}'",
            "rename": f"{erofs}'{here}' -> '{root}/moved.py'",
            "tmp": None,
            "read": None,
        }
        assert (tmp_path / "ok.txt").exists()
        assert not [n for n in ("new.txt", "raw.txt", "newdir", "moved.py") if (Path(root) / n).exists()]
        assert Path(here).is_file()
        uncaught = pool.invoke({"tmp": str(tmp_path), "raise": True})
        assert uncaught.outcome == "error"
        assert uncaught.error["errorType"] == "OSError"
        assert uncaught.error["errorMessage"] == f"[Errno 30] Read-only file system: '{root}/uncaught.txt'"
    finally:
        pool.stop()
        for probe in probes:
            probe.unlink(missing_ok=True)


def test_invocation_past_memory_size_is_killed_as_out_of_memory():
    pool = _pool("hog", memory=128)
    try:
        assert pool.invoke({"mb": 8}).outcome == "ok"  # well under the limit: the process stays warm
        old = pool.pids()
        inv = pool.invoke({"mb": 200}, request_id="req-oom")
        assert inv.outcome == "oom"
        assert inv.error == {
            "errorType": "Runtime.OutOfMemory",
            "errorMessage": "RequestId: req-oom Error: Runtime exited with error: signal: killed",
        }
        assert _gone(old[0])
        assert pool.pids() and pool.pids() != old
        assert pool.invoke({"mb": 8}).outcome == "ok"  # a fresh process, a fresh peak
    finally:
        pool.stop()


def test_a_missing_handler_function_is_handler_not_found_as_aws_says():
    pool = FunctionPool(function="Nope", handler=f"{H}.nope", env=BASE_ENV, timeout=5, package=_built()).start()
    try:
        inv = pool.invoke({})
        assert inv.outcome == "error"
        assert inv.error["errorType"] == "Runtime.HandlerNotFound"
        assert inv.error["errorMessage"] == f"Handler 'nope' missing on module '{H}'"
    finally:
        pool.stop()


# ---------------------------------------------------------------------- forked from a template, or fresh


def _probe_each(pool: FunctionPool) -> list[dict[str, object]]:
    answers = [pool.invoke({}) for _ in range(pool.size)]  # idle processes are taken in turn
    assert all(a.outcome == "ok" for a in answers), [a.error for a in answers]
    return [a.result for a in answers]


def test_each_process_runs_its_own_init_whether_forked_or_fresh(forked: bool):
    pool = FunctionPool(
        function="Probe", handler="tests.e2e.fork_probe.handler", env=BASE_ENV, timeout=5, size=2, package=_built()
    ).start()
    try:
        first, second = _probe_each(pool)
        assert {first["pid"], second["pid"]} == set(pool.pids())
        # Forked: the template had imported boto3, and is both processes' parent; fresh: nothing
        # was imported before the handler, and the supervisor is the parent.
        assert first["preloaded"] is second["preloaded"] is forked
        if forked:
            assert first["ppid"] == second["ppid"] != os.getpid()
        else:
            assert first["ppid"] == second["ppid"] == os.getpid()
        assert first["drawn"][0] != second["drawn"][0] and first["drawn"][1] != second["drawn"][1]
        assert first["session"] == first["pid"] and second["session"] == second["pid"]  # no terminal's Ctrl-C
        assert first["stdin_is_pipe"] and second["stdin_is_pipe"]
        assert first["argv"][:2] == ["--handler", "tests.e2e.fork_probe.handler"]
    finally:
        pool.stop()


def test_a_process_killed_mid_invocation_is_reported_killed_by_its_signal():
    pool = _pool("sleepy", timeout=30)
    try:
        victim = pool.pids()[0]
        results: list = []
        call = threading.Thread(target=lambda: results.append(pool.invoke({"seconds": 20})))
        call.start()
        wait_taken(pool)
        os.kill(victim, signal.SIGKILL)
        call.join(timeout=20)
        (inv,) = results
        assert inv.outcome == "crash"
        assert inv.error == {"errorType": "Runtime.ExitError", "errorMessage": "function process killed by signal 9"}
        assert _gone(victim) and pool.pids() != [victim]
    finally:
        pool.stop()
