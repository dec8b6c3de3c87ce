"""loom.testing: a schedule fires when the test moves the virtual clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine import Registry
from engine.workflow import workflow
from loom.testing import WorkflowTest

pytestmark = pytest.mark.unit

START = datetime(2026, 12, 1, 23, 30, tzinfo=UTC).timestamp()


def registry() -> Registry:
    reg = Registry()

    @workflow("nightly_report", registry=reg, schedule="cron(0 2 * * ? *)")
    class Nightly:
        steps = [lambda ctx: {"report_for": ctx.data["scheduled_at"][:10]}]

    @workflow("hourly_skip", registry=reg, schedule="rate(1 hour)", catch_up="skip")
    class HourlySkip:
        steps = [lambda ctx: None]

    return reg


def ids(test: WorkflowTest, name: str) -> list[str]:
    return sorted(ex.id for ex in test.engine.list(workflow=name).items)


def test_advancing_the_clock_past_a_fire_time_starts_it_and_run_finishes_it() -> None:
    with WorkflowTest(registry(), start=START) as test:
        assert test.next_fires()["nightly_report"] == datetime(2026, 12, 2, 2, tzinfo=UTC).timestamp()
        report = test.advance(2.5 * 3600)  # 23:30 -> 02:00: the nightly report falls due
        assert report.fired == 2  # and hourly_skip's 02:00, on time (its 00:00 and 01:00 skipped)
        assert report.fires_skipped == 2
        assert ids(test, "nightly_report") == ["nightly_report-20261202T0200Z"]
        ex = test.run("nightly_report-20261202T0200Z")
        assert ex is not None and ex.status.value == "COMPLETED"
        assert ex.context["report_for"] == "2026-12-02"
        test.advance(60)  # the next tick fires nothing new
        assert ids(test, "nightly_report") == ["nightly_report-20261202T0200Z"]
        test.advance(86_400)  # a day later, the next night's
        assert ids(test, "nightly_report") == ["nightly_report-20261202T0200Z", "nightly_report-20261203T0200Z"]


def test_a_jump_over_several_fire_times_is_an_outage_for_the_schedule() -> None:
    with WorkflowTest(registry(), start=START) as test:
        report = test.advance(3 * 3600 + 600)  # 23:30 -> 02:40: 00:00, 01:00, 02:00 passed at once
        assert ids(test, "hourly_skip") == []  # skip: none of them runs
        assert report.fires_skipped == 3
        test.advance(20 * 60)  # 03:00, on time
        assert ids(test, "hourly_skip") == ["hourly_skip-20261202T0300Z"]
