"""The scheduled example (workflows/scheduled.py), tested the way users test theirs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import workflows.scheduled  # noqa: F401  (registers the example)
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

pytestmark = pytest.mark.unit


def test_the_nightly_report_fires_at_two_and_reports_on_its_night() -> None:
    ledger = MemoryLedger()
    with WorkflowTest(services={"ledger": ledger}, start=datetime(2026, 12, 1, 12, tzinfo=UTC).timestamp()) as test:
        assert test.next_fires()["nightly_report"] == datetime(2026, 12, 2, 2, tzinfo=UTC).timestamp()
        test.advance(14 * 3600 + 30)  # to 02:00:30, within the grace: on time
        ex = test.run("nightly_report-20261202T0200Z")
        assert ex is not None and ex.status.value == "COMPLETED"
        assert ex.context["published"] == "report-2026-12-02"
        assert [e["night"] for e in ledger.effects(ex.id).values()] == ["2026-12-02"]
        # three nights pass in one jump (an outage): one catch-up run, for the latest night
        test.advance(3 * 86_400)
        late = sorted(e.id for e in test.engine.list(workflow="nightly_report").items)
        assert late == ["nightly_report-20261202T0200Z", "nightly_report-20261205T0200Z"]
