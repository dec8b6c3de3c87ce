"""A workflow changed by a deploy, kept side by side (issue #24).

Version 2 of ``checkout_versions`` checks for fraud before charging. Executions started on
version 1 finish on version 1 (each runs on the shape it started with); new starts take
version 2. ``loom workflows`` shows each version's executions not yet ended: once version 1's
count is 0, its class can be deleted. Deleting it earlier leaves its executions BLOCKED
(``definition_changed``) until it is deployed again, or until ``loom migrate ID charge=charge``
moves one onto version 2 on purpose.
"""

from __future__ import annotations

from typing import Any

from engine import StepContext, workflow


def reserve(ctx: StepContext) -> dict[str, Any]:
    return {"reserved": ctx.data.get("sku", "A")}


def fraud_check(ctx: StepContext) -> dict[str, Any]:
    # The step the deploy inserts: a large amount is flagged, not refused (the example stays short).
    return {"flagged": float(ctx.data.get("amount", 0)) > 1000}


def charge(ctx: StepContext) -> dict[str, Any]:
    return {"charged": ctx.data.get("amount", 0)}


def ship(ctx: StepContext) -> dict[str, Any]:
    return {"shipped": True}


@workflow("checkout_versions", version=1)
class CheckoutV1:
    steps = [reserve, charge, ship]


@workflow("checkout_versions", version=2)
class CheckoutV2:
    steps = [reserve, fraud_check, charge, ship]
