"""The one-line advice `loom up` gives when a module does not import from the functions' package."""

from __future__ import annotations

from loom.local.lambdas.imports import FunctionImports, describe, group_checks, modules_of

SOURCES = ("engine", "functions", "workflows")


def _report(module: str, missing: str | None, kind: str = "Runtime.ImportModuleError", msg: str = "") -> dict:
    return {"module": module, "missing": missing, "errorType": kind, "errorMessage": msg}


def test_the_template_s_functions_share_one_check_of_their_handlers_and_workflow_modules():
    shared = {"LOOM_WORKFLOW_MODULES": " workflows, myapp.flows ,"}
    functions = [
        FunctionImports("WorkerFunction", "functions.worker.handler", shared),
        FunctionImports("SweeperFunction", "functions.sweeper.handler", shared),
        FunctionImports("Other", "functions.api.handler", {}),
    ]
    groups = group_checks(functions)
    assert [[fn.logical_id for fn in g] for g in groups] == [["WorkerFunction", "SweeperFunction"], ["Other"]]
    assert modules_of(groups[0]) == ["functions.worker", "functions.sweeper", "workflows", "myapp.flows"]
    assert modules_of(groups[1]) == ["functions.api", "workflows"]  # the default, as functions/settings.py


def test_a_module_whose_own_package_is_missing_is_told_to_join_sources():
    line = describe(
        "WorkerFunction",
        "functions.worker",
        _report("myapp.flows", "myapp", msg="Unable to import module 'myapp.flows': No module named 'myapp'"),
        SOURCES,
    )
    assert line.startswith("WorkerFunction cannot import workflow module 'myapp.flows' from its package: ")
    assert 'SOURCES="engine functions workflows /abs/path/to/myapp"' in line


def test_a_misspelt_module_of_a_package_in_sources_is_told_apart_from_a_missing_package(tmp_path):
    app = tmp_path / "dxapp"
    (app / "sub").mkdir(parents=True)
    for name in ("__init__.py", "flows.py", "models.py", "sub/__init__.py"):
        (app / name).write_text("")
    sources = (*SOURCES, str(app))
    report = _report("dxapp.flow", "dxapp.flow", msg="No module named 'dxapp.flow'")
    line = describe("WorkerFunction", "functions.worker", report, sources)
    assert f"the package 'dxapp' is in SOURCES ({app}) but has no module 'flow'" in line
    assert "(it has: flows, models, sub); did you mean dxapp.flows?" in line
    assert "LOOM_WORKFLOW_MODULES" in line and "add the directory" not in line, "SOURCES is right: the name is not"
    missing_package = _report("dxapp.flows", "dxapp", msg="No module named 'dxapp'")
    assert "add the directory of dxapp to SOURCES" in describe(
        "WorkerFunction", "functions.worker", missing_package, SOURCES
    )


def test_a_missing_third_party_package_is_told_to_join_requirements():
    line = describe("ControlPlaneFunction", "functions.api", _report("functions.api", "requests"), SOURCES)
    assert "handler module 'functions.api'" in line
    assert "'requests' to requirements.txt" in line


def test_any_other_import_time_error_is_one_line():
    report = _report("myapp.flows", None, kind="ValueError", msg="bad\nconfig\n  value")
    line = describe("SweeperFunction", "functions.sweeper", report, SOURCES)
    assert "\n" not in line
    assert "ValueError: bad config value; fix the error in myapp.flows" in line
