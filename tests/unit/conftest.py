"""Fixtures of the example-workflow tests: a virtual-clock WorkflowTest with the example ledger."""

from __future__ import annotations

import pytest

from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger


@pytest.fixture
def ledger() -> MemoryLedger:
    return MemoryLedger()


@pytest.fixture
def test(ledger: MemoryLedger) -> WorkflowTest:
    return WorkflowTest(services={"ledger": ledger})
