"""Stateful property test: random interleavings of deliveries, duplicates, worker deaths,
lost write answers, sweeps and clock jumps against the engine on moto's DynamoDB; and, for the
waits, callback completions (same and other bodies), failures and heartbeats, signals, timeouts
and child ends, in every interleaving with the rest; and sagas whose failure (or a cancel with
compensate) undoes the committed steps: reverse order, committed steps only, once per commit;
and the composites, where these meet: a map whose items are undone, a child, a callback, an
undoable step and a caught one (``composite_undone``: the catch fails too, so the saga unwinds
past it), with a machine of their own (``CompositeMachine``) so the default tier reaches them;
and a caught signal wait (``signal_caught``); and two callback handles pending at once
(``handled``: created, sent by a step between, completed, failed or heartbeaten at any point,
before or while the wait waits, and timed out); and deploys that change a workflow's shape under
its executions (``redeploy``, ``redeploy_under_a_wait``) and bring it back (``restore``): nothing
runs on the changed shape, and the resume ends everything as before.

The queue is an in-memory model of SQS (delays, receive counts, duplicates, losses) so
that hypothesis controls every delivery; the store is the real DynamoDB adapter, whose
conditional writes are what the invariants are about.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engine import NonRetryableError, Registry, RetryPolicy, Status, map_items, sleep, step
from engine.adapters.dynamodb import PARKED_KEY, DynamoStore
from engine.batch import process_batch
from engine.batch_result import key as batch_key
from engine.clock import FakeClock
from engine.config import EngineConfig
from engine.errors import AlreadyTerminal, CompensationNotDeployed, LoomError
from engine.fan_results import in_order
from engine.fanout_spec import FanoutSpec
from engine.messages import MessageKind, StepMessage
from engine.ports import FAULT_POINTS
from engine.runtime import Engine
from engine.state import AttemptOutcome, StepStatus
from engine.sweeper import backlog_patience, may_be_parked
from engine.workflow import (
    CallbackHandleSpec,
    CallbackSpec,
    CallbacksWaitSpec,
    ChildSpec,
    SignalSpec,
    child,
    create_callback,
    not_yet,
    wait_for_callback,
    wait_for_callbacks,
    wait_for_signal,
    wait_until,
)
from loom.testing.moto_resources import moto_kept, moto_session, template_resources
from loom.testing.queue import sqs_timing
from tests.integration.engine_support import Crash, CrashAt, LostAnswers, WatchedStore, WriteKind, add_workflow

pytestmark = [pytest.mark.integration]

REGION = "us-east-1"
# One session for every example: its clients share botocore's loaded models.
SESSION = moto_session(REGION)
# A dead worker's messages come back when its heartbeat's last extension runs out (template: 20 s),
# inside the lease: the redelivery adopts or re-runs what the worker left (verdicts.may_adopt).
VISIBILITY = 20.0
DEATHS = [*FAULT_POINTS, "after_commit", "in_step"]
CONFIG = EngineConfig(shards=2, lease_seconds=60)
UNDONE = (Status.COMPENSATED, Status.COMPENSATION_FAILED)


class Flaky(Exception):
    pass


class Model:
    """What the steps did, as seen from inside them."""

    def __init__(self) -> None:
        self.runs: Counter[tuple[str, int, int]] = Counter()
        self.results: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        self.at_most_once: set[tuple[str, int]] = set()
        self.cancelled: set[str] = set()
        self.after_cancel: list[tuple[str, int]] = []
        self.tokens = itertools.count()
        # Set by the machine: kill the worker inside the next step, or run a second worker
        # (a concurrent duplicate) while the next step is in progress.
        self.die_in_step = False
        self.interleave: Any = None
        # The waits: tokens handed out by submit, completions that won, signals sent.
        self.issued: list[str] = []
        self.won: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
        self.signals: dict[str, list[dict[str, Any]]] = defaultdict(list)
        # Callback handles: every token a step read (one per handle, however often it ran), and
        # the completions (or failures) that won, per (execution id, creating step).
        self.handle_tokens: list[str] = []
        self.handle_won: dict[tuple[str, int], list[Any]] = defaultdict(list)
        # Saga compensations, as run: (execution id, step index, the committed result it saw).
        self.undo_runs: list[tuple[str, int, dict[str, Any]]] = []
        # Catch handlers' results, as returned (one is committed per caught step).
        self.caught: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        # Fan-out items' results, as returned: (execution id, item index) -> results.
        self.items: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        # Fan-out items' undos, as run: (execution id, step index, item index, the item result it saw).
        self.item_undo_runs: list[tuple[str, int, int, dict[str, Any]]] = []
        # The longest poll state the invariants saw checkpointed, per execution: no later check
        # may be given a shorter one (a lost checkpoint), whatever crashed or retried between.
        self.checkpointed: dict[str, int] = {}
        self.lost_state: list[tuple[str, int]] = []
        # Runs of the step a redeploy inserted (``changed_registry``): an execution started on
        # the old shape must never run it, and none starts on the new one.
        self.wrong_shape: list[tuple[str, int]] = []


def submit(ctx: Any, token: str) -> None:
    ctx.services["model"].issued.append(token)


def hand_out(ctx: Any) -> dict[str, Any]:
    """The step between creating the handles and waiting: it sends both tokens out."""
    model: Model = ctx.services["model"]
    model.runs[(ctx.execution_id, ctx.step_index, ctx.attempt)] += 1
    _while_running(model, ctx)
    model.handle_tokens += [ctx.callback_token("h1"), ctx.callback_token("h2")]
    result = {"handed": f"handed#{next(model.tokens)}"}
    model.results[(ctx.execution_id, ctx.step_index)].append(result)
    return result


def make_undo(name: str) -> Any:
    def undo(ctx: Any) -> dict[str, Any]:
        model: Model = ctx.services["model"]
        model.undo_runs.append((ctx.execution_id, ctx.step_index, dict(ctx.result or {})))
        assert ctx.idempotency_key == f"{ctx.execution_id}:{ctx.step_index}:compensate"
        if model.die_in_step:
            model.die_in_step = False
            raise Crash("in_step")
        if ctx.attempt <= int(ctx.data.get("fails", {}).get(f"undo_{name}", 0)):
            raise Flaky(f"undo {name} fails attempt {ctx.attempt}")
        return {f"undone_{name}": True}

    undo.__name__ = f"undo_{name}"
    return undo


def make_catch(name: str, *, refuse: bool = False) -> Any:
    """A catch handler; with ``refuse`` it fails for good, so the saga is undone past it."""

    def handler(ctx: Any, error: dict[str, Any]) -> dict[str, Any]:
        model: Model = ctx.services["model"]
        assert ctx.idempotency_key == f"{ctx.execution_id}:{ctx.step_index}:catch" and error.get("type")
        if model.die_in_step:
            model.die_in_step = False
            raise Crash("in_step")
        if refuse:
            raise NonRetryableError(f"the catch of {name} refuses too")
        result = {f"caught_{name}": f"c#{next(model.tokens)}"}
        model.caught[(ctx.execution_id, ctx.step_index)].append(result)
        return result

    handler.__name__ = f"catch_{name}"
    return handler


def _while_running(model: Model, ctx: Any) -> None:
    """What the model does to any running body (a step or a fan-out item): note a run after a
    cancel, let a racing rule interleave, and crash the worker when a rule asked for it."""
    if ctx.execution_id in model.cancelled:
        model.after_cancel.append((ctx.execution_id, ctx.step_index))
    hook, model.interleave = model.interleave, None
    if hook is not None:
        hook()
    if model.die_in_step:
        model.die_in_step = False
        raise Crash("in_step")


def make_step(
    name: str,
    semantics: str = "at_least_once",
    retry: RetryPolicy | None = None,
    *,
    undo: bool = False,
    catch: bool = False,
    refuse: bool = False,
) -> Any:
    """A step failing its first ``fails[name]`` attempts; with ``refuse`` every attempt fails
    for good and its catch (if any) refuses too."""

    def fn(ctx: Any) -> dict[str, Any]:
        model: Model = ctx.services["model"]
        model.runs[(ctx.execution_id, ctx.step_index, ctx.attempt)] += 1
        if semantics == "at_most_once":
            model.at_most_once.add((ctx.execution_id, ctx.step_index))
        _while_running(model, ctx)
        if refuse:
            raise NonRetryableError(f"{name} refuses")
        if ctx.attempt <= int(ctx.data.get("fails", {}).get(name, 0)):
            raise Flaky(f"{name} fails attempt {ctx.attempt}")
        result = {name: f"{name}#{next(model.tokens)}"}
        model.results[(ctx.execution_id, ctx.step_index)].append(result)
        return result

    fn.__name__ = name
    return step(
        fn,
        semantics=semantics,
        retry=retry,
        compensate=make_undo(name) if undo else None,
        catch=make_catch(name, refuse=refuse) if catch else None,
    )


FAN_ITEMS = 3
POLL_PAGES = 3


def poll_pages(ctx: Any, state: dict[str, Any]) -> Any:
    """A stateful poll (named "f": it fails its second check in the first ``fails["f"]``
    attempts, so a retry goes on from the checkpoint): one page per check, done at POLL_PAGES."""
    model: Model = ctx.services["model"]
    model.runs[(ctx.execution_id, ctx.step_index, ctx.attempt)] += 1
    got = len(state["log"])
    if got < model.checkpointed.get(ctx.execution_id, 0):
        model.lost_state.append((ctx.execution_id, got))  # asserted by an invariant: the engine would catch it
    _while_running(model, ctx)
    if got == 1 and ctx.attempt <= int(ctx.data.get("fails", {}).get("f", 0)):
        raise Flaky(f"the poll fails attempt {ctx.attempt}")
    log = [*state["log"], f"p{got + 1}"]
    if len(log) < POLL_PAGES:
        return not_yet({"log": log})
    result = {"f": [*log, f"#{next(model.tokens)}"]}
    model.results[(ctx.execution_id, ctx.step_index)].append(result)
    return result


FAN_WORKFLOWS = ("fan", "fan_strict")


def fan_item(ctx: Any) -> dict[str, Any]:
    """An item of the ``fan`` map: item 1 fails as often as step "f" would (3: for good)."""
    model: Model = ctx.services["model"]
    assert ctx.idempotency_key == f"{ctx.execution_id}:{ctx.step_index}:{ctx.item_index}"
    _while_running(model, ctx)
    # In the composites "f" is the caught step's knob: their items never fail.
    if (
        ctx.workflow in FAN_WORKFLOWS
        and ctx.item_index == 1
        and ctx.attempt <= int(ctx.data.get("fails", {}).get("f", 0))
    ):
        raise Flaky(f"item 1 fails attempt {ctx.attempt}")
    result = {"i": ctx.item, "r": f"i#{next(model.tokens)}"}
    model.items[(ctx.execution_id, ctx.item_index)].append(result)
    return result


def fan_undo(ctx: Any) -> dict[str, Any]:
    """An item's undo in the composites: sees that item's committed result, under its own key."""
    model: Model = ctx.services["model"]
    assert ctx.idempotency_key == f"{ctx.execution_id}:{ctx.step_index}:{ctx.item_index}:compensate"
    model.item_undo_runs.append((ctx.execution_id, ctx.step_index, ctx.item_index, dict(ctx.result or {})))
    if model.die_in_step:
        model.die_in_step = False
        raise Crash("in_step")
    return {"undone": ctx.item_index}


def fan_name(value: Any, index: int) -> str:
    return f"line {value}/{index}"


def composite(*, refuse: bool) -> list[Any]:
    """map (items undone) -> child -> callback -> n (undone) -> f (caught) -> h: every primitive at once.

    ``refuse``: f and its catch both fail for good, so n and then each committed item are undone;
    otherwise f fails ``fails["f"]`` attempts (3: for good, its catch goes on)."""
    items = map_items(
        items=lambda ctx: list(range(FAN_ITEMS)), run=fan_item, compensate=fan_undo, name="lines", max_concurrency=2
    )
    return [
        items,
        child("kid"),
        wait_for_callback("cb", submit=submit, timeout=600, heartbeat_timeout=200),
        make_step("n", undo=True),
        make_step("f", catch=True, refuse=refuse),
        make_step("h"),
    ]


def registry() -> Registry:
    reg = Registry()
    quick = RetryPolicy(max_attempts=3, base=5, jitter="none")
    far = RetryPolicy(max_attempts=3, base=1000, jitter="none")  # past SQS's 900 s: the sweeper's job
    add_workflow(reg, "pair", [make_step("a"), make_step("b", "at_most_once")], retry=quick)
    add_workflow(reg, "once", [make_step("o", "at_most_once"), make_step("p")], retry=quick)
    add_workflow(reg, "nap", [make_step("a"), sleep(seconds=120), make_step("c", "at_most_once")], retry=quick)
    add_workflow(reg, "long_nap", [sleep(hours=1), make_step("d")], retry=quick)
    add_workflow(reg, "flaky", [make_step("f", retry=far), make_step("g")], retry=quick)
    add_workflow(
        reg,
        "approval",
        [make_step("a"), wait_for_callback("cb", submit=submit, timeout=600, heartbeat_timeout=200), make_step("z")],
        retry=quick,
    )
    add_workflow(reg, "signalled", [wait_for_signal("go", timeout=900), make_step("s")], retry=quick)
    # A caught wait: its signal arrives (committed, no catch), or its timeouts exhaust the policy
    # and the handler's one committed result goes on into "s"; a signal after the catch stays kept.
    caught_wait = wait_for_signal("go", timeout=900, step_name="wait_w", catch=make_catch("w"))
    add_workflow(reg, "signal_caught", [caught_wait, make_step("s")], retry=quick)
    handled = [
        create_callback("h1", timeout=900),
        create_callback("h2", heartbeat_timeout=300),
        step(hand_out),
        wait_for_callbacks("h1", "h2"),
        make_step("z"),
    ]
    add_workflow(reg, "handled", handled, retry=quick)
    add_workflow(reg, "kid", [make_step("k")], retry=quick)
    add_workflow(reg, "parent", [child("kid"), make_step("q")], retry=quick)
    # fails["f"] == 3 exhausts f's retries: the saga is undone (its undo of a fails as often as "a" did).
    saga = [make_step("a", undo=True), make_step("m"), make_step("n", undo=True), make_step("f", undo=True)]
    add_workflow(reg, "saga", saga, retry=quick)
    add_workflow(reg, "caught", [make_step("f", catch=True), make_step("h")], retry=quick)
    # "fan" closes as a batch (item 1's failure stops new starts, the rest is declined, "z" runs);
    # "fan_strict" fails at its fan-out instead (on_failure="fail"). Both name their items (the
    # composite's are not named): every record written under any fault carries its name.
    for name, on_failure in (("fan", "batch"), ("fan_strict", "fail")):
        items = map_items(
            items=lambda ctx: list(range(FAN_ITEMS)),
            run=fan_item,
            name="fan",
            max_concurrency=2,
            on_failure=on_failure,
            item_namer=fan_name,
        )
        add_workflow(reg, name, [make_step("a"), items, make_step("z")], retry=quick)
    add_workflow(reg, "composite", composite(refuse=False), retry=quick)
    add_workflow(reg, "composite_undone", composite(refuse=True), retry=quick)
    poll = wait_until(poll_pages, every=30, initial_state={"log": []}, max_checks=6, name="f")
    add_workflow(reg, "polled", [poll, make_step("z")], retry=quick)
    return reg


REGISTRY = registry()
WORKFLOWS = sorted(n for n in REGISTRY.names() if n != "kid")  # kids are started by their parents


def audit(ctx: Any) -> dict[str, Any]:
    ctx.services["model"].wrong_shape.append((ctx.execution_id, ctx.step_index))
    return {"audited": True}


def changed_registry(name: str) -> Registry:
    """A deploy of every workflow as it is but ``name``, which gets a step inserted first:
    the same name and version, another shape (fingerprint)."""
    reg = Registry()
    for spec in REGISTRY.all_versions():
        if spec.name != name:
            reg.add(spec)
    add_workflow(reg, name, [step(audit), *REGISTRY.get(name).steps], retry=REGISTRY.get(name).retry)
    return reg


# A sleep, a callback, a signal, a child's parent, a saga, two plain steps and the composites:
# every place a deploy can find an execution at (the kid is left alone: parents start it).
REDEPLOYABLE = ["approval", "composite", "composite_undone", "handled", "nap", "pair", "parent", "saga", "signalled"]
CHANGED = {name: changed_registry(name) for name in REDEPLOYABLE}


@dataclass
class Envelope:
    message_id: str
    body: str
    visible_at: float
    receives: int = 0
    sent_at: float = 0.0
    delay: int = 0
    first_received_at: float | None = None

    def twin(self, suffix: str, now: float) -> Envelope:
        """Another copy of this message (SQS at-least-once): the same send, visible now."""
        return Envelope(self.message_id + suffix, self.body, now, sent_at=self.sent_at, delay=self.delay)

    def record(self) -> dict[str, Any]:
        """Lambda's SQS record for it, SQS's timestamps on the machine's clock."""
        stamps, held = sqs_timing(self.sent_at, self.first_received_at, self.delay)
        return {
            "messageId": self.message_id,
            "receiptHandle": f"rh-{self.message_id}-{self.receives}",
            "body": self.body,
            "attributes": {"ApproximateReceiveCount": str(self.receives), **stamps},
            "messageAttributes": held,
            "eventSource": "aws:sqs",
        }


class ModelQueue:
    """The ``Queue`` port over an in-memory SQS: delays, receive counts, duplicates, losses."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.messages: list[Envelope] = []
        self.dead: list[dict[str, Any]] = []
        self._ids = itertools.count()

    def send(self, message: StepMessage, delay_seconds: int = 0) -> None:
        now = self.clock.now()
        self.messages.append(
            Envelope(f"m{next(self._ids)}", message.encode(), now + delay_seconds, sent_at=now, delay=delay_seconds)
        )

    def send_many(self, messages: list[StepMessage]) -> None:
        for m in messages:
            self.send(m)

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        self.dead.append(body)

    def change_visibility(self, receipt_handle: str, timeout_seconds: int) -> None:
        return None

    def change_visibility_many(self, receipt_handles: list[str], timeout_seconds: int) -> list[str]:
        return []

    def backlog(self) -> int:
        return len(self.visible())

    def parked(self) -> int:
        return len(self.dead)

    def visible(self) -> list[Envelope]:
        return [m for m in self.messages if m.visible_at <= self.clock.now()]


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.mock = moto_kept()
        self.mock.__enter__()
        session = SESSION
        refs = template_resources(session, only=True)
        self.clock = FakeClock()
        self.queue = ModelQueue(self.clock)
        self.faults = CrashAt()
        client = session.client("dynamodb")
        self.store = WatchedStore(DynamoStore(client, refs["Table"], CONFIG.shards))
        self.note = lambda: client.get_item(TableName=refs["Table"], Key=PARKED_KEY, ConsistentRead=True).get("Item")
        self.lost = LostAnswers(client)
        self.model = Model()
        self.engine = Engine(
            registry=REGISTRY,
            store=self.store,
            queue=self.queue,
            clock=self.clock,
            config=CONFIG,
            faults=self.faults,
            services={"model": self.model},
            rng=random.Random(0),
        )
        self.ids: list[str] = []
        self.first_terminal: dict[str, Status] = {}
        self.versions_seen: dict[str, int] = {}
        self.deaths = 0
        self.redrives_in_backlog = 0
        self.parkings = 0
        # The workflow a redeploy changed (None: the machine's own registry is deployed), what
        # each of its executions looked like then, and every workflow ever redeployed.
        self.redeployed: str | None = None
        self.at_redeploy: dict[str, tuple[Status, int, frozenset[int], int]] = {}
        self.ever_redeployed: set[str] = set()

    # ----------------------------------------------------------------- rules

    @initialize(
        workflows=st.lists(st.sampled_from(WORKFLOWS), min_size=1, max_size=3),
        fails=st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=3, max_size=3),
    )
    def start_some(self, workflows: list[str], fails: list[int]) -> None:
        for workflow, n in zip(workflows, fails, strict=False):
            self.start(workflow, n)

    @precondition(lambda self: len(self.ids) < 4)
    @rule(workflow=st.sampled_from(WORKFLOWS), fails=st.sampled_from([0, 0, 1, 2, 3]))
    def start(self, workflow: str, fails: int) -> None:
        if workflow == self.redeployed:
            return  # an execution started on the changed shape would block once it is restored
        execution_id = f"x{len(self.ids)}"
        fails_of = {"f": fails, "a": min(fails, 1), "undo_a": fails % 2}
        _, created = self.engine.start(workflow, {"fails": fails_of}, execution_id=execution_id)
        assert created, "a new id was not reported created"
        self.ids.append(execution_id)

    @rule(
        pick=st.integers(0, 20),
        size=st.integers(1, 3),
        duplicate=st.booleans(),
        chain=st.booleans(),
        death=st.sampled_from([None, *DEATHS]),
        overlap=st.booleans(),
    )
    def deliver(self, pick: int, size: int, duplicate: bool, chain: bool, death: str | None, overlap: bool) -> None:
        visible = self.queue.visible()
        if not visible:
            return
        start = pick % len(visible)
        batch = visible[start : start + size]
        first = batch[0]
        if duplicate:
            # SQS at-least-once: another copy of the first message is still in the queue.
            self.queue.messages.append(first.twin("d", self.clock.now()))
        if overlap:
            # A second worker gets a copy of the first message while this one is inside a step.
            copy = first.twin("o", self.clock.now())
            self.model.interleave = lambda: self._deliver([copy], chain=False)
        if death is not None:
            self.arm_worker_death(death)
        self._deliver(batch, chain)
        self.model.interleave = None

    @rule()
    def deliver_next(self) -> None:
        """The plain case, weighted up: the oldest visible message, alone, to a healthy worker."""
        visible = self.queue.visible()
        if visible:
            self._deliver(visible[:1], chain=False)

    @rule(point=st.sampled_from(DEATHS), pick=st.integers(0, 20))
    def deliver_and_die(self, point: str, pick: int) -> None:
        """A worker that dies at ``point`` while handling a visible message."""
        visible = self.queue.visible()
        if visible:
            self.arm_worker_death(point)
            self._deliver([visible[pick % len(visible)]], chain=False)

    @rule(point=st.sampled_from(DEATHS))
    def arm_worker_death(self, point: str) -> None:
        """Kill the worker at this point the next time any runner (or sweeper) passes it."""
        if point == "after_commit":
            self.store.crash_after_commit = 1
        elif point == "in_step":
            self.model.die_in_step = True
        else:
            self.faults.arm(point)

    @rule(kind=st.sampled_from(list(WriteKind)))
    def lose_write_answer(self, kind: WriteKind) -> None:
        """DynamoDB applies the next write of this kind, its answer is lost, botocore resends it."""
        self.lost.arm(kind)

    # Offsets past 0: an overlapping invocation's sweep (the handler's offset from its request
    # id) starts at another shard and judges the same executions in another order.
    @rule(offset=st.sampled_from([0, 0, 1, 2, 3]))
    def sweep(self, offset: int = 0) -> None:
        try:
            self.engine.sweep(shard_offset=offset)
        except Crash:
            self.deaths += 1

    @rule(leases=st.integers(2, 4))
    def backlog(self, leases: int) -> None:
        """The workers fall behind: nothing is received while the clock passes several
        leases and the sweeper ticks. A message still waiting is not taken for a lost one."""
        for _ in range(leases):
            waiting = self._waiting_for_their_message()
            before = len(self.queue.messages)
            self.clock.advance(CONFIG.lease_seconds)
            self.sweep()
            redriven = [StepMessage.decode(m.body) for m in self.queue.messages[before:]]
            wrong = [m.execution_id for m in redriven if m.kind is MessageKind.REDRIVE and m.execution_id in waiting]
            assert not wrong, f"re-drove {wrong} while their messages waited in the queue"
            self.redrives_in_backlog += sum(m.kind is MessageKind.REDRIVE for m in redriven)

    def _waiting_for_their_message(self) -> set[str]:
        """Executions whose current, unmarked attempt has a message waiting in the queue,
        and which the sweep after the next lease still owes patience (past
        ``backlog_patience_leases`` a waiting message is deliberately taken as lost)."""
        waiting = set()
        sweep_at = self.clock.now() + CONFIG.lease_seconds
        # The next sweep notes the DLQ's count: a change since the last note dates from that
        # sweep, and shortens the patience of the messages sent before it (DESIGN: "Only a
        # parking after the message was sent shortens the patience").
        note = self.note() if self.queue.dead else None
        since = None if not self.queue.dead else sweep_at
        if note is not None and int(note["count"]["N"]) == len(self.queue.dead):
            since = float(note["changed_at"]["N"])
        for m in self.queue.visible():
            msg = StepMessage.decode(m.body)
            ex = self.store.inner.get_execution(msg.execution_id)
            patience = backlog_patience(CONFIG, may_be_parked(ex, since)) if ex is not None else 0.0
            if (
                ex is not None
                and ex.status is Status.RUNNING
                and (ex.current_step, ex.attempt) == (msg.step, msg.attempt)
                and ex.started_attempt != ex.attempt
                and sweep_at - ex.updated_at < patience
            ):
                waiting.add(ex.id)
        return waiting

    def _items(self) -> list[Envelope]:
        return [m for m in self.queue.visible() if '"kind":"item"' in m.body]

    @rule(pick=st.integers(0, 20))
    def deliver_item_twice(self, pick: int) -> None:
        """A fan-out item delivered twice, one copy after the other (SQS at-least-once)."""
        items = self._items()
        if items:
            first = items[pick % len(items)]
            twin = first.twin("t", self.clock.now())
            self._deliver([first], chain=False)
            self._deliver([twin], chain=False)

    @rule(pick=st.integers(0, 20))
    def crash_after_item_commit(self, pick: int) -> None:
        """The worker dies right after an item's transaction, before the join and the next send."""
        items = self._items()
        if items:
            self.faults.arm("after_checkpoint")
            self._deliver([items[pick % len(items)]], chain=False)

    @rule(seconds=st.sampled_from([1, 5, 30, 121, 400, 1000, 3600]))
    def clock_jump(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(pick=st.integers(0, 20))
    def park_message(self, pick: int) -> None:
        """SQS moves a message to the DLQ after ``maxReceiveCount`` receives: no backlog will
        deliver it, and the sweeper must still re-drive its execution (checked at the end:
        every execution terminal)."""
        if self.queue.messages:
            parked = self.queue.messages.pop(pick % len(self.queue.messages))
            self.queue.dead.append({"parked_by_sqs": parked.body})
            self.parkings += 1

    @rule(pick=st.integers(0, 20))
    def lose_message(self, pick: int) -> None:
        if self.queue.messages:
            self.queue.messages.pop(pick % len(self.queue.messages))

    @precondition(lambda self: self.ids)
    @rule(pick=st.integers(0, 3), really=st.integers(0, 3), compensate=st.booleans())
    def cancel(self, pick: int, really: int, compensate: bool) -> None:
        if really:  # cancel rarely, or few executions would get far
            return
        execution_id = self.ids[pick % len(self.ids)]
        before = self.store.inner.get_execution(execution_id)
        try:
            self.engine.cancel(execution_id, compensate=compensate)
        except CompensationNotDeployed:
            # Its undos belong to the shape it started on, which this deploy lacks: nothing written.
            assert compensate and before.workflow == self.redeployed, f"{execution_id}: {before.status}"
            assert self.store.inner.get_execution(execution_id) == before
            event("a cancel with compensate refused on a changed definition")
            return
        except AlreadyTerminal:
            # Nothing else runs between the read and the cancel: only a terminal (or undoing) one refuses.
            undoing = before.status is Status.COMPENSATING
            assert before.terminal or undoing, f"cancel of {before.status} {execution_id} answered AlreadyTerminal"
            return
        self.model.cancelled.add(execution_id)

    # ------------------------------------------------------------- redeploys

    @precondition(lambda self: self.redeployed is None)
    @rule(pick=st.integers(0, 20))
    def redeploy(self, pick: int) -> None:
        """A deploy changes one workflow's shape under its executions (a step inserted first):
        every later worker, sweeper and API call sees only the new shape. The workflow is one
        with executions not ended, when there is one, so that the deploy finds them."""
        executions = [self.store.inner.get_execution(i) for i in self.ids]
        open_ones = sorted({ex.workflow for ex in executions if not ex.terminal} & set(REDEPLOYABLE))
        self._redeploy((open_ones or REDEPLOYABLE)[pick % len(open_ones or REDEPLOYABLE)])

    def _redeploy(self, workflow: str) -> None:
        event("redeployed")
        self.redeployed = workflow
        self.ever_redeployed.add(workflow)
        self.engine.registry = CHANGED[workflow]
        self.at_redeploy = {
            i: self._position(i) for i in self.ids if self.store.inner.get_execution(i).workflow == workflow
        }

    @precondition(lambda self: self.redeployed is None)
    @rule(pick=st.integers(0, 20), answer=st.booleans())
    def redeploy_under_a_wait(self, pick: int, answer: bool) -> None:
        """The same deploy while an execution waits on a callback or a signal (weighted up), and
        with ``answer`` its callback's completion or its signal comes at once: kept for the resume."""
        executions = [ex for i in self.ids if (ex := self.store.inner.get_execution(i)).status is Status.WAITING]
        waiting = [ex for ex in executions if ex.workflow in REDEPLOYABLE]
        if not waiting:
            return
        ex = waiting[pick % len(waiting)]
        event(f"redeployed under a {ex.wait.kind.value if ex.wait else 'no'} wait")
        self._redeploy(ex.workflow)
        if not answer or ex.wait is None:
            return
        prefix = f"lcb1.{ex.id}.{ex.current_step}.{ex.attempt}."
        mine = [k for k, token in enumerate(self.model.issued) if token.startswith(prefix)]
        handles = [k for k, token in enumerate(self.model.handle_tokens) if token.startswith(f"lcb2.{ex.id}.")]
        if mine:
            self.complete_callback(mine[-1], "same")
        elif handles:
            self.complete_handle(handles[-1], "succeed")
        elif ex.wait.kind.value == "signal":
            self.send_signal(self.ids.index(ex.id))

    @precondition(lambda self: self.redeployed is not None)
    @rule()
    def restore(self) -> None:
        """The old shape is deployed again: the sweeper's rechecks resume what it blocked."""
        self.redeployed = None
        self.at_redeploy = {}
        self.engine.registry = REGISTRY

    def _position(self, execution_id: str) -> tuple[Status, int, frozenset[int], int]:
        """Status, step, the steps committed, and how many bodies (steps, undos) ran so far."""
        ex = self.store.inner.get_execution(execution_id)
        committed = frozenset(
            r.index for r in self.store.inner.history(execution_id) if r.status is StepStatus.COMPLETED
        )
        ran = sum(n for (e, _, _), n in self.model.runs.items() if e == execution_id)
        ran += sum(e == execution_id for e, _, _ in self.model.undo_runs)
        return ex.status, ex.current_step, committed, ran

    # ----------------------------------------------------------------- waits

    @precondition(lambda self: self.model.issued)
    @rule(pick=st.integers(0, 20), body=st.sampled_from(["same", "same", "other"]))
    def complete_callback(self, pick: int, body: str) -> None:
        """The outside world answers a token (maybe an old one, maybe again, maybe differently)."""
        token = self.model.issued[pick % len(self.model.issued)]
        result = {"cb": f"{token[-6:]}:{body}"}
        try:
            done = self.engine.complete_callback(token, "succeed", {"result": result})
        except Crash:
            self.deaths += 1  # the control plane died somewhere in the completion
            return
        except LoomError:
            return  # 404 / 409: refused, nothing written
        if not done.repeat:
            self.model.won[(done.execution_id, done.step, done.attempt)].append(result)

    @precondition(lambda self: self.model.issued)
    @rule(pick=st.integers(0, 20), action=st.sampled_from(["fail", "heartbeat"]))
    def fail_or_heartbeat(self, pick: int, action: str) -> None:
        token = self.model.issued[pick % len(self.model.issued)]
        body = {"error": {"type": "Declined", "message": ""}} if action == "fail" else None
        try:
            done = self.engine.complete_callback(token, action, body)
        except Crash:
            self.deaths += 1
            return
        except LoomError:
            return
        if action == "fail" and not done.repeat:
            self.model.won[(done.execution_id, done.step, done.attempt)].append("failed")

    @precondition(lambda self: self.model.handle_tokens)
    @rule(pick=st.integers(0, 20), action=st.sampled_from(["succeed", "succeed", "other", "fail", "heartbeat"]))
    def complete_handle(self, pick: int, action: str) -> None:
        """The outside world answers a callback handle at any point: before the wait starts, while
        it waits, after it ended; again, otherwise, or with a heartbeat."""
        token = self.model.handle_tokens[pick % len(self.model.handle_tokens)]
        verb = {"other": "succeed"}.get(action, action)
        body: Any = {
            "succeed": {"result": {"v": f"{token[-6:]}:{action}"}},
            "fail": {"error": {"type": "Declined", "message": ""}},
            "heartbeat": None,
        }[verb]
        try:
            done = self.engine.complete_callback(token, verb, body)
        except Crash:
            self.deaths += 1
            return
        except LoomError:
            return  # 404 / 409: refused, nothing written
        if verb != "heartbeat" and not done.repeat:
            event("a callback handle completed")
            self.model.handle_won[(done.execution_id, done.step)].append("failed" if verb == "fail" else body["result"])

    @precondition(lambda self: self.ids)
    @rule(pick=st.integers(0, 3))
    def send_signal(self, pick: int) -> None:
        execution_id = self.ids[pick % len(self.ids)]
        payload = {"go": f"g{next(self.model.tokens)}"}
        try:
            self.engine.signal(execution_id, "go", payload)
        except Crash:
            self.deaths += 1
        except LoomError:
            return  # terminal: refused
        self.model.signals[execution_id].append(payload)

    # -------------------------------------------------------------- delivery

    def _deliver(self, batch: list[Envelope], chain: bool) -> None:
        for m in batch:
            self.queue.messages = [q for q in self.queue.messages if q is not m]
            m.receives += 1
            if m.first_received_at is None:
                m.first_received_at = self.clock.now()
        event = {"Records": [m.record() for m in batch]}
        try:
            response = process_batch(self.engine, event, remaining=(lambda: 300.0) if chain else None)
        except Crash:
            # The worker died: the whole batch comes back once its visibility runs out.
            self.deaths += 1
            for m in batch:
                m.visible_at = self.clock.now() + VISIBILITY
                self.queue.messages.append(m)
            return
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        assert not failed, f"nothing here is transient, yet {failed} failed"

    # ------------------------------------------------------------ invariants

    @invariant()
    def states_are_consistent(self) -> None:
        for execution_id in self.ids:
            ex = self.store.inner.get_execution(execution_id)
            assert ex is not None
            assert ex.version >= self.versions_seen.get(execution_id, 1), "the version went backwards"
            self.versions_seen[execution_id] = ex.version
            if ex.status in (Status.RUNNING, Status.SLEEPING):
                assert ex.next_wake_at is not None, f"{execution_id} is {ex.status} with no wake time"
            elif ex.status is Status.WAITING:
                assert ex.wait is not None and ex.wait.step == ex.current_step, f"{execution_id} WAITING on {ex.wait}"
            elif ex.status is Status.COMPENSATING:
                assert ex.next_wake_at is not None and ex.error is not None, f"{execution_id} COMPENSATING: {ex}"
            elif ex.status is Status.BLOCKED:
                # Only a deploy blocks, and the due index always holds its recheck.
                assert ex.workflow in self.ever_redeployed, f"{execution_id} BLOCKED on an unchanged definition"
                assert ex.next_wake_at is not None and ex.blocked is not None, f"{execution_id} BLOCKED: {ex}"
            else:
                # Ended: its expiry set, and due only for the sweep that stamps it (and a child's notice).
                assert ex.expires_at == pytest.approx(ex.updated_at + CONFIG.retention_seconds) or (
                    ex.next_wake_at is None and ex.expires_at is not None
                ), f"{execution_id} ended without its expiry: {ex}"
                hold = CONFIG.end_grace_seconds
                assert ex.next_wake_at is None or ex.next_wake_at <= ex.updated_at + hold, f"{execution_id}: {ex}"
                first = self.first_terminal.setdefault(execution_id, ex.status)
                assert ex.status is first, f"{execution_id} went from {first} to {ex.status}"
            if ex.wait is not None and ex.wait.checkpoint is not None and ex.current_step == 0:
                seen = len(ex.wait.checkpoint["state"]["log"])
                self.model.checkpointed[execution_id] = max(self.model.checkpointed.get(execution_id, 0), seen)
        self.store.assert_versions_contiguous()
        assert all(n <= 1 for n in self.store.commits.values()), "a step committed twice"
        for key, winners in self.model.won.items():
            assert len(winners) <= 1, f"two completions of {key} both won: {winners}"
        for key, winners in self.model.handle_won.items():
            assert len(winners) <= 1, f"two completions of handle {key} both won: {winners}"
        per_handle: dict[str, set[str]] = defaultdict(set)
        for token in self.model.handle_tokens:
            per_handle[token.rsplit(".", 1)[0]].add(token)
        assert all(len(t) == 1 for t in per_handle.values()), "a handle was given two tokens"

    @invariant()
    def at_most_once_steps_never_ran_twice_within_an_attempt(self) -> None:
        for (execution_id, index, attempt), n in self.model.runs.items():
            if (execution_id, index) in self.model.at_most_once:
                assert n == 1, f"at_most_once step {index} of {execution_id} ran {n} times in attempt {attempt}"

    @invariant()
    def a_changed_definition_runs_nothing(self) -> None:
        """While its workflow has another shape deployed, an execution stands still: no body
        runs, its step does not move, and it is BLOCKED, CANCELLED or as the deploy found it.
        A step may be committed only by a callback's completion, which keeps it until the resume."""
        assert self.model.wrong_shape == [], f"a step of the changed shape ran: {self.model.wrong_shape}"
        for execution_id, (status, step_at, committed, ran) in self.at_redeploy.items():
            now_status, now_step, now_committed, now_ran = self._position(execution_id)
            assert now_ran == ran, f"{execution_id} ran a body on a changed definition"
            if now_status is not Status.CANCELLED:
                assert now_step == step_at, f"{execution_id} moved from step {step_at} to {now_step} meanwhile"
            assert now_status in (status, Status.BLOCKED, Status.CANCELLED), f"{execution_id}: {status} -> {now_status}"
            spec = REGISTRY.get(self.redeployed or "")
            for index in now_committed - committed:
                # (A handle's completion is kept on the handle: its wait commits nothing while blocked.)
                assert isinstance(spec.steps[index], CallbackSpec), f"{execution_id} committed step {index} meanwhile"
                event("a callback completion kept while blocked")
            if now_status is Status.BLOCKED:
                event("blocked by a redeploy")

    @invariant()
    def no_step_starts_after_cancel(self) -> None:
        assert self.model.after_cancel == []

    @invariant()
    def no_poll_check_is_given_a_state_older_than_its_checkpoint(self) -> None:
        assert self.model.lost_state == []

    # ------------------------------------------------------------- quiescence

    def teardown(self) -> None:
        try:
            self._drive_to_quiescence()
            self._check_final()
            self._check_retention()
        finally:
            self.mock.__exit__(None, None, None)

    def kid(self, execution_id: str, index: int, attempt: int) -> Any:
        """The child a parent's step ``index`` started in ``attempt`` (its id is derived), or None."""
        return self.store.inner.get_execution(f"{execution_id}--{index}-{attempt}")

    def _drive_to_quiescence(self) -> None:
        self.restore()  # the drive then resumes what the redeploy blocked, as any other wake
        self.faults.disarm()
        self.store.crash_after_commit = 0
        self.model.die_in_step = False
        for _ in range(500):
            executions = [self.store.inner.get_execution(i) for i in self.ids]
            if all(ex.terminal for ex in executions):
                return
            visible = self.queue.visible()
            if visible:
                self._deliver(visible[:1], chain=False)
                continue
            # Nothing to deliver: let time pass to the next delayed message or wake time.
            times = [m.visible_at for m in self.queue.messages]
            # Children run (and hold their end in the due index) under ids their parents derive.
            kids = [self.kid(i, s, a) for i in self.ids for s in (0, 1) for a in (1, 2, 3)]
            times += [ex.next_wake_at for ex in [*executions, *kids] if ex is not None and ex.next_wake_at is not None]
            self.clock.set(max(self.clock.now(), min(times)))
            self.engine.sweep()
        stuck = {i: self.store.inner.get_execution(i) for i in self.ids}
        raise AssertionError(f"no quiescence: {stuck}")

    def _check_final(self) -> None:
        event(f"worker deaths: {min(self.deaths, 3)}{'+' if self.deaths >= 3 else ''}")
        event(f"redrives during backlogs: {min(self.redrives_in_backlog, 3)}")
        event(f"messages parked by SQS: {min(self.parkings, 2)}")
        self.states_are_consistent()
        self.at_most_once_steps_never_ran_twice_within_an_attempt()
        self.no_poll_check_is_given_a_state_older_than_its_checkpoint()
        for execution_id in self.ids:
            ex = self.store.inner.get_execution(execution_id)
            assert ex.terminal
            event(f"{ex.workflow} ended {ex.status.value}")
            spec = REGISTRY.get(ex.workflow)
            self._check_compensations(execution_id, ex, spec)
            for index, s in enumerate(spec.steps):
                if isinstance(s, FanoutSpec):
                    self._check_fan_counts(ex, index)
            for record in self.store.inner.history(execution_id):
                completed = [a for a in record.attempts if a.outcome == "completed"]
                attempts = [a.attempt for a in record.attempts]
                assert len(attempts) == len(set(attempts)), f"attempt recorded twice: {record}"
                if self.deaths == 0:
                    # No worker died, so no attempt was lost: a lost write answer must not look like one.
                    assert all(a.outcome is not AttemptOutcome.WORKER_LOST for a in record.attempts), record
                if record.status is not StepStatus.COMPLETED:
                    assert completed == []
                    continue
                assert len(completed) == 1
                if record.name.endswith("#compensate"):
                    continue  # _check_compensations
                if record.name.endswith("#catch"):
                    # The handler's one committed result is in the context; the step's own record failed.
                    assert record.result in self.model.caught[(execution_id, record.index)]
                    if isinstance(spec.steps[record.index], SignalSpec):
                        event("wait caught")
                    (key,) = record.result
                    if ex.current_step > record.index or ex.status in UNDONE:
                        assert ex.context[key] == record.result[key]
                    continue
                assert ex.current_step > record.index or ex.status in (Status.CANCELLED, *UNDONE), (
                    f"step {record.index} committed but {execution_id} is {ex.status} at {ex.current_step}"
                )
                if spec.steps[record.index].is_sleep:
                    continue
                if isinstance(spec.steps[record.index], FanoutSpec):
                    self._check_fan(ex, record)
                    continue
                if self._check_wait_record(ex, spec.steps[record.index], record, completed[0].attempt):
                    continue
                assert record.result in self.model.results[(execution_id, record.index)]
                if ex.current_step > record.index:
                    # One committed result: the same one in history and in the context.
                    (key,) = record.result
                    assert ex.context[key] == record.result[key]
            if ex.status is Status.COMPLETED:
                assert ex.current_step == len(spec.steps)
            if ex.status in (Status.FAILED, Status.COMPENSATION_FAILED):
                assert any(d.get("execution_id") == execution_id for d in self.queue.dead), "failed but not in DLQ"
            self._check_signals(execution_id, ex)

    def _check_retention(self) -> None:
        """Past the grace, one sweep stamps every item each ended execution left (its children's,
        fan-out items' and signals' included) with the execution's own expiry, and un-indexes it."""
        self.clock.advance(CONFIG.end_grace_seconds + 1)
        self.engine.sweep()
        table = self.store.inner._table
        items = self.store.inner._db.scan(TableName=table, ConsistentRead=True)["Items"]
        for ex in [self.store.inner.get_execution(i) for i in self.ids]:
            assert ex.next_wake_at is None and ex.expires_at is not None, ex
            want = str(math.ceil(ex.expires_at))
            mine = [i for i in items if i["PK"]["S"] in (f"EXEC#{ex.id}",) or i["PK"]["S"].startswith(f"FAN#{ex.id}#")]
            assert mine and all(i.get("expires_at", {}).get("N") == want for i in mine), (ex.id, mine)

    def _check_compensations(self, execution_id: str, ex: Any, spec: Any) -> None:
        """Reverse order, committed steps (and fan-out items) only, each commit undone once (and
        all of them, if COMPENSATED)."""
        history = self.store.inner.history(execution_id)
        forward = {r.index: r for r in history if not r.name.endswith("#compensate")}
        undo = [r for r in history if r.name.endswith("#compensate")]
        committed = {i for i, r in forward.items() if r.status is StepStatus.COMPLETED}
        steps_undone = [r for r in undo if "[" not in r.name]  # a fan-out's items: <name>[<idx>]#compensate
        for r in steps_undone:
            assert r.index in committed, f"{execution_id}: step {r.index} undone but never committed"
        for r in undo:
            assert sum(a.outcome == "completed" for a in r.attempts) <= 1
        for run_id, index, seen in self.model.undo_runs:
            if run_id == execution_id:
                assert index in committed and seen == forward[index].result, "an undo saw another result"
        done = sorted((r.finished_at or 0.0, r.index) for r in steps_undone if r.status is StepStatus.COMPLETED)
        order = [i for _, i in done]
        assert order == sorted(order, reverse=True), f"{execution_id}: undone out of reverse order: {order}"
        items_done = [r for r in undo if "[" in r.name and r.status is StepStatus.COMPLETED]
        for r in items_done:  # the fake clock may give an item's undo the time of the step undone before it
            at = r.finished_at or 0.0
            below = [s.index for s in steps_undone if s.index < r.index and (s.finished_at or 0.0) < at]
            above = [s.index for s in steps_undone if s.index > r.index and (s.finished_at or 0.0) > at]
            assert not below and not above, f"{execution_id}: {r.name} undone out of reverse order"
        items_undone = self._check_item_undos(ex, [r.name for r in items_done])
        if ex.status is Status.COMPENSATED:
            owed = {
                i
                for i in committed
                if getattr(spec.steps[i], "compensate", None) is not None and not isinstance(spec.steps[i], FanoutSpec)
            }
            undone = {i for _, i in done}
            assert undone == owed, f"{execution_id}: COMPENSATED but undid {sorted(undone)} of {sorted(owed)}"
            for index, s in enumerate(spec.steps):
                if isinstance(s, FanoutSpec) and s.compensate is not None:
                    _, items = self._check_fan_counts(ex, index)
                    owed_items = {r.index for r in items if r.status is StepStatus.COMPLETED}
                    assert items_undone.get(index, set()) == owed_items, f"{execution_id}: items {owed_items} owed"
        if undo:
            event(f"saga ended {ex.status.value}")
            assert ex.status in UNDONE, f"{execution_id}: compensations ran but it ended {ex.status}"

    def _check_item_undos(self, ex: Any, names: list[str]) -> dict[int, set[int]]:
        """Fan-out items undone (the names in the order they committed): highest index first,
        only committed items, each with the result that item committed."""
        undone: dict[int, list[int]] = defaultdict(list)
        for name in names:
            fan, idx = name.removesuffix("]#compensate").split("[")
            index = next(i for i, s in enumerate(REGISTRY.get(ex.workflow).steps) if s.name == fan)
            undone[index].append(int(idx))
        for index, idxs in undone.items():
            assert len(idxs) == len(set(idxs)), f"{ex.id}: an item undone twice: {idxs}"
            # The order they ran in (the fake clock may stamp them all at one instant): highest first.
            ran = list(dict.fromkeys(i for e, s, i, _ in self.model.item_undo_runs if e == ex.id and s == index))
            assert ran == sorted(ran, reverse=True) and set(ran) >= set(idxs), f"{ex.id}: items undone in order {ran}"
            _, items = self._check_fan_counts(ex, index)
            by_idx = {r.index: r for r in items}
            for i in idxs:
                assert by_idx[i].status is StepStatus.COMPLETED, f"{ex.id}: item {i} undone but never committed"
            event("fan-out items undone")
        for run_id, index, idx, seen in self.model.item_undo_runs:
            if run_id == ex.id:
                _, items = self._check_fan_counts(ex, index)
                assert seen == {r.index: r for r in items}[idx].result, "an item's undo saw another result"
        return {index: set(idxs) for index, idxs in undone.items()}

    def _check_fan(self, ex: Any, record: Any) -> None:
        """The join happened once, with every item counted once and the results in item order."""
        join, items = self._check_fan_counts(ex, record.index)
        spec = REGISTRY.get(ex.workflow).steps[record.index]
        assert isinstance(spec, FanoutSpec) and join.decided == "SUCCEEDED"
        results, name = in_order(items, join.n), spec.name
        batch = record.result[batch_key(name)]
        assert record.result == {name: results, batch_key(name): batch}, "the join committed other results"
        assert (batch["succeeded"], batch["failed"]) == (join.ok, join.failed), "the batch miscounts its items"
        assert batch["reason"] == spec.policy.reason(join.n, join.ok, join.failed).value
        final = (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.NOT_STARTED)
        assert all(r.status in final for r in items), f"{ex.id}: an item still ran when its batch closed"
        if join.ok + join.failed < join.n:
            assert join.ends + join.declined == join.slots, f"{ex.id}: a slot was left running"
            event("fan-out closed early as a batch")
        if ex.current_step > record.index:
            assert ex.context[name] == results and ex.context[batch_key(name)] == batch
        event("fan-out joined" if not join.failed else "fan-out joined with failures in its batch")

    def _check_fan_counts(self, ex: Any, index: int) -> tuple[Any, list[Any]]:
        """Each item final at most once, and counted exactly once on the join record."""
        join = self.store.inner.get_join(ex.id, index)
        if join is None:
            return None, []
        items = self.store.inner.fan_items(ex.id, index, join.shards, 0, join.n)
        namer = getattr(REGISTRY.get(ex.workflow).steps[index], "item_namer", None)
        for r in items:  # the items are range(n): each item's value is its index
            assert r.label == (None if namer is None else namer(r.index, r.index)), f"{ex.id}: item {r.index} misnamed"
        assert join.ok == sum(r.status is StepStatus.COMPLETED for r in items), f"{ex.id}: ok miscounted"
        assert join.failed == sum(r.status is StepStatus.FAILED for r in items), f"{ex.id}: failed miscounted"
        declined = sum(r.status is StepStatus.NOT_STARTED for r in items)
        assert join.declined == declined, f"{ex.id}: a declined slot miscounted"
        for r in items:
            done = [a for a in r.attempts if a.outcome == "completed"]
            assert len(done) <= 1 and len({a.attempt for a in r.attempts}) == len(r.attempts), r
            if r.status is StepStatus.COMPLETED:
                assert r.result in self.model.items[(ex.id, r.index)]
        if ex.status is Status.FAILED and ex.current_step == index:
            assert join.decided == "FAILED", f"{ex.id} failed at its fan-out without a FAIL join"
            event("fan-out failed")
        return join, items

    def _check_wait_record(self, ex: Any, spec: Any, record: Any, attempt: int) -> bool:
        """A wait's committed result is what the outside world sent, and only the winner's."""
        if isinstance(spec, CallbackSpec):
            assert self.model.won.get((ex.id, record.index, attempt), [None])[0] in (record.result, None)
            assert record.result is None or set(record.result) == {"cb"}
        elif isinstance(spec, SignalSpec):
            assert record.result in self.model.signals[ex.id], f"{record.result} was never sent to {ex.id}"
        elif isinstance(spec, CallbackHandleSpec):
            assert record.result == {spec.name: {"$loom": "callback", "name": spec.name, "step": record.index}}
            handle = self.store.inner.get_handle(ex.id, record.index)
            assert handle is not None and (record.attempts[-1].detail or {}).get("token") == handle.token_hash
        elif isinstance(spec, CallbacksWaitSpec):
            # Every handle succeeded, by the completion that won it, and the wait committed those.
            for name, step_index in zip(spec.handles, spec.handle_steps, strict=True):
                handle = self.store.inner.get_handle(ex.id, step_index)
                assert handle is not None and handle.result == record.result[name]
                assert self.model.handle_won.get((ex.id, step_index), [None])[0] in (record.result[name], None)
            event("a handles wait committed")
        elif isinstance(spec, ChildSpec):
            kid = self.store.inner.get_execution(f"{ex.id}--{record.index}-{attempt}")
            assert kid is not None and kid.status is Status.COMPLETED and record.result == kid.context
        else:
            return False
        if ex.current_step > record.index and record.result:
            assert all(ex.context.get(k) is not None for k in record.result)
        return True

    def _check_signals(self, execution_id: str, ex: Any) -> None:
        """One signal feeds one wait: each consumed signal is the one a committed record names."""
        signals = self.store.inner.signals(execution_id)
        named = [
            (a.detail or {}).get("signal")
            for r in self.store.inner.history(execution_id)
            for a in r.attempts
            if a.outcome == "completed" and (a.detail or {}).get("signal")
        ]
        assert len(named) == len(set(named)), f"a signal fed two waits: {named}"
        consumed = sorted(s.key for s in signals if s.consumed_by is not None)
        assert set(consumed) <= set(named), f"consumed {consumed}, but only {named} were committed"
        # The commit naming a signal is its consumption; the mark is bookkeeping that the roll
        # forward finishes. An execution ended by a cancel (or a failure) between the two has no
        # later wait to feed, so its committed signal may stay unmarked.
        if ex is None or ex.status not in (Status.CANCELLED, Status.FAILED):
            assert consumed == sorted(named), f"consumed {consumed}, committed {named}"


class CompositeMachine(EngineMachine):
    """The same rules, starting from the composites (map + child + callback + catch + undo), so
    that the default tier's few interleavings reach that combination every run."""

    @initialize(
        workflows=st.lists(st.sampled_from(["composite", "composite_undone"]), min_size=2, max_size=3),
        fails=st.lists(st.sampled_from([0, 1, 3]), min_size=3, max_size=3),
    )
    def start_some(self, workflows: list[str], fails: list[int]) -> None:
        for workflow, n in zip(workflows, fails, strict=False):
            self.start(workflow, n)

    @precondition(lambda self: self.model.issued)
    @rule(newest=st.integers(1, 3))
    def provider_answers(self, newest: int) -> None:
        """The provider answers the newest tokens (the live ones, mostly), so that executions
        get past their callback to the caught step as often as their callbacks time out."""
        for k in range(min(newest, len(self.model.issued))):
            self.complete_callback(len(self.model.issued) - 1 - k, "same")

    def _drive_to_quiescence(self) -> None:
        """Before time runs out on them, the provider answers the executions WAITING on their
        callback: the drive then takes them past it, to the caught step and its saga."""
        self.restore()
        self.faults.disarm()
        self.store.crash_after_commit = 0
        self.model.die_in_step = False
        for _ in range(300):
            visible = self.queue.visible()
            if visible:
                self._deliver(visible[:1], chain=False)
                continue
            executions = [self.store.inner.get_execution(i) for i in self.ids]
            waiting = [ex for ex in executions if ex.status is Status.WAITING and ex.wait.kind.value == "callback"]
            answered = sum(len(w) for w in self.model.won.values())
            if waiting:
                self.provider_answers(6)
            if not waiting or sum(len(w) for w in self.model.won.values()) == answered:
                break
        super()._drive_to_quiescence()


class HandlesMachine(EngineMachine):
    """The same rules, starting from two callback handles pending at once (``handled``) beside
    another workflow, so that the default tier reaches the handles every run."""

    @initialize(
        others=st.lists(st.sampled_from(["approval", "pair", "signalled"]), max_size=1),
        fails=st.lists(st.sampled_from([0, 1]), min_size=3, max_size=3),
    )
    def start_some(self, others: list[str], fails: list[int]) -> None:
        for workflow, n in zip(["handled", "handled", *others], fails, strict=False):
            self.start(workflow, n)
        for _ in range(20):  # the first handles are sent out: the rules find them pending
            visible = self.queue.visible()
            if len(self.model.handle_tokens) >= 2 or not visible:
                break
            self._deliver(visible[:1], chain=False)

    @precondition(lambda self: self.model.handle_tokens)
    @rule(newest=st.integers(1, 4))
    def provider_answers_handles(self, newest: int) -> None:
        """Both answers come (mostly for the live handles), so that waits commit as often as
        their handles time out."""
        for k in range(min(newest, len(self.model.handle_tokens))):
            self.complete_handle(len(self.model.handle_tokens) - 1 - k, "succeed")

    def _drive_to_quiescence(self) -> None:
        """Before time runs out on them, every handle still pending is answered once (a refused
        answer changes nothing): the drive then takes the waits that are left past their commit."""
        self.restore()
        self.faults.disarm()
        self.store.crash_after_commit = 0
        self.model.die_in_step = False
        for _ in range(100):
            visible = self.queue.visible()
            if not visible:
                break
            self._deliver(visible[:1], chain=False)
        for k in range(len(self.model.handle_tokens)):
            self.complete_handle(k, "succeed")
        super()._drive_to_quiescence()


def _explore(examples: int, *, derandomize: bool, machine: type[EngineMachine] = EngineMachine) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
            derandomize=derandomize,
        ),
    )


@pytest.mark.timeout(300)  # a minute on a quiet machine: above the integration tier's 120 s
def test_engine_invariants_hold_under_random_interleavings():
    """The default tier: the same 8 interleavings every run (a red run is a real finding, never
    a new draw), each up to 40 rules long."""
    _explore(8, derandomize=True)


@pytest.mark.timeout(300)  # like the machine's own default run: above the integration tier's 120 s
def test_the_composites_hold_under_random_interleavings():
    """The default tier for the composites: 4 fixed interleavings, each up to 40 rules long."""
    _explore(4, derandomize=True, machine=CompositeMachine)


@pytest.mark.timeout(300)
def test_callback_handles_hold_under_random_interleavings():
    """The default tier for callback handles: 4 fixed interleavings, each up to 40 rules long."""
    _explore(4, derandomize=True, machine=HandlesMachine)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_engine_invariants_hold_under_a_long_random_exploration():
    """The slow tier (``./scripts/test --slow``): 60 fresh random interleavings."""
    _explore(60, derandomize=False)
