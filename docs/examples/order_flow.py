"""The waits guide's workflow (docs/guide/waits.md), as a module that runs.

``python docs/examples/order_flow.py`` plays the outside world on ``loom.testing``'s virtual
clock: it answers the approval callback with the token ``submit`` handed out, sends the
``shipped`` signal, lets the settlement poll see ``NOT_YET`` once, and the child runs to its end.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine import NOT_YET, child, wait_for_callback, wait_for_signal, wait_until, workflow
from loom.testing import WorkflowTest

OUTBOX: list[str] = []  # the approval requests sent: one token per attempt
CHECKS: list[int] = []


def reserve(ctx: Any) -> dict[str, Any]:
    return {"reserved": ctx.data["order_id"]}


def ask_for_approval(ctx: Any, token: str) -> None:
    OUTBOX.append(token)  # an email link, a webhook registration


def check_settled(ctx: Any) -> Any:
    CHECKS.append(len(CHECKS))
    return NOT_YET if len(CHECKS) < 2 else {"settled": True}


def charge(ctx: Any) -> dict[str, Any]:
    return {"charged": ctx.data["approved"]}


@workflow("ship_order")
class ShipOrder:
    steps = [lambda ctx: {"tracking": f"T-{ctx.data['order']}"}]


# docs:start order_flow
@workflow("order_flow")
class OrderFlow:
    steps = [
        reserve,
        # submit(ctx, token) hands the token out (an email link, a webhook registration)
        wait_for_callback("approval", submit=ask_for_approval, timeout=timedelta(days=3), heartbeat_timeout=None),
        wait_for_signal("shipped", timeout=timedelta(days=7)),  # its payload merges into ctx.data
        wait_until(check_settled, every=timedelta(minutes=5), timeout=timedelta(hours=6)),  # NOT_YET or a dict
        child("ship_order", input=lambda ctx: {"order": ctx.data["order_id"]}),  # the child's output merges
        charge,
    ]


# docs:end order_flow


def main() -> None:
    test = WorkflowTest()
    eid = test.start("order_flow", {"order_id": "A-1"})
    assert test.run(eid).status.value == "WAITING"  # on the approval
    test.complete_callback(OUTBOX[-1], {"approved": True})
    assert test.run(eid).status.value == "WAITING"  # on the signal
    test.signal(eid, "shipped", {"carrier": "post"})
    ex = test.run(eid)
    assert ex.status.value == "COMPLETED", ex.status
    assert ex.output["charged"] is True and ex.output["carrier"] == "post" and ex.output["tracking"] == "T-A-1"
    print(f"order_flow {eid}: COMPLETED after {len(CHECKS)} settlement checks")


if __name__ == "__main__":
    main()
