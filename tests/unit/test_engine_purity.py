"""The engine core is pure: no boto3/botocore and no environment variables outside engine/adapters/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ENGINE = Path(__file__).resolve().parents[2] / "engine"
CORE = sorted(p for p in ENGINE.rglob("*.py") if "adapters" not in p.relative_to(ENGINE).parts)
AWS_PACKAGES = {"boto3", "botocore", "aioboto3", "moto"}


def imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots |= {a.value.split(".")[0] for a in node.args[:1] if isinstance(a, ast.Constant)}
    return roots


def environment_reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "environb", "putenv"}:
            found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"line {node.lineno}: from os import {a.name}" for a in node.names]
        if isinstance(node, ast.Name) and node.id in {"environ", "getenv"}:
            found.append(f"line {node.lineno}: {node.id}")
    return found


def test_the_core_modules_were_found():
    names = {p.name for p in CORE}
    assert {"runtime.py", "transitions.py", "retry.py", "workflow.py", "batch.py"} <= names


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ENGINE)))
def test_core_module_imports_no_aws_sdk(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert not imported_roots(tree) & AWS_PACKAGES


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ENGINE)))
def test_core_module_reads_no_environment(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert environment_reads(tree) == []


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ENGINE)))
def test_only_the_clock_reads_the_time(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr in {"time", "monotonic", "now", "utcnow"}
        and isinstance(n.value, ast.Name)
        and n.value.id in {"time", "datetime"}
    ]
    if path.name != "clock.py":
        assert calls == [], f"{path.name} reads the wall clock at lines {calls}; take an injected Clock"


def test_the_checker_catches_what_it_claims_to():
    bad = ast.parse("import os\nimport boto3\nfrom botocore.exceptions import ClientError\nx = os.environ['A']\n")
    assert imported_roots(bad) >= {"boto3", "botocore"}
    assert environment_reads(bad) == ["line 4: .environ"]
