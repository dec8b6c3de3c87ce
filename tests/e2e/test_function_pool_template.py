"""The function's template (Linux): what happens to its processes when it dies or is retired.

What every pool promises, forked or not, is in test_function_pool.py; these are the template's own.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from loom.local.lambdas.package import FunctionPackage, build
from loom.local.lambdas.pool import FunctionPool
from tests.e2e.support import alive, wait_for, wait_taken

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform: the pool starts fresh processes"),
]

ROOT = Path(__file__).resolve().parents[2]
BASE_ENV = {"PATH": os.environ.get("PATH", "")}


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> FunctionPackage:
    return build(tmp_path_factory.mktemp("template-package"), [str(ROOT / "tests")])


def _pool(package: FunctionPackage, handler: str, size: int = 2) -> FunctionPool:
    return FunctionPool(
        function="Probe", handler=handler, env=BASE_ENV, timeout=30, size=size, package=package, fork=True
    ).start()


def _parents(pool: FunctionPool) -> dict[int, int]:
    answers = [pool.invoke({}) for _ in range(pool.size)]  # idle processes are taken in turn
    assert all(a.outcome == "ok" for a in answers), [a.error for a in answers]
    return {a.result["pid"]: a.result["ppid"] for a in answers}


def test_a_dead_template_takes_its_processes_with_it_and_the_pool_forks_from_a_new_one(package: FunctionPackage):
    pool = _pool(package, "tests.e2e.fork_probe.handler")
    try:
        before = _parents(pool)
        (template,) = set(before.values())
        assert template != os.getpid()
        os.kill(template, signal.SIGKILL)
        wait_for("the template's processes to die", lambda: not any(map(alive, before)), timeout=10, every=0.05)
        wait_for("two new processes", lambda: len(set(pool.pids()) - set(before)) == 2, timeout=20, every=0.05)
        after = _parents(pool)
        (new_template,) = set(after.values())
        assert new_template != template and set(after).isdisjoint(before)
        assert pool.replaced == 2
    finally:
        pool.stop()
    wait_for("the new template to exit with the pool", lambda: not alive(new_template), timeout=10, every=0.05)


def test_a_retired_template_outlives_its_busy_process_then_leaves(package: FunctionPackage):
    pool = _pool(package, "tests.e2e.fake_handlers.sleepy", size=1)
    try:
        (busy,) = pool.pids()
        template = int(Path(f"/proc/{busy}/stat").read_text().rsplit(")", 1)[1].split()[1])
        results: list = []
        call = threading.Thread(target=lambda: results.append(pool.invoke({"seconds": 1.5})))
        call.start()
        wait_taken(pool)
        pool.recycle()  # new code: the busy process finishes on the old one
        assert alive(template) and alive(busy)
        call.join(timeout=20)
        assert results and results[0].outcome == "ok"  # its template did not take it down
        assert pool.wait_recycled(timeout=20)
        wait_for("the retired template to leave", lambda: not alive(template), timeout=10, every=0.05)
        assert pool.invoke({"seconds": 0}).outcome == "ok"
    finally:
        pool.stop()
