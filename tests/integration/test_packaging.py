"""Building Loom's wheels warns about nothing (issue #25, friction 7): a first ``./scripts/bootstrap``
printed setuptools' "Editable installation" warning, because a flat layout with no ``package-dir``
makes the editable install a meta path finder. The build runs on a copy, so no build/ or
egg-info lands in the repo, with every warning an error."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "functions", "workflows", "loom", "chaos")

BUILD = """
import sys
from setuptools import build_meta
print(getattr(build_meta, sys.argv[1])(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def _build(project: Path, hook: str, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", BUILD, hook, str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def test_the_editable_wheel_builds_without_a_warning_and_points_at_the_repo(project: Path, tmp_path: Path) -> None:
    wheel = _build(project, "build_editable", tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        pth = [n for n in zf.namelist() if n.endswith(".pth")]
        assert len(pth) == 1, zf.namelist()
        assert zf.read(pth[0]).decode().strip() == str(project.resolve())


def test_the_wheel_builds_without_a_warning_and_carries_every_package_and_the_console_pages(
    project: Path, tmp_path: Path
) -> None:
    wheel = _build(project, "build_wheel", tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert {f"{p}/__init__.py" for p in PACKAGES} <= names
    assert "loom/console/static/app.js" in names and "loom/console/static/pages/execution.html" in names
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)
