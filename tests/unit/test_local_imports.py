"""The one-line advice `loom up` gives when a module does not import from the functions' package."""

from __future__ import annotations

from loom.local.imports import describe, modules_to_check

SOURCES = ("engine", "functions", "workflows")


def _report(module: str, missing: str | None, kind: str = "Runtime.ImportModuleError", msg: str = "") -> dict:
    return {"module": module, "missing": missing, "errorType": kind, "errorMessage": msg}


def test_modules_checked_are_the_handlers_and_loom_workflow_modules_as_settings_reads_them():
    assert modules_to_check("functions.worker.handler", {}) == ["functions.worker", "workflows"]
    env = {"LOOM_WORKFLOW_MODULES": " workflows, myapp.flows ,"}
    assert modules_to_check("functions.api.handler", env) == ["functions.api", "workflows", "myapp.flows"]


def test_a_module_whose_own_package_is_missing_is_told_to_join_sources():
    line = describe(
        "WorkerFunction",
        "functions.worker",
        _report("myapp.flows", "myapp", msg="Unable to import module 'myapp.flows': No module named 'myapp'"),
        SOURCES,
    )
    assert line.startswith("WorkerFunction cannot import workflow module 'myapp.flows' from its package: ")
    assert 'SOURCES="engine functions workflows /abs/path/to/myapp"' in line


def test_a_missing_third_party_package_is_told_to_join_requirements():
    line = describe("ControlPlaneFunction", "functions.api", _report("functions.api", "requests"), SOURCES)
    assert "handler module 'functions.api'" in line
    assert "'requests' to requirements.txt" in line


def test_any_other_import_time_error_is_one_line():
    report = _report("myapp.flows", None, kind="ValueError", msg="bad\nconfig\n  value")
    line = describe("SweeperFunction", "functions.sweeper", report, SOURCES)
    assert "\n" not in line
    assert "ValueError: bad config value; fix the error in myapp.flows" in line
