"""Before the stack says it is up: every handler and workflow module imports from the package.

A workflow module is imported by the functions at their first invocation, so a
module that is not in the package would otherwise surface as an internal error
on every call. The check runs the local bootstrap in the function's own
package and environment (as the Lambda would import them) and turns the first
failure into one line naming the module and the fix.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loom.local.lambdas.package import FunctionPackage, PackageError
from loom.local.lambdas.pool import package_env, runtime_command
from loom.local.lambdas.runtime import CHECK_MARKER

CHECK_TIMEOUT = 120.0


class ImportCheckFailed(PackageError):
    """A handler or workflow module does not import from the functions' package."""


@dataclass(frozen=True)
class FunctionImports:
    """One function's import check: its handler, in its environment."""

    logical_id: str
    handler: str
    env: Mapping[str, str]

    @property
    def handler_module(self) -> str:
        return self.handler.rpartition(".")[0]

    @property
    def workflow_modules(self) -> tuple[str, ...]:
        """LOOM_WORKFLOW_MODULES as functions/settings.py reads it."""
        raw = self.env.get("LOOM_WORKFLOW_MODULES", "workflows")
        return tuple(m.strip() for m in raw.split(",") if m.strip())


def group_checks(functions: Sequence[FunctionImports]) -> list[list[FunctionImports]]:
    """Functions that load the same workflow modules share one check process (the template's
    three do: WorkflowModules is a Global), so `loom up` pays for one interpreter, not three."""
    groups: dict[tuple[str, ...], list[FunctionImports]] = {}
    for fn in functions:
        groups.setdefault(fn.workflow_modules, []).append(fn)
    return list(groups.values())


def modules_of(group: Sequence[FunctionImports]) -> list[str]:
    """Every handler's module, then the shared workflow modules, each once."""
    ordered = [fn.handler_module for fn in group] + list(group[0].workflow_modules)
    return list(dict.fromkeys(ordered))


def fix_for(report: Mapping[str, Any], sources: tuple[str, ...]) -> str:
    """The advice for a failed import: which list the missing code belongs in."""
    module = str(report.get("module") or "")
    missing = report.get("missing")
    listed = " ".join(sources)
    if report.get("errorType") != "Runtime.ImportModuleError":
        return f"fix the error in {module} (run `python -c 'import {module}'` to see it)"
    if missing and module.split(".")[0] == str(missing).split(".")[0]:
        found = package_dir(str(missing), sources)
        if found is not None:
            return misspelt(str(missing), found)
        return (
            f'add the directory of {missing} to SOURCES, e.g. SOURCES="{listed} /abs/path/to/{missing}" '
            "(the Makefile packages the same list for sam build)"
        )
    return (
        f"add the distribution that provides {missing!r} to requirements.txt, or its directory to SOURCES "
        f"(now: {listed}); the deployed function would fail the same way"
    )


def package_dir(missing: str, sources: Sequence[str]) -> Path | None:
    """The directory in SOURCES of ``missing``'s package, when the package is there and only the
    module is not (``dxapp.flow`` for ``dxapp.flows``): then SOURCES is right and the name wrong."""
    parts = missing.split(".")
    if len(parts) < 2:
        return None
    for src in sources:
        root = Path(src)
        if root.name == parts[0] and root.is_dir():
            inner = root.joinpath(*parts[1:-1])
            return inner if inner.is_dir() else None
    return None


def misspelt(missing: str, directory: Path) -> str:
    package, leaf = missing.rsplit(".", 1)
    here = sorted(
        {f.stem for f in directory.glob("*.py") if f.stem != "__init__"}
        | {d.name for d in directory.iterdir() if d.is_dir() and (d / "__init__.py").exists()}
    )
    close = difflib.get_close_matches(leaf, here, n=1)
    guess = f"; did you mean {package}.{close[0]}?" if close else ""
    return (
        f"the package {package!r} is in SOURCES ({directory}) but has no module {leaf!r} (it has: "
        f"{', '.join(here) or 'no modules'}){guess} Check the name in LOOM_WORKFLOW_MODULES "
        "(the WorkflowModules parameter)"
    )


def describe(logical_id: str, handler_module: str, report: Mapping[str, Any], sources: tuple[str, ...]) -> str:
    module = report.get("module")
    what = "handler module" if module == handler_module else "workflow module"
    message = " ".join(str(report.get("errorMessage")).split())  # one line, whatever the exception said
    return (
        f"{logical_id} cannot import {what} {module!r} from its package: "
        f"{report.get('errorType')}: {message}; {fix_for(report, sources)}"
    )


def check_group(package: FunctionPackage, group: Sequence[FunctionImports]) -> None:
    """Import the group's modules in the package, as its functions would; raise on the first failure."""
    modules = modules_of(group)
    first = group[0]
    try:
        proc = subprocess.run(
            runtime_command(package, "--check-imports", ",".join(modules)),
            env=package_env(first.env, package),
            cwd=str(package.task_root),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImportCheckFailed(
            f"{first.logical_id}: importing {', '.join(modules)} took over {CHECK_TIMEOUT:.0f}s; "
            "a module does work at import time that it should do in a step"
        ) from exc
    reports = [line[len(CHECK_MARKER) :] for line in proc.stdout.splitlines() if line.startswith(CHECK_MARKER)]
    if not reports:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImportCheckFailed(f"{first.logical_id}: the import check exited with status {proc.returncode}: {last}")
    report = json.loads(reports[-1])
    if report.get("module") is not None:
        culprit = next((fn for fn in group if fn.handler_module == report["module"]), first)
        raise ImportCheckFailed(describe(culprit.logical_id, culprit.handler_module, report, package.sources))
