"""Fan-out decisions, without I/O: the completion policy, the window and the item layout.

A fan-out step (``parallel`` or ``map``, engine/fanout_spec.py) keeps one join record
(counters only) and one record per item; engine/fanout.py reads them, asks these
functions what to do, and carries the verdict out.

    item final ──► judge_join(counts, policy) ──► CONTINUE  (start the item the slot frees)
                                                  SUCCEED   (join: advance the parent)
                                                  FAIL      (join: fail the step)

That is ``on_failure="fail"``. The default, ``on_failure="batch"``, is the reference's rule
(Lambda durable functions' BatchResult, DESIGN.md "Fan-out"): the fan-out never fails on its
items. ``may_start`` says whether a slot may start its next item; once it may not, the items
already started run to their ends and the join closes when every slot is done (its last item
final, or its next item declined), with a ``CompletionReason`` for the next step to read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# The items of one map spread over this many partitions at most (DESIGN.md, "Fan-out").
MAX_SHARDS = 32
ITEMS_PER_SHARD = 200
# The most items one map may fan out to; its join record and parent stay small at this size.
MAX_ITEMS = 10_000


class OnFailure(StrEnum):
    """What a fan-out's failed items lead to."""

    BATCH = "batch"  # the step succeeds with a batch result; the next step decides
    FAIL = "fail"  # the step fails (FanoutFailed) once the policy is out of reach


class CompletionReason(StrEnum):
    """Why a batch closed, in the reference's words."""

    ALL_COMPLETED = "ALL_COMPLETED"  # every item ended, succeeded or failed
    MIN_SUCCESSFUL_REACHED = "MIN_SUCCESSFUL_REACHED"
    FAILURE_TOLERANCE_EXCEEDED = "FAILURE_TOLERANCE_EXCEEDED"


class JoinVerdict(StrEnum):
    CONTINUE = "continue"  # not decided yet: keep the window full
    SUCCEED = "SUCCEEDED"  # enough items succeeded (or all did, failures tolerated)
    FAIL = "FAILED"  # more failures than tolerated, or min_successful is out of reach


@dataclass(frozen=True)
class CompletionPolicy:
    """Lambda durable functions' CompletionConfig; a percentage is of all the items (0..100).

    With none of them set every item must succeed. With only ``min_successful`` set, failures
    are tolerated while ``min_successful`` can still be reached.
    """

    min_successful: int | None = None
    tolerated_failures: int | None = None
    tolerated_failure_percentage: float | None = None

    def tolerates(self, failed: int, n: int) -> bool:
        count, pct = self.tolerated_failures, self.tolerated_failure_percentage
        if count is None and pct is None:
            return self.min_successful is not None or failed == 0
        if count is not None and failed > count:
            return False
        return pct is None or failed * 100 <= pct * n

    def needed(self, n: int) -> int:
        """Successes that end a batch early: ``min_successful`` (at most n), else every item."""
        return n if self.min_successful is None else min(self.min_successful, n)

    def may_start(self, n: int, ok: int, failed: int) -> bool:
        """The reference's rule for starting another item: no failure beyond the tolerance (with
        no tolerance set, none at all) and ``needed`` successes not in yet."""
        count, pct = self.tolerated_failures, self.tolerated_failure_percentage
        if count is None and pct is None:
            within = failed == 0
        else:
            within = (count is None or failed <= count) and (pct is None or failed * 100 <= pct * n)
        return within and ok < self.needed(n)

    def reason(self, n: int, ok: int, failed: int) -> CompletionReason:
        if ok + failed >= n:
            return CompletionReason.ALL_COMPLETED
        if ok >= self.needed(n):
            return CompletionReason.MIN_SUCCESSFUL_REACHED
        return CompletionReason.FAILURE_TOLERANCE_EXCEEDED


@dataclass(frozen=True)
class JoinRecord:
    """``PK=EXEC#<id>, SK=FAN#<nnn>``: counters only, so it stays tiny at any number of items."""

    execution_id: str
    step: int
    n: int
    shards: int
    window: int
    ok: int = 0
    failed: int = 0
    decided: str | None = None  # a JoinVerdict value once a runner has decided it
    ends: int = 0  # final items that were the last of their slot (idx >= n - window)
    declined: int = 0  # slots whose next item was declined once items could no longer start

    @property
    def slots(self) -> int:
        return min(self.n, self.window)

    def is_chain_end(self, idx: int) -> bool:
        """Item ``idx`` frees no slot for a successor: it is the last its slot runs."""
        return next_item(idx, self.n, self.window) is None


def judge_join(n: int, ok: int, failed: int, policy: CompletionPolicy) -> JoinVerdict:
    """What the counts mean. Monotone in ``ok`` and ``failed`` except between the two ends,
    which is why the first decision is recorded on the join record (``decided``)."""
    if not policy.tolerates(failed, n):
        return JoinVerdict.FAIL
    if policy.min_successful is not None:
        need = min(policy.min_successful, n)
        if ok >= need:
            return JoinVerdict.SUCCEED
        if ok + (n - ok - failed) < need:
            return JoinVerdict.FAIL  # the items left cannot reach min_successful any more
    if ok + failed >= n:
        return JoinVerdict.SUCCEED  # everything is final, the failures are tolerated
    return JoinVerdict.CONTINUE


def judge_batch(join: JoinRecord, policy: CompletionPolicy) -> JoinVerdict:
    """``on_failure="batch"``: SUCCEED once every item is final, or once no item may start and
    every slot is done (nothing started is still running); never FAIL."""
    if join.ok + join.failed >= join.n:
        return JoinVerdict.SUCCEED
    if policy.may_start(join.n, join.ok, join.failed):
        return JoinVerdict.CONTINUE
    return JoinVerdict.SUCCEED if join.ends + join.declined >= join.slots else JoinVerdict.CONTINUE


def shards_for(n: int) -> int:
    """Partitions for ``n`` items: one per ITEMS_PER_SHARD, between 1 and MAX_SHARDS."""
    return max(1, min(MAX_SHARDS, math.ceil(n / ITEMS_PER_SHARD)))


def shard_of_item(idx: int, shards: int) -> int:
    return idx % shards


def shards_of_page(start: int, count: int, shards: int) -> list[int]:
    """The shards that hold items ``start .. start+count-1``: a page narrower than the shard
    count spans the shards of its own indexes, not shards 0..count-1."""
    if count <= 0:
        return []
    if count >= shards:
        return list(range(shards))
    return sorted({shard_of_item(idx, shards) for idx in range(start, start + count)})


def first_window(n: int, window: int) -> range:
    return range(min(n, window))


def next_item(idx: int, n: int, window: int) -> int | None:
    """The item that item ``idx``'s slot starts once ``idx`` is final (each completion frees its own slot)."""
    nxt = idx + window
    return nxt if nxt < n else None


def started_items(n: int, window: int, final: Iterable[int], declined: Iterable[int] = ()) -> set[int]:
    """Every item that has been started: the first window, plus the successor of each final
    item; a declined item was never started and frees no successor."""
    skipped = set(declined)
    started = set(first_window(n, window)) - skipped
    for idx in final:
        nxt = next_item(idx, n, window)
        if nxt is not None and nxt not in skipped:
            started.add(nxt)
    return started


def to_resend(n: int, window: int, final: Iterable[int], declined: Iterable[int] = ()) -> list[int]:
    """What a recovering runner re-sends: the started items that are not final (at most ``window``)."""
    done = set(final)
    return sorted(started_items(n, window, done, declined) - done)
