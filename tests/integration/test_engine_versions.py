"""Issue #24 against moto: a deploy that changes a workflow blocks its in-flight executions
(through the real handlers and DynamoDB), the API shows it, and migrate moves them on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import Registry, workflow
from engine.state import Status
from functions import wiring
from loom.testing import WorkflowTest
from tests.integration.api_support import Functions

pytestmark = pytest.mark.integration

RAN: list[str] = []


def steps(*names: str) -> list[Any]:
    def make(name: str) -> Any:
        def fn(ctx: Any) -> dict[str, Any]:
            RAN.append(name)
            return {name: True}

        fn.__name__ = name
        return fn

    return [make(n) for n in names]


def versions(*shapes: tuple[str, ...]) -> Registry:
    reg = Registry()
    for i, names in enumerate(shapes, start=1):
        workflow("shop", registry=reg, version=i)(type("Shop", (), {"steps": steps(*names)}))
    return reg


def deploy(fn: Functions, monkeypatch: pytest.MonkeyPatch, reg: Registry) -> None:
    """A deploy: new function processes with these workflows (the wiring builds its engine anew)."""
    wiring.reset()
    monkeypatch.setattr(wiring, "default_registry", reg)


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    RAN.clear()
    yield


def test_a_deploy_blocks_the_queued_execution_and_the_api_shows_it_and_migrate_moves_it(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(fn, monkeypatch, versions(("reserve", "charge")))
    status, body = fn.api("POST", "/executions", {"workflow": "shop", "input": {}, "execution_id": "v-1"})
    assert status == 201 and body["workflow_version"] == 1 and len(body["fingerprint"]) == 64
    # Version 1 replaced by a version 2 that checks fraud first, before the worker took the message.
    v2_only = Registry()
    workflow("shop", registry=v2_only, version=2)(
        type("Shop", (), {"steps": steps("fraud_check", "reserve", "charge")})
    )
    deploy(fn, monkeypatch, v2_only)
    fn.drain()
    assert RAN == [], "no step of either shape ran at index 0"
    status, body = fn.api("GET", "/executions/v-1")
    assert status == 200 and body["status"] == "BLOCKED" and body["blocked"]["reason"] == "definition_changed"
    assert body["state"]["kind"] == "blocked" and body.get("current_step_name") is None
    status, listed = fn.api("GET", "/workflows")
    (shop,) = [w for w in listed["workflows"] if w["name"] == "shop"]
    assert [(v["version"], v["registered"], v["open"]) for v in shop["versions"]] == [(2, True, 0), (1, False, 1)]

    status, refused = fn.api("POST", "/executions/v-1/migrate", {"map": {"reserve": "nope"}, "at": "reserve"})
    assert status == 400 and refused["error"]["code"] == "invalid_input"
    status, moved = fn.api("POST", "/executions/v-1/migrate", {"map": {}, "at": "reserve"})
    assert status == 200 and moved["status"] == "RUNNING" and moved["current_step_name"] == "reserve"
    fn.drain()
    status, done = fn.api("GET", "/executions/v-1")
    assert done["status"] == "COMPLETED" and RAN == ["reserve", "charge"], "fraud_check, before reserve, is skipped"
    status, again = fn.api("POST", "/executions/v-1/migrate", {"map": {}})
    assert status == 409 and again["error"]["code"] == "not_blocked"


def test_on_dynamodb_a_blocked_execution_resumes_when_its_version_is_deployed_again() -> None:
    old, new = ("reserve", "charge", "ship"), ("reserve", "ship")
    with WorkflowTest(backend="moto") as test:
        test.deploy(versions(old))
        eid = test.start("shop")
        test.deploy(versions(new))  # version 1 is now a removed step shorter
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.BLOCKED and RAN == []
        assert test.store.get_execution(eid) == ex, "fingerprint, version and blocked survive the round trip"
        assert test.advance(test.config.blocked_recheck_seconds).blocked == 1
        test.deploy(versions(old, new))  # both side by side: version 1 drains, new starts take 2
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and list(old) == RAN
        fresh = test.run(test.start("shop"))
        assert fresh is not None and fresh.workflow_version == 2 and [*old, *new] == RAN
