"""Before the stack says it is up: every handler and workflow module imports from the package.

A workflow module is imported by the functions at their first invocation, so a
module that is not in the package would otherwise surface as an internal error
on every call. The check runs the local bootstrap in the function's own
package and environment (as the Lambda would import them) and turns the first
failure into one line naming the module and the fix.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

from loom.local.package import FunctionPackage, PackageError
from loom.local.pool import package_env, runtime_command
from loom.local.runtime import CHECK_MARKER

CHECK_TIMEOUT = 120.0


class ImportCheckFailed(PackageError):
    """A handler or workflow module does not import from the functions' package."""


def modules_to_check(handler: str, env: Mapping[str, str]) -> list[str]:
    """The handler's module, then LOOM_WORKFLOW_MODULES as functions/settings.py reads it."""
    workflows = [m.strip() for m in env.get("LOOM_WORKFLOW_MODULES", "workflows").split(",") if m.strip()]
    return [handler.rpartition(".")[0], *workflows]


def fix_for(report: Mapping[str, Any], sources: tuple[str, ...]) -> str:
    """The advice for a failed import: which list the missing code belongs in."""
    module = str(report.get("module") or "")
    missing = report.get("missing")
    listed = " ".join(sources)
    if report.get("errorType") != "Runtime.ImportModuleError":
        return f"fix the error in {module} (run `python -c 'import {module}'` to see it)"
    if missing and module.split(".")[0] == str(missing).split(".")[0]:
        return (
            f'add the directory of {missing} to SOURCES, e.g. SOURCES="{listed} /abs/path/to/{missing}" '
            "(the Makefile packages the same list for sam build)"
        )
    return (
        f"add the distribution that provides {missing!r} to requirements.txt, or its directory to SOURCES "
        f"(now: {listed}); the deployed function would fail the same way"
    )


def describe(logical_id: str, handler_module: str, report: Mapping[str, Any], sources: tuple[str, ...]) -> str:
    module = report.get("module")
    what = "handler module" if module == handler_module else "workflow module"
    message = " ".join(str(report.get("errorMessage")).split())  # one line, whatever the exception said
    return (
        f"{logical_id} cannot import {what} {module!r} from its package: "
        f"{report.get('errorType')}: {message}; {fix_for(report, sources)}"
    )


def check_function_imports(package: FunctionPackage, logical_id: str, handler: str, env: Mapping[str, str]) -> None:
    modules = modules_to_check(handler, env)
    try:
        proc = subprocess.run(
            runtime_command(package, "--check-imports", ",".join(modules)),
            env=package_env(env, package),
            cwd=str(package.task_root),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImportCheckFailed(
            f"{logical_id}: importing {', '.join(modules)} took over {CHECK_TIMEOUT:.0f}s; "
            "a module does work at import time that it should do in a step"
        ) from exc
    reports = [line[len(CHECK_MARKER) :] for line in proc.stdout.splitlines() if line.startswith(CHECK_MARKER)]
    if not reports:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImportCheckFailed(f"{logical_id}: the import check exited with status {proc.returncode}: {last}")
    report = json.loads(reports[-1])
    if report.get("module") is not None:
        raise ImportCheckFailed(describe(logical_id, modules[0], report, package.sources))
