"""The guide's first workflow (docs/guide/workflows.md), as a module that runs.

``python docs/examples/checkout.py`` runs it in-process on ``loom.testing``'s virtual clock: the
day-long sleep takes no time. The two services are stand-ins that remember what they did, keyed
by the step's idempotency key as a real payment or stock API would be.
"""

from __future__ import annotations

from typing import Any

import loom.testing

# docs:start checkout
from engine import RetryPolicy, StepContext, sleep, step, workflow


def reserve(ctx: StepContext) -> dict[str, Any]:
    # ctx.data is the execution's context so far; ctx.idempotency_key is stable across retries.
    return {"reservation": reserve_stock(ctx.data["sku"], key=ctx.idempotency_key)}


def charge(ctx: StepContext) -> dict[str, Any]:
    return {"charge": charge_card(ctx.data["amount"], key=ctx.idempotency_key)}


@workflow("checkout")
class Checkout:
    steps = [
        reserve,
        step(charge, retry=RetryPolicy(max_attempts=3, base=1), semantics="at_most_once", timeout=20),
        sleep(hours=24),  # durable: no Lambda waits, the sweeper wakes it
        reserve,
    ]
    retry = RetryPolicy(max_attempts=5, base=2, max_delay=900)


# docs:end checkout

RESERVED: dict[str, str] = {}
CHARGED: dict[str, int] = {}


def reserve_stock(sku: str, *, key: str) -> str:
    return RESERVED.setdefault(key, f"res-{sku}-{len(RESERVED) + 1}")


def charge_card(amount: int, *, key: str) -> str:
    CHARGED.setdefault(key, amount)
    return f"ch-{key}"


def main() -> None:
    test = loom.testing.WorkflowTest()
    eid = test.start("checkout", {"sku": "A", "amount": 42})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED", ex.status
    assert list(CHARGED.values()) == [42], "one charge"
    print(f"checkout {eid}: {ex.status.value}, charged {sum(CHARGED.values())}")


if __name__ == "__main__":
    main()
