"""`loom up --reload` underneath: a pool recycles its processes for new code, and an
invocation already under way finishes on the code it started with."""

from __future__ import annotations

import os
import threading
import time

import pytest

from loom.local.lambdas.package import FunctionPackage
from loom.local.lambdas.pool import FunctionPool
from loom.local.stack import LocalStack, StackOptions
from tests.e2e.support import wait_taken

pytestmark = pytest.mark.e2e

H = "tests.e2e.fake_handlers"


@pytest.fixture(autouse=True)
def _package(fake_package: FunctionPackage) -> None:
    _packages[:] = [fake_package]


_packages: list[FunctionPackage] = []


def _pool(handler: str, size: int = 1) -> FunctionPool:
    env = {"PATH": os.environ.get("PATH", "")}
    return FunctionPool(
        function="Fake", handler=f"{H}.{handler}", env=env, timeout=30, size=size, package=_packages[0]
    ).start()


def test_recycle_replaces_idle_processes_with_ones_that_import_the_code_again():
    pool = _pool("echo", size=2)
    try:
        before = pool.invoke({})
        old_pids = set(pool.pids())
        pool.recycle()
        after = pool.invoke({})
        assert after.outcome == "ok"
        assert after.pid not in old_pids
        assert after.result["imported_at"] > before.result["imported_at"]  # the module was imported afresh
        assert not set(pool.pids()) & old_pids and len(pool.pids()) == 2
        assert pool.replaced == 0  # a reload is not a death
    finally:
        pool.stop()


def test_an_invocation_under_way_finishes_on_its_code_then_its_process_is_replaced():
    pool = _pool("sleepy")
    try:
        (old,) = pool.pids()
        results = []
        busy = threading.Thread(target=lambda: results.append(pool.invoke({"seconds": 1.5})))
        busy.start()
        wait_taken(pool)
        pool.recycle()
        busy.join(timeout=30)
        assert results and results[0].outcome == "ok" and results[0].pid == old
        nxt = pool.invoke({"seconds": 0})
        assert nxt.outcome == "ok" and nxt.pid != old
        assert pool.pids() == [nxt.pid]
    finally:
        pool.stop()


def test_deploy_env_gives_every_function_the_variables_in_fresh_processes(tmp_path):
    # The chaos kit's redeploy: a configuration change reaches every function, on new processes only.
    stack = LocalStack(StackOptions(state_dir=tmp_path))
    stack.pools = {name: _pool("env_of") for name in ("Worker", "Sweeper")}
    stack._envs = {name: dict(pool.env) for name, pool in stack.pools.items()}
    try:
        before = {name: pool.invoke({"name": "LOOM_X"}).result for name, pool in stack.pools.items()}
        assert stack.deploy_env({"LOOM_X": "2"}) == {"LOOM_X": None}
        after = {name: pool.invoke({"name": "LOOM_X"}).result for name, pool in stack.pools.items()}
        assert {r["value"] for r in before.values()} == {None} and {r["value"] for r in after.values()} == {"2"}
        assert all(after[name]["pid"] != before[name]["pid"] for name in stack.pools)
        assert stack.function_env("Sweeper")["LOOM_X"] == "2"
        assert stack.deploy_env({"LOOM_X": "1,2"}) == {"LOOM_X": "2"}
    finally:
        for pool in stack.pools.values():
            pool.stop()


def test_deploy_env_returns_only_when_an_invocation_under_way_has_ended(tmp_path):
    stack = LocalStack(StackOptions(state_dir=tmp_path))
    pool = _pool("sleepy")
    stack.pools, stack._envs = {"Worker": pool}, {"Worker": dict(pool.env)}
    try:
        (old,) = pool.pids()
        results = []
        began = time.monotonic()
        busy = threading.Thread(target=lambda: results.append(pool.invoke({"seconds": 1.5})))
        busy.start()
        wait_taken(pool)
        stack.deploy_env({"LOOM_X": "2"})
        assert time.monotonic() - began >= 1.5, "the deploy returned while the old code still ran"
        assert old not in pool.pids()
        busy.join(timeout=30)
        assert results and results[0].outcome == "ok" and results[0].pid == old
    finally:
        pool.stop()
