"""A scheduled example: a report every night at 02:00 UTC, started by the sweeper.

``loom time advance 1d`` on a local stack (or ``WorkflowTest.advance`` in a test) fires it.
Each night's execution is ``nightly_report-<YYYYMMDDTHHMMZ>``: the same id whichever sweeper
starts it, so two overlapping ticks start it once. After an outage the missed nights are
caught up by one run (``catch_up="run_once"``, the default), for the latest missed night.
"""

from __future__ import annotations

from typing import Any

from engine import StepContext, step, workflow


def gather(ctx: StepContext) -> dict[str, Any]:
    # The fire time, not the clock: a late or caught-up run reports on the night it stands for.
    night = str(ctx.data["scheduled_at"])[:10]
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    return {"night": night}


def publish(ctx: StepContext) -> dict[str, Any]:
    ledger = ctx.services.get("ledger")
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
        # Keyed on the execution and the step: a redelivered publish lands once.
        ledger.apply(ctx.idempotency_key, {"kind": "report", "night": ctx.data["night"]})
    return {"published": f"report-{ctx.data['night']}"}


# docs:start schedule
@workflow("nightly_report", schedule="cron(0 2 * * ? *)")  # or "rate(1 hour)"; UTC
class NightlyReport:
    steps = [step(gather), step(publish)]  # ctx.data["scheduled_at"]: the fire time


# docs:end schedule
