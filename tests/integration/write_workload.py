"""A workload that makes every conditional write the engine has, and what an execution ended as.

Each scenario drives one execution (and whatever it starts) to its end on the moto table,
playing the outside world (callbacks, signals, cancels, redrives, lost messages) where the
workflow waits on it. The examples (workflows/), the chaos kit's composite and a few
workflows of our own that reach the rarer paths (a heartbeat, a failed undo, a failed catch,
a map longer than the lease...) together reach every write site (tests/integration/write_sites.py).

``outcome`` is everything about how an execution ended that a lost write answer must not
change: status, context, error, history (every record's attempts), the fan-out items and join,
the children, the signals, the ledger's effects, runs and duplicates, the dead letters. The
execution's id is replaced by ``X`` so that two runs of a scenario compare equal. The schedules
scenario ends as more than its executions (``schedule_outcome``): the cursors and each sweep's
counts too, with its times taken relative to the day it starts on.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import chaos.workflows  # noqa: F401  (registers the chaos workflows in default_registry)
import workflows  # noqa: F401  (registers the examples in default_registry)
from engine import NonRetryableError, Registry, RetryPolicy, StepContext, map_items, parallel, step
from engine.adapters.ledger import DynamoLedger
from engine.lifecycle import child_id
from engine.state import Execution, ScheduleCursor
from engine.workflow import (
    NOT_YET,
    WorkflowSpec,
    build_spec,
    child,
    create_callback,
    default_registry,
    exponential,
    not_yet,
    sleep,
    wait_for_callback,
    wait_for_callbacks,
    wait_for_signal,
    wait_until,
)
from loom.testing import StillRunning, WorkerDied, WorkflowTest

EXAMPLES = (
    "order_fulfillment",
    "payment_retry",
    "poison_pill",
    "order_approval",
    "payment_webhook",
    "warehouse_pick",
    "courier_booking",
    "order_with_children",
    "order_saga",
    "order_parallel",
    "price_lines",
    "chaos_composite",
    "chaos_composite_screen",
    "chaos_fanout",
)
QUICK = RetryPolicy(max_attempts=3, base=1, max_delay=1, jitter="none")
ONCE = RetryPolicy(max_attempts=1)


@dataclass
class World:
    """The outside world of the workload's own workflows: tokens handed out, a clock to spend."""

    tokens: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    t: WorkflowTest | None = None
    # A scenario that first moves the clock to a time of day of its own: where its time starts.
    origins: dict[str, float] = field(default_factory=dict)
    sweeps: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))

    def submit(self, ctx: StepContext, token: str) -> None:
        self.tokens[ctx.execution_id].append(token)

    def ledger(self, ctx: StepContext) -> DynamoLedger:
        ledger: DynamoLedger = ctx.services["ledger"]
        return ledger

    def first_run_fails(self, name: str, *, retryable: bool = True) -> Callable[[StepContext], dict[str, Any]]:
        """Fails the first time it runs for its idempotency key, then lands its effect."""

        def run(ctx: StepContext) -> dict[str, Any]:
            ledger = self.ledger(ctx)
            if ledger.ran(ctx.idempotency_key) == 1:
                raise (RuntimeError if retryable else NonRetryableError)(f"{name}: first run fails")
            ledger.apply(ctx.idempotency_key, {"kind": name})
            return {name: True}

        run.__name__ = name
        return run

    def lands(self, name: str) -> Callable[[StepContext], dict[str, Any]]:
        def run(ctx: StepContext) -> dict[str, Any]:
            self.ledger(ctx).apply(ctx.idempotency_key, {"kind": name})
            return {name: True}

        run.__name__ = name
        return run

    def refuses(self, name: str) -> Callable[..., dict[str, Any]]:
        def run(ctx: StepContext, *_: Any) -> dict[str, Any]:
            self.ledger(ctx).ran(ctx.idempotency_key)
            raise NonRetryableError(f"{name} refuses")

        run.__name__ = name
        return run

    def slow_item(self, ctx: StepContext) -> dict[str, Any]:
        """A map item that takes 40 s of the virtual clock: three of them outlast the lease."""
        assert self.t is not None
        self.t.clock.advance(40)
        self.ledger(ctx).apply(ctx.idempotency_key, {"kind": "slow", "item": ctx.item})
        return {"item": ctx.item}

    def flaky_item(self, ctx: StepContext) -> Any:
        """Item 0 fails once (then succeeds), item 1 fails for good, the others succeed."""
        ledger = self.ledger(ctx)
        runs = ledger.ran(ctx.idempotency_key)
        if ctx.item == 1 or (ctx.item == 0 and runs == 1):
            raise RuntimeError(f"item {ctx.item} fails (run {runs})")
        ledger.apply(ctx.idempotency_key, {"kind": "item", "item": ctx.item})
        return ctx.item

    def report(self, ctx: StepContext) -> dict[str, Any]:
        """A scheduled run's one step: its effect names the fire time it stands for."""
        self.ledger(ctx).apply(ctx.idempotency_key, {"kind": "report", "for": ctx.data["scheduled_at"]})
        return {"for": ctx.data["scheduled_at"]}

    def hands_out(self, ctx: StepContext) -> dict[str, Any]:
        """Hands every callback handle in the context to the outside world (``tokens``), in order."""
        names = sorted(k for k, v in ctx.data.items() if isinstance(v, dict) and v.get("$loom") == "callback")
        self.tokens[ctx.execution_id] = [ctx.callback_token(n) for n in names]
        return {"handed_out": names}

    def caught(self, ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
        ledger = self.ledger(ctx)
        if ledger.ran(ctx.idempotency_key) == 1:
            raise RuntimeError("the catch handler fails once")
        ledger.apply(ctx.idempotency_key, {"kind": "caught", "error": error.get("type")})
        return {"caught": True}


def registry(world: World) -> Registry:
    reg = Registry()
    for name in EXAMPLES:
        reg.add(default_registry.get(name))
    undo = world.first_run_fails("undo_once")
    specs = [
        build_spec("mend", [world.lands("a"), world.first_run_fails("mend_me", retryable=False)], ONCE),
        build_spec("early", [world.lands("a"), wait_for_signal("go"), world.lands("b")]),
        build_spec(
            "callbacks",
            [
                wait_for_callback("refused", submit=world.submit, timeout=3600, retry=QUICK),
                wait_for_callback("beat", submit=world.submit, timeout=86_400, heartbeat_timeout=600, retry=QUICK),
                wait_for_callback("late", submit=world.submit, timeout=600, retry=QUICK),
                world.lands("after"),
            ],
        ),
        build_spec(
            "beats",
            [wait_for_callback("beat", submit=world.submit, heartbeat_timeout=600, retry=QUICK), world.lands("after")],
        ),
        build_spec("signal_late", [wait_for_signal("go", timeout=600, retry=QUICK), world.lands("after")]),
        build_spec(
            "undoes",
            [
                step(world.lands("one"), compensate=world.refuses("undo_never"), compensate_retry=ONCE),
                step(world.lands("two"), compensate=undo, compensate_retry=QUICK),
                world.refuses("ship"),
            ],
            QUICK,
        ),
        build_spec("caught", [world.lands("a"), step(world.refuses("risky"), catch=world.caught)], QUICK),
        build_spec(
            "uncaught",
            [
                step(world.lands("a"), compensate=world.lands("undo_a")),
                step(world.refuses("risky"), catch=world.refuses("handler")),
            ],
            QUICK,
        ),
        build_spec(
            "items",
            [
                map_items(items=lambda ctx: [0, 1, 2, 3], run=world.flaky_item, name="items", tolerated_failures=1),
                world.lands("z"),
            ],
            QUICK,
        ),
        # No tolerance, one at a time: item 1's failure stops the batch and its slot declines item 2.
        build_spec(
            "declined",
            [
                map_items(items=lambda ctx: [0, 1, 2, 3], run=world.flaky_item, name="items", max_concurrency=1),
                world.lands("z"),
            ],
            QUICK,
        ),
        build_spec(
            "slow_map",
            [map_items(items=lambda ctx: [0, 1, 2, 3], run=world.slow_item, name="slow", max_concurrency=1)],
            QUICK,
        ),
        build_spec(
            "undo_items",
            [
                map_items(
                    items=lambda ctx: [0, 1, 2],
                    run=step(world.lands("line"), compensate=world.first_run_fails("unline"), compensate_retry=QUICK),
                    name="lines",
                ),
                world.refuses("ship"),
            ],
            QUICK,
        ),
        build_spec(
            "held_map",
            [
                map_items(
                    items=lambda ctx: [0, 1, 2],
                    run=step(world.lands("line"), compensate=world.lands("unline")),
                    name="lines",
                    max_concurrency=1,
                )
            ],
            QUICK,
        ),
        build_spec("kid_items", [map_items(items=lambda ctx: [0, 1], run=child("warehouse_pick"), name="kids")], QUICK),
        build_spec("waiting_kid", [wait_for_signal("go"), world.lands("kid_after")]),
        build_spec("family", [child("waiting_kid"), world.lands("after")], QUICK),
        build_spec("sagalet", [step(world.lands("hold"), compensate=world.lands("unhold")), wait_for_signal("go")]),
        build_spec("fenced", [step(world.lands("hold"), compensate=world.lands("unhold")), world.lands("next")]),
        build_spec(
            "polled", [wait_until(_settles, every=timedelta(minutes=1), timeout=3600, name="settle"), world.lands("z")]
        ),
        build_spec("polled_state", [_paged(), world.lands("z")]),
        build_spec("crashy", [world.lands("a"), step(world.lands("b"), semantics="at_most_once")], QUICK),
        # Redeployed with another shape by the redeploy scenarios (issue #24).
        build_spec("shifty", [world.lands("a"), world.lands("b")], QUICK),
        build_spec("drowsy", [sleep(seconds=2000), world.lands("b")], QUICK),
        build_spec("nod", [wait_for_signal("go"), world.lands("b")], QUICK),
        build_spec("nod_cb", [wait_for_callback("ok", submit=world.submit, timeout=3600), world.lands("b")], QUICK),
        build_spec(
            "handles",
            [
                create_callback("a", timeout=3600),
                create_callback("b", heartbeat_timeout=600),
                step(world.hands_out, name="hand_out"),
                sleep(seconds=60),
                wait_for_callbacks("a", "b"),
                world.lands("after"),
            ],
            QUICK,
        ),
        build_spec(
            "handle_late",
            [
                create_callback("a", timeout=600),
                create_callback(timeout=3600),
                step(world.hands_out, name="hand_out"),
                wait_for_callbacks(catch=world.caught),
                world.lands("after"),
            ],
            QUICK,
        ),
        build_spec(
            "nod_handle",
            [create_callback("a"), step(world.hands_out, name="hand_out"), wait_for_callbacks(), world.lands("b")],
            QUICK,
        ),
        build_spec("par", [parallel(world.lands("x"), world.lands("y"), name="both"), world.lands("z")], QUICK),
        build_spec(
            "one_by_one",
            [map_items(items=lambda ctx: [0, 1, 2], run=world.lands("i"), name="each", max_concurrency=1)],
            QUICK,
        ),
    ]
    for spec in specs:
        reg.add(spec)
    return reg


def _settles(ctx: StepContext) -> Any:
    runs = ctx.services["ledger"].ran(f"{ctx.execution_id}:settle.checks")
    return NOT_YET if runs < 3 else {"settled": runs}


def _paged() -> Any:
    # No jitter: it is keyed by the execution id, and the calm and the lossy runs have two.
    backoff = exponential(30, 2, 300, jitter="none")
    return wait_until(_pages, strategy=backoff, initial_state={"seen": []}, max_checks=10, name="pages")


def _pages(ctx: StepContext, state: dict[str, Any]) -> Any:
    # The state is the poll's progress: a lost answer on its checkpoint must not count a page twice.
    seen = [*state["seen"], len(state["seen"]) + 1]
    return not_yet({"seen": seen}) if len(seen) < 3 else {"pages": seen}


# --------------------------------------------------------------------------- scenarios


def _ledger_token(t: WorkflowTest, eid: str) -> str:
    """The newest callback token an example handed its provider (the ledger is its inbox)."""
    ledger: DynamoLedger = t.engine.services["ledger"]
    requests = [(k, v) for k, v in ledger.effects(eid).items() if v.get("kind") == "payment_request"]
    return str(max(requests)[1]["callback_token"])


def _until_waiting(t: WorkflowTest, eid: str) -> Execution:
    ex = t.run(eid)
    assert ex is not None and ex.status.value == "WAITING", ex
    return ex


def plain(workflow: str, data: dict[str, Any] | None = None) -> Callable[[WorkflowTest, World, str], None]:
    def drive(t: WorkflowTest, world: World, eid: str) -> None:
        t.start(workflow, dict(data or {}), execution_id=eid)
        t.run(eid)

    return drive


def approval(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("order_approval", {"order_id": "o1"}, execution_id=eid)
    _until_waiting(t, eid)
    t.signal(eid, "approval", {"approved": True, "approver": "ann"})
    t.run(eid)


def webhook(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("payment_webhook", {"order_id": "o2", "amount": 7, "settle_after": 2}, execution_id=eid)
    _until_waiting(t, eid)
    t.complete_callback(_ledger_token(t, eid), {"paid": 7})
    t.run(eid)


def composite(data: dict[str, Any]) -> Callable[[WorkflowTest, World, str], None]:
    def drive(t: WorkflowTest, world: World, eid: str) -> None:
        t.start("chaos_composite", {"lines": 3, **data}, execution_id=eid)
        _until_waiting(t, eid)
        t.complete_callback(_ledger_token(t, eid), {"paid": True})
        t.run(eid)

    return drive


def redrive(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("mend", {}, execution_id=eid)
    assert t.run(eid).status.value == "FAILED"  # type: ignore[union-attr]
    t.clock.advance(t.config.end_grace_seconds + 1)
    t.engine.sweep()  # stamps its items for retention; the redrive takes the stamps off
    t.engine.redrive_failed(eid)
    t.run(eid)


def early_signal(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("early", {}, execution_id=eid)
    t.signal(eid, "go", {"early": True})  # kept: the wait is not there yet
    t.run(eid)


def callbacks(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("callbacks", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.fail_callback(world.tokens[eid][-1], "Refused", "no")  # attempt 1 fails, its retry asks again
    _until_waiting(t, eid)
    t.complete_callback(world.tokens[eid][-1], {"refused": "then accepted"})
    _until_waiting(t, eid)
    t.clock.advance(300)
    t.heartbeat(world.tokens[eid][-1])
    t.clock.advance(300)
    t.complete_callback(world.tokens[eid][-1], {"beat": "done"})
    _until_waiting(t, eid)
    t.clock.advance(601)
    t.engine.sweep()  # "late" times out, its retry waits again
    _until_waiting(t, eid)
    t.complete_callback(world.tokens[eid][-1], {"late": "on the retry"})
    t.run(eid)


def heartbeat_missed(t: WorkflowTest, world: World, eid: str) -> None:
    """No heartbeat within its timeout: the sweeper claims the wait, records the timeout, retries."""
    t.start("beats", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.clock.advance(601)
    t.engine.sweep()
    _until_waiting(t, eid)
    t.complete_callback(world.tokens[eid][-1], {"beat": "on the retry"})
    t.run(eid)


def signal_late(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("signal_late", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.clock.advance(601)
    t.engine.sweep()  # the wait times out; attempt 2 waits again
    _until_waiting(t, eid)
    t.signal(eid, "go", {"at": "attempt 2"})
    t.run(eid)


def family(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("family", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.run()  # the child parks on its signal
    t.signal(child_id(eid, 0, 1), "go", {})
    t.run(eid)


def cascade(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("family", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.run()
    t.engine.cancel(eid)
    t.run()


def cancel_undo(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("sagalet", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.engine.cancel(eid, compensate=True)
    t.run(eid)


def cancel_map(t: WorkflowTest, world: World, eid: str) -> None:
    """A cancel with compensate mid-map: the join is fenced, the committed item undone."""
    t.start("held_map", {}, execution_id=eid)
    try:
        t.run(eid, max_deliveries=2)  # the open, then item 0
    except StillRunning:
        pass
    t.engine.cancel(eid, compensate=True)
    t.run(eid)


def cancel_fenced(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("fenced", {}, execution_id=eid)
    t.engine.cancel(eid, compensate=True)  # step 0 has not run: its attempt is fenced
    t.run()


def cancel_plain(t: WorkflowTest, world: World, eid: str) -> None:
    t.start("early", {}, execution_id=eid)
    t.engine.cancel(eid)
    t.run()


def lost_message(t: WorkflowTest, world: World, eid: str) -> None:
    """The first message never arrives while another waits in the queue: the sweeper notes the
    dead-letter queue's count, postpones for the backlog, then re-drives the lost one."""
    t.queue.dead_letters.append({"loom": "workload"})  # a count the note has not seen
    t.start("crashy", {}, execution_id=eid)
    t.queue.messages.clear()
    t.start("crashy", {}, execution_id=f"{eid}-other")
    t.queue.messages[-1].visible_at = t.clock.now() + 10_000  # still waiting when the sweep looks
    t.clock.advance(2 * t.config.lease_seconds)
    t.queue.messages[-1].visible_at = t.clock.now()
    t.engine.sweep()
    t.run(eid)
    t.run(f"{eid}-other")


def crash_after_step(t: WorkflowTest, world: World, eid: str) -> None:
    """The worker dies after an at_most_once step ran, before its commit: the lease lapses."""
    t.crash("after_step", step=1)
    t.start("crashy", {}, execution_id=eid)
    t.run(eid)


def crash_fanout(t: WorkflowTest, world: World, eid: str) -> None:
    """The worker dies after an item's commit and its batch never comes back (as if lost): the
    sweeper re-drives the map (fanout.resume). A batch that does come back, after the template's
    20 s, runs the item's successor itself (test_fanout.py::
    test_a_redelivered_final_item_starts_the_successor_its_dead_worker_never_sent)."""
    t.queue.visibility_timeout = 100_000.0
    t.crash("after_checkpoint", step=0)
    t.start("one_by_one", {}, execution_id=eid)
    t.run(eid)


class _DiesAtConsume:
    """The control plane dies after a signal's commit, before it marks the signal consumed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def consume_signal(self, *args: Any) -> None:
        raise WorkerDied("the control plane died before the signal was marked consumed")


def signal_repeat(t: WorkflowTest, world: World, eid: str) -> None:
    """The caller's retry of that signal finds the wait committed: it consumes what the commit named."""
    t.start("early", {}, execution_id=eid)
    _until_waiting(t, eid)
    store, t.engine.store = t.engine.store, _DiesAtConsume(t.engine.store)
    try:
        t.signal(eid, "go", {"n": 1})
    except WorkerDied:
        pass
    finally:
        t.engine.store = store
    t.signal(eid, "go", {"n": 2})
    t.run(eid)


HOUR, DAY = 3600.0, 86_400.0
# The scheduled workflows of the schedules scenario (named ``<eid>-<name>``): (schedule, catch_up).
FIRST_DEPLOY = {
    "daily": ("cron(0 12 * * ? *)", "run_once"),
    "gone": ("rate(1 day)", "run_once"),
    "hourly": ("rate(1 hour)", "run_once"),
    "skip": ("rate(1 hour)", "skip"),
}
# The next deploy: daily's expression changes (RESET), gone loses its schedule (REMOVE), fresh is new.
NEXT_DEPLOY = {
    **FIRST_DEPLOY,
    "daily": ("cron(30 12 * * ? *)", "run_once"),
    "gone": (None, "run_once"),
    "fresh": ("rate(1 hour)", "run_once"),
}


def _deployed(base: Registry, world: World, eid: str, scheduled: dict[str, tuple[str | None, str]]) -> Registry:
    reg = Registry()
    for spec in base:
        reg.add(spec)
    for name, (expression, catch_up) in scheduled.items():
        reg.add(build_spec(f"{eid}-{name}", [world.report], schedule=expression, catch_up=catch_up))
    return reg


def _tick(t: WorkflowTest, world: World, eid: str, report: Any) -> None:
    """Note what a sweep counted, then run what it started to its end."""
    world.sweeps[eid].append([report.fired, report.fires_skipped, report.errors])
    for ex in t.engine.list(limit=1000).items:
        if ex.id.startswith(f"{eid}-"):
            t.run(ex.id)


def schedules(t: WorkflowTest, world: World, eid: str) -> None:
    """Scheduled workflows fired by the sweep as the clock moves: cursors made before a jump, two
    firings on time, an outage (one catch-up run; none under skip), a deploy that changes one
    schedule, removes another and adds a third, then three firings on time.

    The workflows are named after ``eid`` (their runs' ids start with it, and a second run of the
    scenario in the same table has cursors of its own); they are deployed for the scenario only,
    so that no other scenario's sweep reads a cursor. The day starts at the next midnight (UTC).
    """
    base = t.engine.registry
    origin = world.origins[eid] = (t.clock.now() // DAY + 1) * DAY
    t.clock.set(origin + 0.5 * HOUR)
    try:
        t.engine.registry = _deployed(base, world, eid, FIRST_DEPLOY)
        _tick(t, world, eid, t.advance(0.5 * HOUR + 30))  # cursors made at 00:30; 01:00 fires
        t.clock.set(origin + 3.5 * HOUR)  # no sweep at 02:00 or 03:00
        _tick(t, world, eid, t.engine.sweep())
        t.engine.registry = _deployed(base, world, eid, NEXT_DEPLOY)
        t.clock.advance(60)
        _tick(t, world, eid, t.engine.sweep())
        t.clock.set(origin + 4 * HOUR + 30)
        _tick(t, world, eid, t.engine.sweep())
    finally:
        t.engine.registry = base


def _redeployed(base: Registry, *specs: WorkflowSpec) -> Registry:
    """``base`` with the workflows of ``specs`` replaced by them (every version of them)."""
    reg = Registry()
    for spec in base.all_versions():
        if spec.name not in {s.name for s in specs}:
            reg.add(spec)
    for spec in specs:
        reg.add(spec)
    return reg


def redeploy(t: WorkflowTest, world: World, eid: str) -> None:
    """A deploy inserts a step before a queued execution's next one: it blocks (the runner), a
    recheck finds nothing matching, then version 1 is deployed beside version 2 and it resumes."""
    base = t.engine.registry
    v2 = build_spec("shifty", [world.lands("a"), world.lands("x"), world.lands("b")], QUICK, version=2)
    try:
        t.start("shifty", {}, execution_id=eid)
        t.engine.registry = _redeployed(base, v2)
        t.run(eid)
        t.advance(t.config.blocked_recheck_seconds)
        t.engine.registry = _redeployed(base, base.get("shifty"), v2)
        t.advance(t.config.blocked_recheck_seconds)
        t.run(eid)
    finally:
        t.engine.registry = base


def redeploy_asleep(t: WorkflowTest, world: World, eid: str) -> None:
    """A deploy reorders a sleeping execution's workflow: the sweeper's wake blocks it; the old
    shape comes back and it resumes, wakes and runs the step after the sleep."""
    base = t.engine.registry
    moved = build_spec("drowsy", [world.lands("b"), sleep(seconds=2000)], QUICK, version=2)
    try:
        t.start("drowsy", {}, execution_id=eid)
        t.engine.registry = _redeployed(base, moved)
        t.advance(2000)
        t.engine.registry = _redeployed(base, base.get("drowsy"), moved)
        t.advance(t.config.blocked_recheck_seconds)
        t.run(eid)
    finally:
        t.engine.registry = base


def redeploy_signal(t: WorkflowTest, world: World, eid: str) -> None:
    """A signal for a wait whose workflow changed shape blocks it (kept, not delivered); the old
    shape is deployed again and the resumed wait takes it."""
    base = t.engine.registry
    try:
        t.start("nod", {}, execution_id=eid)
        _until_waiting(t, eid)
        t.engine.registry = _redeployed(base, build_spec("nod", [world.lands("a"), wait_for_signal("go")], version=2))
        t.signal(eid, "go", {"ok": True})
        t.engine.registry = _redeployed(base, base.get("nod"))
        t.advance(t.config.blocked_recheck_seconds)
        t.run(eid)
    finally:
        t.engine.registry = base


def redeploy_callback(t: WorkflowTest, world: World, eid: str) -> None:
    """A callback's completion for a wait whose workflow changed shape is committed and blocks
    it (kept); the old shape is deployed again and the resume moves it on with that result."""
    base = t.engine.registry
    try:
        t.start("nod_cb", {}, execution_id=eid)
        _until_waiting(t, eid)
        changed = build_spec("nod_cb", [world.lands("a"), wait_for_callback("ok", submit=world.submit)], version=2)
        t.engine.registry = _redeployed(base, changed)
        t.complete_callback(world.tokens[eid][-1], {"ok": True})
        t.engine.registry = _redeployed(base, base.get("nod_cb"))
        t.advance(t.config.blocked_recheck_seconds)
        t.run(eid)
    finally:
        t.engine.registry = base


def handles(t: WorkflowTest, world: World, eid: str) -> None:
    """Two handles: ``a`` completed before the wait starts (during the sleep), ``b`` heartbeaten
    then completed while the wait is WAITING: that completion settles the wait."""
    t.start("handles", {}, execution_id=eid)
    t.run(eid)  # the handles are created and handed out; the sleep is left
    a, b = world.tokens[eid]
    t.complete_callback(a, {"a": "early"})
    t.clock.advance(30)
    t.heartbeat(b)
    _until_waiting(t, eid)
    t.complete_callback(b, {"b": "late"})
    t.run(eid)


def handle_late(t: WorkflowTest, world: World, eid: str) -> None:
    """Handle ``a`` times out while the wait waits (the sweeper records it on the handle): the
    wait fails for good and its catch handler (failing once) runs."""
    t.start("handle_late", {}, execution_id=eid)
    _until_waiting(t, eid)
    t.complete_callback(world.tokens[eid][1], {"other": "in time"})
    t.clock.advance(601)
    t.engine.sweep()
    t.run(eid)


def redeploy_handle(t: WorkflowTest, world: World, eid: str) -> None:
    """A handle's completion for a wait whose workflow changed shape is kept on the handle and
    blocks it; the old shape is deployed again and the resumed wait settles with it."""
    base = t.engine.registry
    try:
        t.start("nod_handle", {}, execution_id=eid)
        _until_waiting(t, eid)
        changed = build_spec("nod_handle", [world.lands("x"), create_callback("a"), wait_for_callbacks()], version=2)
        t.engine.registry = _redeployed(base, changed)
        t.complete_callback(world.tokens[eid][0], {"ok": True})
        t.engine.registry = _redeployed(base, base.get("nod_handle"))
        t.advance(t.config.blocked_recheck_seconds)
        t.run(eid)
    finally:
        t.engine.registry = base


def migrate(t: WorkflowTest, world: World, eid: str) -> None:
    """A blocked execution is migrated: its next step ``b`` maps onto the new version's ``x``."""
    base = t.engine.registry
    try:
        t.start("shifty", {}, execution_id=eid)
        t.engine.registry = _redeployed(
            base, build_spec("shifty", [world.lands("a"), world.lands("x"), world.lands("b")], QUICK, version=2)
        )
        t.run(eid)
        t.engine.migrate(eid, {"b": "x"}, at="b")
        t.run(eid)
    finally:
        t.engine.registry = base


SCENARIOS: dict[str, Callable[[WorkflowTest, World, str], None]] = {
    "fulfillment": plain("order_fulfillment", {"order_id": "o1", "amount": 5}),
    "payment_retry": plain("payment_retry", {"order_id": "o1", "amount": 5}),
    "poison": plain("poison_pill", {"order_id": "o1"}),
    "approval": approval,
    "webhook": webhook,
    "children": plain("order_with_children", {"order_id": "o1"}),
    "saga": plain("order_saga", {"sku": "s1", "amount": 3}),
    "saga_ok": plain("order_saga", {"sku": "s1", "amount": 3, "courier": "c"}),
    "parallel": plain("order_parallel", {"sku": "s1", "amount": 3}),
    "price_lines": plain("price_lines", {"lines": [{"sku": "a", "qty": 2, "unit_price": 1.5}, {"sku": "b"}]}),
    "chaos_fanout": plain("chaos_fanout", {"lines": 4}),
    "composite": composite({}),
    "composite_caught": composite({"ship": "refuse"}),
    "composite_unwound": composite({"ship": "refuse", "fallback": "refuse"}),
    "redrive": redrive,
    "early_signal": early_signal,
    "callbacks": callbacks,
    "signal_late": signal_late,
    "heartbeat_missed": heartbeat_missed,
    "undoes": plain("undoes"),
    "caught": plain("caught"),
    "uncaught": plain("uncaught"),
    "items": plain("items"),
    "declined": plain("declined"),
    "slow_map": plain("slow_map"),
    "undo_items": plain("undo_items"),
    "kid_items": plain("kid_items"),
    "family": family,
    "cascade": cascade,
    "cancel_undo": cancel_undo,
    "cancel_map": cancel_map,
    "cancel_fenced": cancel_fenced,
    "cancel_plain": cancel_plain,
    "polled": plain("polled"),
    "polled_state": plain("polled_state"),
    "lost_message": lost_message,
    "crash_after_step": crash_after_step,
    "crash_fanout": crash_fanout,
    "signal_repeat": signal_repeat,
    "schedules": schedules,
    "redeploy": redeploy,
    "redeploy_asleep": redeploy_asleep,
    "redeploy_signal": redeploy_signal,
    "redeploy_callback": redeploy_callback,
    "migrate": migrate,
    "handles": handles,
    "handle_late": handle_late,
    "redeploy_handle": redeploy_handle,
}


# --------------------------------------------------------------------------- outcome


def outcome(t: WorkflowTest, eid: str) -> Any:
    """How ``eid`` and everything it started ended, with the id replaced by ``X``."""
    store: Any = t.store
    ledger: DynamoLedger = t.engine.services["ledger"]
    ids = sorted(ex.id for ex in t.engine.list(limit=1000).items if ex.id == eid or ex.id.startswith(f"{eid}-"))
    found: dict[str, Any] = {}
    for xid in ids:
        ex = t.engine.get(xid)
        records = t.engine.history(xid)
        found[xid] = {
            "status": ex.status.value,
            "step": ex.current_step,
            "attempt": ex.attempt,
            "context": ex.context,
            "error": None if ex.error is None else {k: ex.error.get(k) for k in ("type", "reason", "step")},
            "wait": ex.wait is not None,
            "indexed": ex.next_wake_at is not None,
            "history": [
                (r.name, r.status.value, r.result, [(a.attempt, a.outcome.value) for a in r.attempts]) for r in records
            ],
            "fan": _fan(store, xid, records),
            "signals": [(s.name, s.payload, s.consumed_by) for s in store.signals(xid)],
            "handles": _handles(store, xid, records),
            "ledger": _entries(ledger, xid),
            "dead_letters": sum(1 for d in t.queue.dead_letters if d.get("execution_id") == xid and "loom" in d),
        }
    return json.loads(json.dumps(found, sort_keys=True, default=str).replace(eid, "X"))


def schedule_outcome(t: WorkflowTest, world: World, eid: str) -> Any:
    """How the schedules scenario ended: the runs started (their ids name their fire times), each
    cursor, and what each sweep counted (started, passed over, errors). Times are relative to the
    scenario's first midnight: a day ``D0``/``D1`` in an id or an input, seconds since in a cursor."""
    origin = world.origins[eid]
    cursors = [
        {
            "workflow": c.workflow,
            "expression": c.expression,
            "version": c.version,
            **{k: None if v is None else v - origin for k, v in _cursor_times(c).items()},
        }
        for c in t.store.schedules()
        if c.workflow.startswith(f"{eid}-")
    ]
    text = json.dumps({"runs": outcome(t, eid), "cursors": cursors, "sweeps": world.sweeps[eid]}, sort_keys=True)
    for day in (0, 1):
        when = datetime.fromtimestamp(origin + day * DAY, UTC)
        text = text.replace(when.strftime("%Y%m%d"), f"D{day}").replace(when.strftime("%Y-%m-%d"), f"D{day}")
    return json.loads(text.replace(eid, "X"))


def _cursor_times(cursor: ScheduleCursor) -> dict[str, float | None]:
    return {
        "next_fire": cursor.next_fire,
        "pending": cursor.pending,
        "last_fired": cursor.last_fired,
        "updated_at": cursor.updated_at,
    }


# A scenario that ends as more than its executions, or whose executions' ids hold the clock's date.
OUTCOMES: dict[str, Callable[[WorkflowTest, World, str], Any]] = {"schedules": schedule_outcome}


def ended(t: WorkflowTest, world: World, scenario: str, eid: str) -> Any:
    """How the scenario ``scenario`` driven as ``eid`` ended."""
    special = OUTCOMES.get(scenario)
    return outcome(t, eid) if special is None else special(t, world, eid)


def _entries(ledger: DynamoLedger, xid: str) -> dict[str, Any]:
    """The ledger's rows, a callback token (new for each run) left out."""
    rows = ledger.entries(xid)
    for row in rows.values():
        if isinstance(row["effect"], dict):
            row["effect"].pop("callback_token", None)
    return rows


def _handles(store: Any, xid: str, records: list[Any]) -> list[Any]:
    """Each callback handle as it ended (its secret, new for each run, left out)."""
    found = [store.get_handle(xid, r.index) for r in records if "#" not in r.name]
    return [(h.name, h.status.value, h.result, h.error, h.version) for h in found if h is not None]


def _fan(store: Any, xid: str, records: list[Any]) -> list[Any]:
    out = []
    for r in records:
        join = store.get_join(xid, r.index)
        if join is None or "#" in r.name:
            continue
        items = store.fan_items(xid, r.index, join.shards, 0, join.n)
        out.append(
            {
                "step": r.index,
                "ok": join.ok,
                "failed": join.failed,
                "decided": join.decided,
                "items": [
                    (i.index, i.status.value, i.result, [(a.attempt, a.outcome.value) for a in i.attempts])
                    for i in items
                ],
            }
        )
    return out
