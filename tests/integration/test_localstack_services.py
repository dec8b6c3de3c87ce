"""LocalStack's SERVICES list (compose.yaml) against what template.yaml's resources need, derived from them."""

from __future__ import annotations

import copy

import pytest
import yaml

from loom.local.emulator.aws_services import resource_services, template_services
from loom.template import ROOT, Template

pytestmark = pytest.mark.integration


def _compose_services() -> set[str]:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return set(compose["services"]["localstack"]["environment"]["SERVICES"].split(","))


def test_compose_serves_every_service_the_templates_resources_need() -> None:
    needed = template_services(Template().resources)
    missing = needed - _compose_services()
    # Before the fix: {'kms'}, and LocalStack answered CreateTable with 500 "Service 'kms' is not enabled".
    assert not missing, f"compose.yaml's SERVICES lacks {sorted(missing)}"


def test_the_needed_services_follow_the_resources_and_their_properties() -> None:
    tpl = Template()
    needed = template_services(tpl.resources)
    assert {"dynamodb", "sqs", "lambda", "iam", "logs", "events", "kms"} <= needed
    table = tpl.resources["Table"]
    assert "kms" in resource_services(table["Type"], table["Properties"]), "SSEEnabled: true encrypts with KMS"
    plain = copy.deepcopy(table["Properties"])
    plain["SSESpecification"] = {"SSEEnabled": False}
    assert resource_services(table["Type"], plain) == {"dynamodb"}
    without_sse = {k: v for k, v in copy.deepcopy(tpl.resources).items() if k != "Table"}
    assert "kms" not in template_services(without_sse)
    worker = tpl.resources["WorkerFunction"]
    assert {"lambda", "sqs", "logs"} <= resource_services(worker["Type"], worker["Properties"])
    assert "iam" not in resource_services(worker["Type"], worker["Properties"]), "it names its own Role"
    assert resource_services("Custom::Thing", {}) == set()
