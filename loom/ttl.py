"""DynamoDB's TTL where the emulator has none: moto keeps expired items for ever.

DynamoDB deletes an item whose TTL attribute (epoch seconds) has passed, in the background and
typically within days; reads see it until then, which is why Loom's readers hide an execution past
its ``expires_at`` themselves (engine/retention.py). Locally the kit does the deleting: a Scan for
expired items and BatchWriteItem deletes, on the functions' clock (``loom time advance`` included),
at most once a ``period`` and after every clock jump (``loom up``), and after each
``WorkflowTest.advance`` (loom.testing). Deleting at once is the strictest reading of "within days":
a reader that forgot to hide an expired execution finds it gone, not still there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

BATCH = 25  # BatchWriteItem's limit


def ttl_attribute(ddb: Any, table: str) -> str | None:
    """The table's TTL attribute, if TTL is enabled on it."""
    spec = ddb.describe_time_to_live(TableName=table).get("TimeToLiveDescription", {})
    if spec.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        return None
    name = spec.get("AttributeName")
    return str(name) if name else None


def _expired_keys(ddb: Any, table: str, attribute: str, now: float) -> Iterator[dict[str, Any]]:
    keys = [k["AttributeName"] for k in ddb.describe_table(TableName=table)["Table"]["KeySchema"]]
    names = {f"#k{i}": k for i, k in enumerate(keys)} | {"#ttl": attribute}
    kwargs: dict[str, Any] = {
        "TableName": table,
        # A TTL value that is not a number is ignored by DynamoDB; the comparison skips it too.
        "FilterExpression": "#ttl <= :now",
        "ProjectionExpression": ", ".join(f"#k{i}" for i in range(len(keys))),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {":now": {"N": str(int(now))}},
    }
    while True:
        page = ddb.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def reap(ddb: Any, table: str, attribute: str, now: float) -> int:
    """Delete every item of ``table`` whose ``attribute`` is at or before ``now``; how many."""
    pending = list(_expired_keys(ddb, table, attribute, now))
    deleted = 0
    for start in range(0, len(pending), BATCH):
        request: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in pending[start : start + BATCH]]}
        while request:
            answer = ddb.batch_write_item(RequestItems=request)
            request = answer.get("UnprocessedItems") or {}
        deleted += min(BATCH, len(pending) - start)
    return deleted


# After a clock jump, a second look this much later: the sweep the jump fired stamps what ended
# (the execution item last), and that is only deletable once it has.
AFTER_JUMP_SECONDS = 5.0
# Looks after a jump, AFTER_JUMP_SECONDS apart: on a loaded machine the sweep that stamps the
# execution item can take longer than one interval, and a missed item would wait a whole period.
FOLLOW_UPS = 6
# A sweep's nudge counts this long after a jump was seen. Outside it the period's look is soon
# enough (DynamoDB itself takes up to days): a soak's sweeps stamp every few seconds, and a look
# after each was a whole-table scan, 9 % of the emulator in a 300-execution soak.
NUDGE_WINDOW = 2 * FOLLOW_UPS * AFTER_JUMP_SECONDS


@dataclass
class Reaper:
    """``reap`` for one table, on a clock: once a ``period`` of wall time, and after a clock jump
    at once and again ``AFTER_JUMP_SECONDS`` later (``maybe_reap``); ``attribute`` None (TTL off
    on the table) reaps nothing."""

    ddb: Any
    table: str
    attribute: str | None
    clock: Callable[[], float]
    period: float = 60.0
    _last: tuple[float, float] | None = field(default=None, repr=False)  # (wall time, clock offset)
    _again_at: float | None = field(default=None, repr=False)
    _follow_ups: int = field(default=0, repr=False)
    _jumped_at: float | None = field(default=None, repr=False)  # wall time the last jump was seen

    def due(self, wall: float, offset: float) -> bool:
        """Whether to reap now (pure, on the monotonic ``wall`` and the clock's ``offset``)."""
        if self._last is None or wall - self._last[0] >= self.period:
            return True
        jumped = abs(offset - self._last[1]) >= 1.0
        return jumped or (self._again_at is not None and wall >= self._again_at)

    def nudge(self) -> None:
        """A sweep has just stamped ended executions' items: look at the next poll, if a clock jump
        was seen within ``NUDGE_WINDOW``. After a jump the sweep the jump fired stamps while the
        first look may already have run, and the follow-ups are seconds apart: this look follows
        the stamps themselves. Without a jump, what a sweep stamps expires days on, and the
        period's look is soon enough."""
        wall = time.monotonic()
        if self._jumped_at is None or wall - self._jumped_at > NUDGE_WINDOW:
            return
        self._again_at = wall
        self._follow_ups = max(self._follow_ups, 1)

    def maybe_reap(self) -> int:
        wall, now = time.monotonic(), self.clock()
        offset = now - time.time()
        if not self.due(wall, offset):
            return 0
        jumped = self._last is not None and abs(offset - self._last[1]) >= 1.0
        if jumped:
            self._follow_ups = FOLLOW_UPS
            self._jumped_at = wall
        elif self._again_at is not None and wall >= self._again_at:
            self._follow_ups -= 1
        self._again_at = wall + AFTER_JUMP_SECONDS if self._follow_ups > 0 else None
        self._last = (wall, offset)
        return self.reap_now(now)

    def reap_now(self, now: float | None = None) -> int:
        if self.attribute is None:
            return 0
        return reap(self.ddb, self.table, self.attribute, self.clock() if now is None else now)
