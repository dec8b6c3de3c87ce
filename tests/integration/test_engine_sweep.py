"""The sweeper: cost bounded by due executions, and one execution's trouble does not stall the rest."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Registry, Status, sleep, sweeper
from engine.config import EngineConfig, shard_of
from engine.state import Execution
from functions import sweeper as sweeper_handler
from tests.integration.engine_support import add_workflow, build_rig

pytestmark = pytest.mark.integration


@pytest.fixture
def reg(rec):
    reg = Registry()
    add_workflow(reg, "nap", [sleep(days=1), rec.step("after")])
    add_workflow(reg, "two", [rec.step("a"), rec.step("b")])
    return reg


def seed_sleepers(rig, count: int, wake_in: float, prefix: str) -> None:
    """Many executions written straight to the store: quicker than starting each one."""
    now = rig.clock.now()
    for i in range(count):
        rig.store.inner.create_execution(
            Execution(
                id=f"{prefix}{i}",
                workflow="nap",
                status=Status.SLEEPING,
                current_step=0,
                version=1,
                input={},
                context={},
                created_at=now,
                updated_at=now,
                next_wake_at=now + wake_in,
            )
        )


class QueryMeter:
    """Counts DynamoDB Query calls and the items they read, from botocore's own events."""

    def __init__(self, client) -> None:
        self.queries = 0
        self.items_read = 0
        client.meta.events.register("after-call.dynamodb.Query", self._seen)

    def _seen(self, parsed, **_kwargs) -> None:
        self.queries += 1
        self.items_read += parsed.get("ScannedCount", parsed.get("Count", 0))


def sweep_cost(rig, aws, not_due: int) -> tuple[int, int, int]:
    seed_sleepers(rig, not_due, wake_in=10 * 86400, prefix=f"idle{not_due}-")
    meter = QueryMeter(aws["dynamodb"])
    gets_before = rig.store.calls["get_execution"]
    report = rig.engine.sweep()
    assert report.woken == 5
    return meter.queries, meter.items_read, rig.store.calls["get_execution"] - gets_before


def test_sweep_cost_grows_with_due_executions_not_table_size(aws, make_engine, clock, reg):
    costs = []
    for not_due in (10, 300):
        rig = build_rig(aws, make_engine, clock, reg)
        seed_sleepers(rig, 5, wake_in=-1, prefix=f"due{not_due}-")
        costs.append(sweep_cost(rig, aws, not_due))
        # Those five are awake now; the next round seeds five fresh due ones.
    small, large = costs
    assert small == large == (4, 5, 5), "one query per shard, and only the due items read"


def test_sweep_reads_nothing_for_a_table_of_idle_executions(rig, aws):
    seed_sleepers(rig, 200, wake_in=86400, prefix="idle-")
    meter = QueryMeter(aws["dynamodb"])
    report = rig.engine.sweep()
    assert (report.due, meter.queries, meter.items_read) == (0, rig.engine.config.shards, 0)
    assert rig.store.calls["get_execution"] == 0


def test_a_transient_error_on_one_execution_does_not_stall_the_sweep(rig):
    rig.queue.fail_sends = 3  # three starts whose first message is lost
    for i in range(3):
        rig.engine.start("two", {}, execution_id=f"t{i}")
    rig.clock.advance(2 * rig.engine.config.lease_seconds)
    rig.store.fail_get = lambda execution_id: execution_id == "t1"
    report = rig.engine.sweep()
    assert report.redriven == 2 and report.errors == 1
    assert sorted(s.message.execution_id for s in rig.queue.sent) == ["t0", "t2"]
    rig.store.fail_get = None
    rig.driver.pump()  # the two redrives: a backlog would postpone the third (bug 5)
    assert rig.engine.sweep().redriven == 1, "the one that failed is still due"
    rig.driver.pump()
    assert [rig.status(f"t{i}") for i in range(3)] == ["COMPLETED"] * 3


def test_a_failed_send_in_the_sweep_is_reported_and_recovered_after_the_lease(rig):
    rig.queue.fail_sends = 1
    rig.engine.start("two", {}, execution_id="s")
    rig.clock.advance(2 * rig.engine.config.lease_seconds)
    rig.queue.fail_sends = 1
    report = rig.engine.sweep()
    assert report.redriven == 1 and report.errors == 1
    ex = rig.engine.get("s")
    assert ex.status is Status.RUNNING and ex.next_wake_at > rig.clock.now()
    rig.clock.set(ex.next_wake_at)
    assert rig.engine.sweep().redriven == 1
    rig.driver.pump()
    assert rig.status("s") == "COMPLETED"


def test_a_terminal_execution_left_in_the_due_index_is_cleaned_up(rig):
    now = rig.clock.now()
    rig.store.inner.create_execution(
        Execution("stray", "two", Status.COMPLETED, 2, 1, {}, {}, now, now, next_wake_at=now - 1)
    )
    report = rig.engine.sweep()
    assert report.due == 1 and report.redriven == 0
    ex = rig.engine.get("stray")
    assert ex.status is Status.COMPLETED and ex.next_wake_at is None
    assert rig.engine.sweep().due == 0


def test_redrives_from_every_shard_share_send_batches(aws, make_engine, clock, reg):
    """Twelve due executions spread over four shards take two SendMessageBatch calls, not four."""
    rig = build_rig(aws, make_engine, clock, reg)
    ids = [f"spread{i}" for i in range(12)]
    assert len({shard_of(i, rig.engine.config.shards) for i in ids}) == rig.engine.config.shards
    calls: list[int] = []
    inner = rig.queue.send_many

    def counting(messages):
        calls.append(len(messages))
        inner(messages)

    rig.queue.send_many = counting
    for execution_id in ids:
        rig.engine.start("two", {}, execution_id=execution_id)
    aws["sqs"].purge_queue(QueueUrl=aws["StepQueue"])  # the start messages are lost
    clock.advance(10 * rig.engine.config.lease_seconds)
    report = rig.engine.sweep()
    assert report.redriven == 12
    assert calls == [10, 2]


def ids_in_shard(shard: int, shards: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    for i in range(100_000):
        if len(found) == count:
            return found
        if shard_of(f"{prefix}{i}", shards) == shard:
            found.append(f"{prefix}{i}")
    raise AssertionError("not enough ids")


def seed_due(rig, ids: list[str], wake_at: float) -> None:
    """Sleepers due at ``wake_at``, a millisecond apart in the order given (oldest first)."""
    now = rig.clock.now()
    for i, execution_id in enumerate(ids):
        rig.store.inner.create_execution(
            Execution(execution_id, "nap", Status.SLEEPING, 0, 1, {}, {}, now, now, next_wake_at=wake_at + i / 1000)
        )


def test_a_busy_shard_does_not_starve_the_others(aws, make_engine, clock, reg):
    """Bug 4: 30 new due sleepers a tick in shard 0 against a budget of 20 per sweep; a
    sleeper in shard 3 due at the first tick is woken within two ticks (it never was)."""
    cfg = EngineConfig(shards=4, sweep_limit=20, sweep_page=10)
    rig = build_rig(aws, make_engine, clock, reg, config=cfg)
    period = cfg.sweep_period_seconds
    clock.set(period * 1_000_000)  # a tick boundary: tick k is at period * (1_000_000 + k)
    busy = iter(ids_in_shard(0, cfg.shards, 30 * 6, "busy-"))
    (quiet,) = ids_in_shard(3, cfg.shards, 1, "quiet-")
    seed_due(rig, [quiet], wake_at=clock.now() + 1)
    waiting: list[str] = []  # the busy shard's due sleepers, oldest first
    woken_at_tick = None
    for tick in range(1, 6):
        batch = [next(busy) for _ in range(30)]
        seed_due(rig, batch, wake_at=clock.now() + 1)  # due at the next tick
        waiting += batch
        clock.advance(period)
        report = rig.engine.sweep()
        assert report.due == 20 and report.truncated, report
        # Oldest first in every shard: the busy shard's oldest due item is served too.
        assert rig.status(waiting[0]) == "RUNNING"
        waiting = [i for i in waiting if rig.store.last.get(i) is None]
        if woken_at_tick is None and rig.status(quiet) != "SLEEPING":
            woken_at_tick = tick
    assert woken_at_tick is not None and woken_at_tick <= 2, f"the shard-3 sleeper woke at tick {woken_at_tick}"


ROTATION = EngineConfig(shards=4, sweep_limit=2, sweep_page=10)  # a budget of half the shards


def _sleepers_in_every_shard(aws, make_engine, clock, reg, prefix: str) -> tuple[Any, dict[int, list[str]]]:
    """Three due sleepers in each shard, at an instant of the period whose start is known."""
    rig = build_rig(aws, make_engine, clock, reg, config=ROTATION)
    clock.set(ROTATION.sweep_period_seconds * 1_000_000)
    due = {shard: ids_in_shard(shard, ROTATION.shards, 3, f"{prefix}{shard}-") for shard in range(ROTATION.shards)}
    for ids in due.values():
        seed_due(rig, ids, wake_at=clock.now() - 1)
    return rig, due


def _served(rig: Any, due: dict[int, list[str]], **sweep: Any) -> set[int]:
    """The shards one sweep woke sleepers in."""
    before = {s: sum(rig.status(i) == "SLEEPING" for i in ids) for s, ids in due.items()}
    rig.engine.sweep(**sweep)
    return {s for s, ids in due.items() if sum(rig.status(i) == "SLEEPING" for i in ids) < before[s]}


def test_consecutive_sweeps_start_at_consecutive_shards(aws, make_engine, clock, reg):
    """With a budget smaller than the shards, the rotating start still reaches every shard
    within two ticks: each tick serves two shards, starting one further on."""
    rig, due = _sleepers_in_every_shard(aws, make_engine, clock, reg, "rot")
    served: list[set[int]] = []
    for _ in range(2):
        served.append(_served(rig, due))
        clock.advance(ROTATION.sweep_period_seconds)
    assert served[0] | served[1] == set(range(ROTATION.shards)), served


def test_a_sweep_stops_with_its_reserve_left_and_sends_what_it_claimed(rig):
    # A sweep that ran into its invocation's timeout would leave its claims unsent, and
    # overlapping sweeps (EventBridge does not wait) would time out one after the other.
    for i in range(6):
        rig.engine.start("nap", {}, execution_id=f"late-{i}")
    rig.clock.advance(86_400)
    left = [25.0]

    def remaining() -> float:
        left[0] -= 3.0  # each execution the sweep looks at costs it three seconds
        return left[0]

    report = rig.engine.sweep(remaining=remaining)
    assert report.truncated and 0 < report.woken < 6, report
    assert report.due - report.woken >= 1, "the rest stay due for the next sweep"
    rest = rig.engine.sweep()
    assert rest.woken == 6 - report.woken and not rest.truncated


def test_overlapping_sweeps_started_apart_split_the_shards_instead_of_racing(aws, make_engine, clock, reg):
    """Two sweeps in one period (ticks faster than a sweep, a storm): with the same start they
    judged the same executions in the same order, every read twice and every write raced; with
    the invocation's offset they start apart, and the second's pages no longer hold what the
    first already woke."""
    rig, due = _sleepers_in_every_shard(aws, make_engine, clock, reg, "ov")
    start = sweeper.first_shard_at(clock.now(), ROTATION)
    # The same instant, offsets two shards apart.
    first, second = _served(rig, due, shard_offset=0), _served(rig, due, shard_offset=2)
    assert first == {start, (start + 1) % 4} and second == {(start + 2) % 4, (start + 3) % 4}
    assert first.isdisjoint(second)


def test_the_sweeper_handler_starts_each_invocation_at_its_own_shard_offset() -> None:
    class Context:
        def __init__(self, request_id: str) -> None:
            self.aws_request_id = request_id

    offsets = {sweeper_handler.shard_offset(Context(f"req-{i}")) % 4 for i in range(16)}
    assert len(offsets) > 1, "every invocation would start at the same shard"
    assert sweeper_handler.shard_offset(Context("req-1")) == sweeper_handler.shard_offset(Context("req-1"))
    assert sweeper_handler.shard_offset(None) == 0  # no context (a test, a script): the clock's start
