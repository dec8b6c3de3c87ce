"""DynamoDB from one emulator, everything else from another: the wiring host-mode LocalStack uses offline.

Runs everywhere: a moto server stands in for LocalStack (it serves SQS as LocalStack would), so the
per-service endpoints (AWS_ENDPOINT_URL_DYNAMODB next to AWS_ENDPOINT_URL) are checked even where
`loom localstack install` has not run. tests/e2e/test_localstack_host.py does the same on LocalStack.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from loom.local import stack as stack_module
from loom.local.emulator.backends import DynamoSource, LocalStackMode
from loom.local.stack import LocalStack, StackOptions
from tests.e2e.support import start, wait_status

pytestmark = pytest.mark.e2e


class _StandIn:
    """A LocalStackEmulator whose "LocalStack" is a moto server and whose verdict is: DynamoDB elsewhere."""

    kind = "localstack"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # moto's stock server: like LocalStack it takes any key (the embedded emulator checks them).
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint_url = ""
        self.dynamodb = DynamoSource.EMBEDDED
        self.mode = LocalStackMode.HOST

    def start(self) -> _StandIn:
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self

    @property
    def pid(self) -> int | None:
        return os.getpid()  # it serves from this process, as the stack's own supervisor does

    def describe(self) -> dict[str, Any]:
        return {"mode": "host", "dynamodb": "embedded", "dynamodb_note": "offline: DynamoDB from the embedded emulator"}

    def stop(self) -> None:
        self._moto.stop()


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LocalStack]:
    monkeypatch.setattr(stack_module, "LocalStackEmulator", _StandIn)
    opts = StackOptions(
        emulator="localstack", port=0, api_port=0, workers=1, api_workers=1, state_dir=tmp_path, sweeper=False
    )
    with LocalStack(opts) as stack:
        yield stack


def test_dynamodb_goes_to_the_embedded_emulator_and_the_queues_to_localstack(split: LocalStack) -> None:
    dynamodb = split.service_endpoints["dynamodb"]
    assert dynamodb != split.endpoint_url
    for function in ("WorkerFunction", "SweeperFunction", "ControlPlaneFunction"):
        env = split.function_env(function)
        assert env["AWS_ENDPOINT_URL"] == split.endpoint_url
        assert env["AWS_ENDPOINT_URL_DYNAMODB"] == dynamodb
    assert split.info["aws_endpoints"] == {"dynamodb": dynamodb}
    assert split.info["localstack"]["dynamodb"] == "embedded"
    # The table lives only where DynamoDB is served, the queues only in "LocalStack".
    assert split.client("dynamodb").meta.endpoint_url == dynamodb
    assert split.refs["Table"] in split.client("dynamodb").list_tables()["TableNames"]
    assert split.refs["StepQueue"] in split.client("sqs").list_queues()["QueueUrls"]
    ex_id = start(split.api, "order_fulfillment", {"order_id": "o-1", "amount": 5})
    wait_status(split.api, ex_id, "SLEEPING", timeout=60)
    split.advance_time(3600 + 5)
    assert split.tick_sweeper()["woken"] == 1
    wait_status(split.api, ex_id, "COMPLETED", timeout=60)
    emulator_pids = {split.info["emulator_pid"], split._dynamodb_emulator.pid if split._dynamodb_emulator else None}
    assert None not in emulator_pids and emulator_pids <= set(split.all_pids())
