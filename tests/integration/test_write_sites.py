"""Every conditional write the adapters make, named, and a lost answer on each changes nothing.

DynamoDB applied the write, its answer was lost (a timeout, a 500), and botocore sent the very
same request again (DESIGN.md, "Write tokens"). ``KINDS`` names every write by its site
(tests/integration/write_sites.py) and the workload scenario that makes it
(tests/integration/write_workload.py). Three checks keep the list whole:

- every store-write call in engine/ is the innermost part of a named kind (static);
- the workload makes every named kind, and no conditional write it makes is unnamed;
- a lost answer on each kind ends its scenario exactly as the scenario ends without the fault.

The moto here honours ``ClientRequestToken`` on TransactWriteItems as DynamoDB does
(loom/local/emulator/moto_tokens.py, which the local stack's emulator applies too).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from moto.dynamodb.responses import DynamoHandler

from engine.adapters.ledger import DynamoLedger
from loom.local.emulator import moto_tokens
from loom.testing import WorkflowTest
from tests.integration.write_sites import LEDGER_WRITE, LostAt, Sites, innermost, static_sites
from tests.integration.write_workload import SCENARIOS, World, ended, registry

pytestmark = pytest.mark.integration

# site -> the scenario whose run makes it (the first write of that site in the run is the one lost)
KINDS: dict[str, str] = {
    "DynamoLedger.apply": "fulfillment",
    "DynamoStore.commit_item <- fanout._attempt <- fanout.run_item": "parallel",
    "DynamoStore.commit_step <- callbacks._succeed <- callbacks.complete": "webhook",
    "DynamoStore.commit_step <- catching._run_marked <- catching.run": "composite_caught",
    "DynamoStore.commit_step <- compensation._run_marked <- compensation.run": "saga",
    "DynamoStore.commit_step <- fan_undo._run_marked <- fan_undo.run": "parallel",
    "DynamoStore.commit_step <- fanout._join_success <- fanout.finish": "parallel",
    "DynamoStore.commit_step <- parking.commit_result <- children.resolve": "children",
    "DynamoStore.commit_step <- parking.commit_result <- signals.deliver": "approval",
    "DynamoStore.commit_step <- steps.run_step <- runner.handle_link": "fulfillment",
    "DynamoStore.commit_step <- steps.run_step <- runner.run_guarded": "fulfillment",
    "DynamoStore.commit_step <- steps.wake <- runner.handle_link": "redeploy_asleep",  # the resumed sleep's wake
    "DynamoStore.commit_step <- steps.wake <- sweeper.sweep_one": "fulfillment",
    "DynamoStore.consume_signal <- parking.consume_committed <- parking.finish_committed": "signal_repeat",
    "DynamoStore.consume_signal <- signals.deliver.<locals>.consume <- parking.commit_result": "approval",
    "DynamoStore.create_execution <- lifecycle.start <- children._start_child": "children",
    "DynamoStore.create_execution <- lifecycle.start <- fan_children.await_child": "kid_items",
    "DynamoStore.create_execution <- lifecycle.start <- runtime.Engine.start": "fulfillment",
    "DynamoStore.create_execution <- lifecycle.start <- schedules._start": "schedules",
    "DynamoStore.decide_join <- fan_undo.run <- runner.undo": "cancel_map",
    "DynamoStore.decide_join <- fanout.finish <- fanout.after_final": "parallel",
    "DynamoStore.delete_schedule <- schedules.carry_out <- schedules.fire_due": "schedules",
    "DynamoStore.fail_item <- fanout._failed <- fanout._attempt": "items",
    # A batch that may start no item declines its slots' next ones (engine/fanout.py).
    "DynamoStore.decline_item <- fanout._decline <- fanout.after_final": "declined",
    "DynamoStore.decide_join <- fanout.finish <- fanout._decline": "declined",
    "DynamoStore.note_parked <- sweeper.Backlog.parked_since <- sweeper._judge": "lost_message",
    "DynamoStore.open_join <- fanout.open_fanout <- fanout.drive": "parallel",
    "DynamoStore.put_execution <- attempts.advance <- catching._run_marked": "composite_caught",
    "DynamoStore.put_execution <- attempts.advance <- fanout._join_success": "parallel",
    "DynamoStore.put_execution <- attempts.advance <- steps.run_step": "fulfillment",
    "DynamoStore.put_execution <- attempts.advance <- steps.wake": "fulfillment",
    "DynamoStore.put_execution <- attempts.fail_execution <- attempts.fail_attempt": "poison",
    "DynamoStore.put_execution <- attempts.schedule_retry <- attempts.fail_attempt": "payment_retry",
    "DynamoStore.put_execution <- attempts.schedule_retry <- catching._fail.<locals>.<lambda>": "caught",
    "DynamoStore.put_execution <- callbacks._heartbeat <- callbacks.complete": "callbacks",
    "DynamoStore.put_execution <- catching.run <- runner.handle_link": "composite_caught",
    "DynamoStore.put_execution <- compensation._schedule_retry <- compensation.fail_attempt.<locals>.<lambda>": "undoes",  # noqa: E501
    "DynamoStore.put_execution <- compensation.advance <- compensation._run_marked": "saga",
    "DynamoStore.put_execution <- compensation.advance <- fan_undo._next": "parallel",
    "DynamoStore.put_execution <- compensation.run <- runner.undo": "saga",
    "DynamoStore.put_execution <- control.migrate <- runtime.Engine.migrate": "migrate",
    "DynamoStore.put_execution <- control.redrive_failed <- runtime.Engine.redrive_failed": "redrive",
    "DynamoStore.put_execution <- definitions.block <- runner.handle_link": "redeploy",
    "DynamoStore.put_execution <- definitions.block <- signals._deliver_if_waiting": "redeploy_signal",
    "DynamoStore.commit_step <- callbacks._keep <- callbacks._while_blocked": "redeploy_callback",
    "DynamoStore.put_execution <- definitions.block <- callbacks._keep": "redeploy_callback",
    "DynamoStore.put_execution <- definitions.block <- sweeper.sweep_one": "redeploy_asleep",
    "DynamoStore.put_execution <- definitions.recheck <- sweeper.sweep_one": "redeploy",
    "DynamoStore.put_execution <- escalation.begin_catch <- escalation.escalate": "composite_caught",
    "DynamoStore.put_execution <- escalation.begin_compensation <- escalation.escalate": "saga",
    "DynamoStore.put_execution <- escalation.give_up_compensation <- compensation.fail_attempt.<locals>.<lambda>": "undoes",  # noqa: E501
    "DynamoStore.put_execution <- fan_undo._next <- fan_undo._run_marked": "parallel",
    "DynamoStore.put_execution <- fan_undo._retry <- fan_undo._failed": "undo_items",
    "DynamoStore.put_execution <- fan_undo.run <- runner.undo": "parallel",
    "DynamoStore.put_execution <- fanout.hand_to_items <- fanout.open_fanout": "parallel",
    "DynamoStore.put_execution <- fanout.keep_lease <- fanout.after_final": "slow_map",
    "DynamoStore.put_execution <- fanout.open_fanout <- fanout.drive": "parallel",
    "DynamoStore.put_execution <- fanout.resume <- fanout.drive": "crash_fanout",
    "DynamoStore.put_execution <- lifecycle.cancel <- lifecycle.cancel_child": "cascade",
    "DynamoStore.put_execution <- lifecycle.cancel <- runtime.Engine.cancel": "cancel_plain",
    "DynamoStore.put_execution <- parking.finish <- callbacks._advance": "webhook",
    "DynamoStore.put_execution <- parking.finish <- parking.commit_result": "approval",
    "DynamoStore.put_execution <- parking.finish <- parking.finish_committed": "signal_repeat",
    "DynamoStore.put_execution <- parking.park <- callbacks._submit": "webhook",
    "DynamoStore.put_execution <- parking.park <- callbacks.begin": "webhook",
    "DynamoStore.put_execution <- parking.park <- children.begin": "children",
    "DynamoStore.put_execution <- parking.park <- signals.begin": "approval",
    "DynamoStore.put_execution <- parking.park <- waits.expire": "heartbeat_missed",
    "DynamoStore.put_execution <- polls.not_yet <- steps.run_step": "webhook",
    "DynamoStore.put_execution <- runner.run_guarded <- runner.handle_link": "fulfillment",
    "DynamoStore.put_execution <- sweeper._index <- sweeper.sweep_one": "composite",
    "DynamoStore.put_execution <- sweeper.sweep_one <- sweeper._sweep_guarded": "lost_message",
    "DynamoStore.put_schedule <- schedules._start <- schedules.carry_out": "schedules",
    # Retention (engine/retention.py): a stamp after the end's grace, and its removal by a redrive.
    "DynamoStore.retain <- retention.stamp <- sweeper.sweep_one": "redrive",
    "DynamoStore.retain <- retention.unstamp <- control.redrive_failed": "redrive",
    "DynamoStore.put_schedule <- schedules.carry_out <- schedules.create_missing": "schedules",
    "DynamoStore.put_schedule <- schedules.carry_out <- schedules.fire_due": "schedules",
    "DynamoStore.put_signal <- signals.send <- runtime.Engine.signal": "approval",
    "DynamoStore.record_failure <- attempts.record_failure <- attempts.fail_attempt": "payment_retry",
    "DynamoStore.record_failure <- attempts.record_failure <- attempts.fail_phase_attempt": "composite_unwound",
    "DynamoStore.record_failure <- fan_undo._failed <- fan_undo._run_marked": "undo_items",
    "DynamoStore.record_failure <- lifecycle.first_to_undo <- lifecycle.cancel": "cancel_fenced",
    # Callback handles (engine/handles.py): created, completed before and during the wait, timed out.
    "DynamoStore.create_handle <- handles.create <- runner.handle_link": "handles",
    "DynamoStore.commit_step <- parking.commit_result <- handles.create": "handles",
    "DynamoStore.put_handle <- handles.complete <- runtime.Engine.complete_callback": "handles",
    "DynamoStore.put_execution <- parking.park <- handles._park": "handles",
    "DynamoStore.commit_step <- parking.commit_result <- handles._commit": "handles",
    "DynamoStore.put_handle <- handles._expire <- handles.settle": "handle_late",
    "DynamoStore.put_execution <- definitions.block <- handles.wake": "redeploy_handle",
}

_FAILURE = "DynamoStore.record_failure <- attempts.record_failure <- attempts.fail_attempt"
_CURSOR = "DynamoStore.put_schedule <- schedules.carry_out <- schedules.fire_due"
_HANDLE = "DynamoStore.put_handle <- handles.complete <- runtime.Engine.complete_callback"
# Kinds that share a site with another (the same engine path, reached from another primitive):
# name -> (site, scenario, which of the site's applied writes in the scenario is lost).
SHARED: dict[str, tuple[str, str, int]] = {
    "callback fail": (_FAILURE, "callbacks", 1),
    "callback retry": ("DynamoStore.put_execution <- attempts.schedule_retry <- attempts.fail_attempt", "callbacks", 1),
    "callback timeout": (_FAILURE, "callbacks", 2),
    "heartbeat timeout": (_FAILURE, "heartbeat_missed", 1),
    "signal timeout": (_FAILURE, "signal_late", 1),
    "item final failure (transaction)": ("DynamoStore.fail_item <- fanout._failed <- fanout._attempt", "items", 4),
    # A stateful poll's checkpoint is the same write: its second one lost must not count a page twice.
    "stateful poll checkpoint": ("DynamoStore.put_execution <- polls.not_yet <- steps.run_step", "polled_state", 2),
    "second child start": ("DynamoStore.create_execution <- lifecycle.start <- children._start_child", "children", 2),
    # the sweep's cursor writes in the schedules scenario, after hourly's and skip's claims at 01:00
    "schedule claim after an outage (run_once)": (_CURSOR, "schedules", 3),
    "schedule missed (skip)": (_CURSOR, "schedules", 4),
    "schedule reset (a changed expression)": (_CURSOR, "schedules", 5),
    "schedule created by a sweep": (_CURSOR, "schedules", 6),
    # The handles scenario's handle writes: a completes before the wait (the kind's), b's
    # heartbeat, then b's completion, which settles the wait.
    "handle heartbeat": (_HANDLE, "handles", 2),
    "handle completion that settles the wait": (_HANDLE, "handles", 3),
    # A blocked execution's recheck: the first finds nothing matching, the second resumes it.
    "blocked execution resumed": (
        "DynamoStore.put_execution <- definitions.recheck <- sweeper.sweep_one",
        "redeploy",
        2,
    ),
}
CASES = {site: (site, scenario, 1) for site, scenario in KINDS.items()} | SHARED

_TIMES = ("last_fired", "next_fire", "pending")
# What each cursor write case loses (schedules scenario): the workflow, how the write conditions
# on the cursor, the expression it writes and which of its times it sets (see _cursor_write).
CURSOR_WRITES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "DynamoStore.put_schedule <- schedules.carry_out <- schedules.create_missing": (
        "daily",
        "create",
        "cron(0 12 * * ? *)",
        ("next_fire",),
    ),
    _CURSOR: ("hourly", "update", "rate(1 hour)", ("next_fire", "pending")),  # the claim
    "DynamoStore.put_schedule <- schedules._start <- schedules.carry_out": (
        "hourly",
        "update",
        "rate(1 hour)",
        ("last_fired", "next_fire"),  # the clear of the claim
    ),
    "DynamoStore.delete_schedule <- schedules.carry_out <- schedules.fire_due": ("gone", "delete", "", ()),
    "schedule claim after an outage (run_once)": ("hourly", "update", "rate(1 hour)", _TIMES),
    "schedule missed (skip)": ("skip", "update", "rate(1 hour)", ("last_fired", "next_fire")),
    "schedule reset (a changed expression)": ("daily", "update", "cron(30 12 * * ? *)", ("next_fire",)),
    "schedule created by a sweep": ("fresh", "create", "rate(1 hour)", ("next_fire",)),
}


def _cursor_write(request: dict[str, Any]) -> tuple[str, str, str, tuple[str, ...]]:
    """What a lost cursor write of the lossy run (eid ``lost``) was, as CURSOR_WRITES says it."""
    item = request.get("Item")
    name = (item or request["Key"])["SK"]["S"].removeprefix("SCHED#lost-")
    if item is None:
        return name, "delete", "", ()
    verb = "create" if request["ConditionExpression"].startswith("attribute_not_exists") else "update"
    return name, verb, item["expression"]["S"], tuple(t for t in _TIMES if t in item)


@dataclass
class Bench:
    t: WorkflowTest
    world: World
    sites: Sites
    lost: LostAt

    def drive(self, scenario: str, eid: str) -> object:
        self.sites.scenario = scenario
        began = self.t.clock.now()
        SCENARIOS[scenario](self.t, self.world, eid)
        began = self.world.origins.get(eid, began)
        # The virtual time it took: a write taken for another's waits for a lease or a timeout.
        return {"ended": ended(self.t, self.world, scenario, eid), "took": self.t.clock.now() - began}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Bench]:
    monkeypatch.setattr(DynamoHandler, "transact_write_items", moto_tokens.transact_write_items)
    moto_tokens.forget()
    world = World()
    with WorkflowTest(registry(world), backend="moto") as t:
        world.t = t
        client = t.store._db  # type: ignore[attr-defined]
        t.engine.services = {"ledger": DynamoLedger(client, t.store._table)}  # type: ignore[attr-defined]
        yield Bench(t, world, Sites(client), LostAt(client))


def test_every_store_write_in_the_engine_is_a_named_kind() -> None:
    named = {innermost(site) for site in KINDS if site != LEDGER_WRITE}
    assert static_sites() - named == set(), "a conditional write site in engine/ that KINDS does not name"
    assert named - static_sites() == set(), "KINDS names a site engine/ no longer has"


# Every scenario in one test: 45 s on the shared machine at load 5, 114 s at load 10 (under -n 2),
# past the integration tier's 120 s with a little more load (docs/notes/2026-12-02-write-sites-schedules.md).
@pytest.mark.timeout(300)
def test_the_workload_makes_every_named_write_and_no_unnamed_one(bench: Bench) -> None:
    for scenario in SCENARIOS:
        bench.drive(scenario, f"w-{scenario}")
    unnamed = set(bench.sites.seen) - set(KINDS)
    assert unnamed == set(), f"conditional writes no kind names: {sorted(unnamed)}"
    never = set(KINDS) - set(bench.sites.seen)
    assert never == set(), f"named writes the workload never made: {sorted(never)}"
    for site, scenario in KINDS.items():
        assert site in bench.sites.by_scenario.get(scenario, set()), (site, scenario)


# A scenario's outcome without a fault, once per process: it does not depend on what ran before
# it in the table (every case starts from an emptied one; the ids are replaced by X).
_CALM: dict[str, object] = {}


# 102 cases (the first 81 took about 140 s of CPU): the slow tier (CI runs it), so that the README's test command
# stays within its 8 minutes; the enumeration itself (the two tests above) runs by default.
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lost_answer_on_any_conditional_write_changes_nothing(bench: Bench, case: str) -> None:
    site, scenario, nth = CASES[case]
    calm = _CALM.get(scenario)
    if calm is None:
        calm = _CALM[scenario] = bench.drive(scenario, "calm")
    bench.lost.arm(site, nth)
    lossy = bench.drive(scenario, "lost")
    assert bench.lost.lost == [site], "the scenario never made that write"
    if case in CURSOR_WRITES:
        assert _cursor_write(bench.lost.lost_requests[0]) == CURSOR_WRITES[case], "another cursor write was lost"
    assert lossy == calm
