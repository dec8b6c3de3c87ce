"""The functions' deployment package: SOURCES as the Makefile has it, your own workflow module, the import check."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loom.local.emulator.client import LocalApi, ok
from loom.local.lambdas.package import PackageError, build, configured_sources, makefile_sources, resolve_sources
from tests.e2e.support import ROOT, alive, all_pids, loom, stack_info, start, wait_for, wait_status

pytestmark = pytest.mark.e2e

FLOWS = """
from engine import StepContext, workflow


def greet(ctx: StepContext) -> dict:
    return {"greeting": "hello " + ctx.data["name"]}


@workflow("myapp_hello")
class Hello:
    steps = [greet]
"""


def _no_sources_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SOURCES"}


# ---------------------------------------------------------------------- SOURCES and the build


def test_default_sources_are_the_makefiles_and_sources_overrides_them():
    text = (ROOT / "Makefile").read_text()
    assert f"SOURCES ?= {' '.join(makefile_sources())}" in text
    assert "cp -R $(SOURCES)" in text  # the recipe `sam build` runs copies exactly this list
    assert configured_sources({}) == makefile_sources() == ("engine", "functions", "workflows")
    assert configured_sources({"SOURCES": "engine functions  workflows /x/myapp"})[-1] == "/x/myapp"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("sources", [None, "engine functions workflows /abs/myapp"])
def test_make_packages_the_same_sources_as_loom_up(sources: str | None, tmp_path: Path):
    env = _no_sources_env() if sources is None else {**_no_sources_env(), "SOURCES": sources}
    dry = subprocess.run(
        ["make", "-n", "build-WorkerFunction", f"ARTIFACTS_DIR={tmp_path}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    copy = next(line for line in dry.stdout.splitlines() if line.startswith("cp -R "))
    assert copy == f'cp -R {" ".join(configured_sources(env))} "{tmp_path}/"'


def test_a_source_that_does_not_exist_is_named(tmp_path: Path):
    with pytest.raises(PackageError, match=r"SOURCES names 'myapp'.*absolute path"):
        resolve_sources(["engine", "myapp"])
    (tmp_path / "engine").mkdir()
    with pytest.raises(PackageError, match="would both be engine/"):
        resolve_sources(["engine", str(tmp_path / "engine")])


def test_a_requirement_missing_from_this_environment_is_named(tmp_path: Path):
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("structlog>=24.1\nno-such-distribution-xyz==1.0  # comment\n")
    with pytest.raises(PackageError, match=r"needs no-such-distribution-xyz==1\.0, which is not installed"):
        build(tmp_path / "state", ["engine"], requirements=reqs)


def test_the_build_holds_sources_and_requirements_and_is_cached_by_content(tmp_path: Path):
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "flows.py").write_text(FLOWS)
    (app / "__pycache__").mkdir()
    (app / "__pycache__" / "flows.cpython-312.pyc").write_bytes(b"stale")
    sources = [*makefile_sources(), str(app)]
    first = build(tmp_path / "state", sources)
    names = sorted(p.name for p in first.task_root.iterdir())
    assert [n for n in names if not n.startswith("structlog")] == ["engine", "functions", "myapp", "workflows"]
    assert (first.task_root / "structlog" / "__init__.py").is_file()
    compiled = first.task_root / "myapp" / "__pycache__" / f"flows.{sys.implementation.cache_tag}.pyc"
    assert compiled.read_bytes() != b"stale", "the source tree's bytecode was copied"
    assert not any((first.task_root / n).exists() for n in ("loom", "tests", "chaos", ".venv", "template.yaml"))
    _assert_compiled_for_this_interpreter(first.task_root)
    stamp = (first.task_root / "myapp" / "flows.py").stat().st_mtime_ns
    again = build(tmp_path / "state", sources)
    assert again == first and (again.task_root / "myapp" / "flows.py").stat().st_mtime_ns == stamp
    (app / "flows.py").write_text(FLOWS + "\n# edited\n")
    edited = build(tmp_path / "state", sources)
    assert edited.task_root != first.task_root and not first.task_root.exists()
    assert (edited.task_root / "myapp" / "flows.py").read_text().endswith("# edited\n")
    assert edited.runtime_dir == first.runtime_dir


def _assert_compiled_for_this_interpreter(root: Path) -> None:
    """Every module has bytecode the functions' interpreter takes as is (its magic number, the
    copied source's mtime and size: a function process then loads it instead of compiling),
    owner-only like the rest of the state dir."""
    sources = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(sources) > 50
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        header = cached.read_bytes()[:16]
        assert header[:4] == importlib.util.MAGIC_NUMBER, cached
        stat = source.stat()
        assert int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF, cached
        assert int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF, cached
        assert cached.stat().st_mode & 0o777 == 0o600 and cached.parent.stat().st_mode & 0o777 == 0o700


# ---------------------------------------------------------------------- your own workflow module, outside the repo


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project outside the repository: myapp/flows.py and nothing else."""
    proj = tmp_path / "proj"
    (proj / "myapp").mkdir(parents=True)
    (proj / "myapp" / "__init__.py").write_text("")
    (proj / "myapp" / "flows.py").write_text(FLOWS)
    return proj


def test_up_refuses_a_workflow_module_outside_the_package_in_one_line(project: Path):
    state = project / ".loom"
    done = loom(
        state,
        "up",
        "--port",
        "0",
        "--api-port",
        "0",
        "--parameter",
        "WorkflowModules=workflows,myapp.flows",
        cwd=project,
        env=_no_sources_env(),
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("loom: error:")]
    assert len(errors) == 1, done.stderr
    assert "workflow module 'myapp.flows'" in errors[0]
    assert "Runtime.ImportModuleError: Unable to import module 'myapp.flows': No module named 'myapp'" in errors[0]
    assert 'SOURCES="engine functions workflows /abs/path/to/myapp"' in errors[0]
    assert stack_info(state) is None


def test_up_refuses_a_stray_import_in_the_functions(tmp_path: Path):
    functions = tmp_path / "functions"
    shutil.copytree(ROOT / "functions", functions, ignore=shutil.ignore_patterns("__pycache__"))
    with open(functions / "worker.py", "a") as fh:
        fh.write("\nimport yaml  # a stray import: in the dev venv, not in the package\n")
    done = loom(
        tmp_path / ".loom",
        "up",
        "--detach",  # the background supervisor's one line reaches the caller too
        "--port",
        "0",
        "--api-port",
        "0",
        env={**_no_sources_env(), "SOURCES": f"engine {functions} workflows"},
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("loom: error:")]
    assert len(errors) == 1, done.stderr
    assert "WorkerFunction cannot import handler module 'functions.worker'" in errors[0]
    assert "No module named 'yaml'" in errors[0] and "requirements.txt" in errors[0]


def test_a_workflow_module_outside_the_repository_runs_when_sources_lists_it(project: Path):
    state = project / ".loom"
    env = {**_no_sources_env(), "SOURCES": f"engine functions workflows {project / 'myapp'}"}
    done = loom(
        state,
        "up",
        "-d",
        "--port",
        "0",
        "--api-port",
        "0",
        "--parameter",
        "WorkflowModules=workflows,myapp.flows",
        cwd=project,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    info = stack_info(state)
    assert info is not None
    try:
        assert info["package"]["sources"][-1] == str(project / "myapp")
        assert "function package (SOURCES):  engine functions workflows" in done.stderr
        ex_id = start(LocalApi.from_info(info), "myapp_hello", {"name": "loom"})
        wait_status(LocalApi.from_info(info), ex_id, "COMPLETED")
        history = ok(LocalApi.from_info(info), "GET", f"/executions/{ex_id}/history")
        steps = history["steps"] if isinstance(history, dict) else history
        assert [(s["name"], s["result"]) for s in steps] == [("greet", {"greeting": "hello loom"})]
    finally:
        pids = all_pids(stack_info(state) or info)
        assert loom(state, "down", cwd=project).returncode == 0
        wait_for("the stack to exit", lambda: not any(alive(p) for p in pids), timeout=30)
