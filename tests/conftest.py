"""Shared fixtures: fake credentials, moto with the template's resources, engines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import freezegun
import pytest

from engine import Registry
from engine.adapters.dynamodb import DynamoStore
from engine.adapters.ledger import DynamoLedger
from engine.adapters.sqs import SqsQueue
from engine.clock import FakeClock
from engine.config import EngineConfig
from engine.log import configure
from engine.runtime import Engine
from engine.workflow import default_registry
from loom.testing.moto_resources import moto_kept, moto_session, template_resources

pytest_plugins = ["tests.tiers"]

REGION = "us-east-1"

# freeze_time rewrites datetime in every loaded module; touching pydantic's lazily built models
# (Powertools' parser, loaded by the event reference tests) then fails. Leave them real.
freezegun.configure(extend_ignore_list=["pydantic", "pydantic_core", "aws_lambda_powertools", "samcli"])


@pytest.fixture(autouse=True)
def _fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never reach a real account: fake credentials, no endpoint unless a test sets one."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"):
        monkeypatch.delenv(name, raising=False)
    configure(os.environ.get("LOOM_TEST_LOG_LEVEL", "WARNING"))


@pytest.fixture(scope="session")
def aws_session() -> boto3.Session:
    """One boto3 session for the run: its clients share botocore's loaded models (a client
    from a new session costs ten times more). Made through moto_session: a session made before
    moto is imported never reaches its mock, and a file run on its own may not have imported it."""
    return moto_session(REGION)


@pytest.fixture
def aws(aws_session: boto3.Session) -> Iterator[dict[str, Any]]:
    """moto in-process with template.yaml's table and queues, built once per run and emptied for
    each test (loom.testing.moto_resources); yields the resolved refs plus clients."""
    with moto_kept():
        refs = template_resources(aws_session, only=True)
        yield {
            **refs,
            "session": aws_session,
            "dynamodb": aws_session.client("dynamodb"),
            "sqs": aws_session.client("sqs"),
        }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_engine(aws: dict[str, Any], clock: FakeClock):
    """Build an engine on the moto resources; keyword arguments override the parts."""

    def build(*, registry: Registry | None = None, config: EngineConfig | None = None, **overrides: Any) -> Engine:
        config = config or EngineConfig()
        parts: dict[str, Any] = {
            "registry": registry or default_registry,
            "store": DynamoStore(aws["dynamodb"], aws["Table"], config.shards),
            "queue": SqsQueue(aws["sqs"], aws["StepQueue"], aws["DeadLetterQueue"]),
            "clock": clock,
            "config": config,
            "services": {"ledger": DynamoLedger(aws["dynamodb"], aws["Table"])},
        }
        parts.update(overrides)
        return Engine(**parts)

    return build
