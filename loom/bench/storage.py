"""What an ended execution keeps in the table, and how many a month fit in the free tier's 25 GB.

Each example workflow runs to its end on loom.testing's moto backend (the table as template.yaml
describes it), the clock moves past the end's grace so that the sweeper stamps its items for TTL
(engine/retention.py), and every item it left is weighed as DynamoDB bills storage: the item's size
plus 100 bytes of per-item overhead, and for the listing index (GSI2, keys only) the keys plus 100.

The projection is the steady state: an execution stays for the retention and then for as long as
TTL takes to delete it (``TTL_LAG_DAYS``: DynamoDB deletes "typically within a few days"), so a
month's executions hold ``bytes x (retention + lag) / 30`` on average.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.adapters.dynamodb import item_size
from engine.config import EngineConfig
from loom.testing import WorkflowTest
from workflows.ledger import MemoryLedger

FREE_BYTES = 25 * 10**9  # the always-free 25 GB (DynamoDB counts 10^9 bytes a GB)
ITEM_OVERHEAD = 100
TTL_LAG_DAYS = 2.0
MONTH_DAYS = 30.0
GSI2_KEYS = ("PK", "SK", "GSI2PK", "GSI2SK")


@dataclass(frozen=True)
class Example:
    workflow: str
    input: dict[str, Any]
    # What the outside world does while it waits (answer a callback, send a signal); None: nothing.
    answer: Callable[[WorkflowTest, str, MemoryLedger], None] | None = None


def _approve(test: WorkflowTest, eid: str, _: MemoryLedger) -> None:
    test.signal(eid, "approval", {"approved": True, "approver": "ann"})


def _pay(test: WorkflowTest, eid: str, ledger: MemoryLedger) -> None:
    tokens = [e["callback_token"] for e in ledger.effects(eid).values() if e.get("kind") == "payment_request"]
    test.complete_callback(tokens[-1], {"paid": True})


LINES = [{"sku": f"sku-{i}", "qty": i % 3 + 1, "unit_price": 9.5} for i in range(20)]
EXAMPLES = (
    Example("order_fulfillment", {"order_id": "A-1", "amount": 42}),
    Example("payment_retry", {"amount": 5}),
    Example("pipeline", {}),
    Example("order_saga", {"order_id": "S-1", "amount": 12}),
    Example("order_parallel", {"order_id": "P-1", "amount": 12}),
    Example("price_lines", {"lines": LINES}),
    Example("order_approval", {"order_id": "W-1", "amount": 30}, _approve),
    Example("payment_webhook", {"order_id": "W-2", "amount": 30}, _pay),
)


def weigh(items: list[dict[str, Any]]) -> dict[str, int]:
    """Billed bytes of one execution's items: the table's, and the listing index's."""
    table = sum(item_size(i) + ITEM_OVERHEAD for i in items)
    gsi2 = sum(item_size({k: i[k] for k in GSI2_KEYS}) + ITEM_OVERHEAD for i in items if "GSI2PK" in i)
    return {"items": len(items), "table_bytes": table, "index_bytes": gsi2, "bytes": table + gsi2}


def executions_a_month(bytes_each: int, retention_days: float) -> int:
    """Executions a month whose steady state fits in 25 GB with this retention."""
    held_months = (retention_days + TTL_LAG_DAYS) / MONTH_DAYS
    return int(FREE_BYTES / (bytes_each * held_months))


def _measure(example: Example, config: EngineConfig) -> dict[str, Any]:
    ledger = MemoryLedger()
    with WorkflowTest(backend="moto", services={"ledger": ledger}, config=config) as test:
        eid = test.start(example.workflow, example.input)
        ex = test.run(eid)
        if example.answer is not None:
            example.answer(test, eid, ledger)
            ex = test.run(eid)
        assert ex is not None and ex.terminal, f"{example.workflow} did not end: {ex}"
        test.advance(config.end_grace_seconds + 1)  # the sweeper stamps what it left
        ddb, table = test.store._db, test.store._table  # type: ignore[attr-defined]
        items = [i for i in _scan(ddb, table) if eid in i["PK"]["S"]]
        unstamped = [i["SK"]["S"] for i in items if "expires_at" not in i]
        return {"workflow": example.workflow, "status": ex.status.value, "unstamped": unstamped, **weigh(items)}


def _scan(ddb: Any, table: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        out += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def storage(retention_days: float = 30.0, examples: tuple[Example, ...] = EXAMPLES) -> dict[str, Any]:
    config = EngineConfig(retention_seconds=retention_days * 86400)
    rows = [_measure(e, config) for e in examples]
    for row in rows:
        row["executions_a_month"] = executions_a_month(row["bytes"], retention_days)
    return {"retention_days": retention_days, "ttl_lag_days": TTL_LAG_DAYS, "rows": rows}


def render(result: dict[str, Any]) -> str:
    days, lag = result["retention_days"], result["ttl_lag_days"]
    lines = [
        f"Storage per ended execution (retention {days:g} days, + {lag:g} days for TTL to delete; 25 GB free):",
        f"  {'workflow':<20} {'status':<12} {'items':>5} {'bytes':>8} {'executions/month in 25 GB':>27}",
    ]
    for r in result["rows"]:
        lines.append(
            f"  {r['workflow']:<20} {r['status']:<12} {r['items']:>5} {r['bytes']:>8,} {r['executions_a_month']:>27,}"
        )
    return "\n".join(lines)
