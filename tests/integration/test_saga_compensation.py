"""Saga compensation against moto: reverse order, committed steps only, once per commit."""

from __future__ import annotations

import pytest

from engine import NonRetryableError, Registry, RetryPolicy, step
from engine.errors import AlreadyTerminal, WorkflowDefinitionError
from engine.messages import MessageKind, StepMessage
from engine.ports import FaultPoint
from engine.state import StepStatus
from engine.workflow import Phase
from tests.integration.engine_support import add_workflow, build_rig, dead_letters

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, base=5, jitter="none")


class Ledger:
    """Side effects keyed by idempotency key, as a payment provider would keep them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (what, idempotency key), every call
        self.undo_seen: list[dict] = []
        self.fail_undo: dict[str, int] = {}  # undo name -> failures left (-1: always)

    def do(self, name: str):
        def fn(ctx):
            self.calls.append((name, ctx.idempotency_key))
            return {name: f"{name}-id"}

        fn.__name__ = name
        return fn

    def undo(self, name: str):
        def fn(ctx):
            self.calls.append((f"undo_{name}", ctx.idempotency_key))
            self.undo_seen.append({"result": dict(ctx.result or {}), "failure": dict(ctx.failure or {}), "ctx": ctx})
            left = self.fail_undo.get(name, 0)
            if left:
                self.fail_undo[name] = left - 1 if left > 0 else left
                raise RuntimeError(f"undo {name} failed")
            return {f"undone_{name}": True}

        fn.__name__ = f"undo_{name}"
        return fn

    def undone(self) -> list[str]:
        return [w for w, _ in self.calls if w.startswith("undo_")]


def refuse(ctx):
    raise NonRetryableError("no courier")


@pytest.fixture
def ledger():
    return Ledger()


@pytest.fixture
def reg(ledger):
    reg = Registry()
    saga = [
        step(ledger.do("reserve"), compensate=ledger.undo("reserve"), compensate_retry=QUICK),
        step(ledger.do("note")),  # no compensation: skipped on the way back
        step(ledger.do("charge"), compensate=ledger.undo("charge"), compensate_retry=QUICK),
        step(refuse, name="ship", compensate=ledger.undo("ship")),
    ]
    add_workflow(reg, "order", saga, retry=QUICK)
    add_workflow(reg, "first_fails", [step(refuse, name="ship", compensate=ledger.undo("ship"))], retry=QUICK)
    waiting = [
        step(ledger.do("reserve"), compensate=ledger.undo("reserve")),
        step(ledger.do("charge"), compensate=ledger.undo("charge")),
        step(ledger.do("ship")),
    ]
    add_workflow(reg, "order_ok", waiting, retry=QUICK)
    return reg


def test_a_failure_compensates_the_committed_steps_in_reverse_order(rig, ledger):
    rig.engine.start("order", {"order": 7}, execution_id="o1")
    rig.driver.pump()
    ex = rig.engine.get("o1")
    assert ex.status.value == "COMPENSATED"
    assert ledger.undone() == ["undo_charge", "undo_reserve"], "ship never committed: never undone"
    assert [k for w, k in ledger.calls if w.startswith("undo_")] == ["o1:2:compensate", "o1:0:compensate"]
    charge = ledger.undo_seen[0]
    assert charge["result"] == {"charge": "charge-id"}, "the compensation sees the step's committed result"
    assert charge["failure"]["type"] == "NonRetryableError" and charge["failure"]["step"] == 3
    assert charge["ctx"].phase is Phase.COMPENSATE
    assert ex.error["message"] == "no courier", "the cause stays on the execution"
    assert not dead_letters(rig.aws), "a compensated failure is not parked"
    rig.store.assert_versions_contiguous()


def test_history_shows_forward_attempts_then_compensations(rig, ledger):
    rig.engine.start("order", {}, execution_id="h1")
    rig.driver.pump()
    names = [r.name for r in rig.engine.history("h1")]
    assert names == ["reserve", "note", "charge", "ship", "charge#compensate", "reserve#compensate"]
    undo = rig.engine.history("h1")[-1]
    assert undo.status is StepStatus.COMPLETED and undo.result == {"undone_reserve": True}


def test_a_compensation_retries_by_its_own_policy(rig, ledger):
    ledger.fail_undo["charge"] = 1
    rig.engine.start("order", {}, execution_id="r1")
    rig.driver.pump()
    assert rig.status("r1") == "COMPENSATED"
    assert ledger.undone() == ["undo_charge", "undo_charge", "undo_reserve"]
    record = rig.engine.store.get_step("r1", 2, "charge#compensate")
    assert [(a.attempt, a.outcome.value) for a in record.attempts] == [(1, "failed"), (2, "completed")]
    kinds = {s.message.kind for s in rig.queue.sent if s.message.step == 2 and s.message.attempt == 2}
    assert kinds == {MessageKind.COMPENSATE}


def test_a_compensation_that_fails_for_good_parks_both_errors(rig, ledger):
    ledger.fail_undo["charge"] = -1
    rig.engine.start("order", {}, execution_id="f1")
    rig.driver.pump()
    ex = rig.engine.get("f1")
    assert ex.status.value == "COMPENSATION_FAILED"
    assert ledger.undone() == ["undo_charge", "undo_charge"], "nothing below a failed compensation runs"
    assert ex.error["cause"]["message"] == "no courier"
    assert "undo charge failed" in ex.error["compensation"]["message"]
    (letter,) = dead_letters(rig.aws)
    assert letter["loom"] == "compensation_failed" and letter["execution_id"] == "f1"
    assert letter["error"]["cause"]["message"] == "no courier"
    assert "undo charge failed" in letter["error"]["compensation"]["message"]


def test_nothing_committed_means_a_plain_failure(rig, ledger):
    rig.engine.start("first_fails", {}, execution_id="p1")
    rig.driver.pump()
    assert rig.status("p1") == "FAILED"
    assert ledger.undone() == []


def test_a_cancel_with_compensate_undoes_the_committed_steps(rig, ledger):
    rig.engine.start("order_ok", {}, execution_id="c1")
    rig.driver.deliver(rig.driver.receive(1))  # reserve commits; with chaining on, it may go further
    ex = rig.engine.get("c1")
    committed = ex.current_step
    new = rig.engine.cancel("c1", compensate=True)
    assert new.status.value in ("COMPENSATING", "CANCELLED")
    rig.driver.pump()
    expected = {0: [], 1: ["undo_reserve"], 2: ["undo_charge", "undo_reserve"]}[min(committed, 2)]
    assert ledger.undone() == expected
    if expected:
        assert rig.status("c1") == "COMPENSATED"
        assert rig.engine.get("c1").error["reason"] == "cancelled"
    with pytest.raises(AlreadyTerminal):
        rig.engine.cancel("c1", compensate=True)


def test_cancel_fences_the_running_step_so_its_late_commit_is_never_undone_nor_kept(rig, ledger):
    rig.engine.start("order_ok", {}, execution_id="c2")
    rig.engine.cancel("c2", compensate=True)  # step 0 runs nowhere yet: it is fenced
    record = rig.engine.store.get_step("c2", 0, "reserve")
    assert record.status is StepStatus.FAILED
    rig.driver.pump()
    assert rig.status("c2") == "CANCELLED", "nothing committed: a plain cancel"
    assert ledger.calls == [], "the fenced step's message is stale"


def test_cancel_undoes_a_step_that_committed_before_its_advance(rig, ledger):
    rig.engine.start("order_ok", {}, execution_id="c3")
    rig.store.crash_after_commit = 1  # reserve commits; the worker dies before the execution moves
    rig.driver.deliver(rig.driver.receive(1))
    assert rig.engine.get("c3").current_step == 0
    rig.engine.cancel("c3", compensate=True)
    rig.driver.pump()
    assert rig.status("c3") == "COMPENSATED"
    assert ledger.undone() == ["undo_reserve"]


@pytest.mark.parametrize("point", [FaultPoint.BEFORE_STEP, FaultPoint.AFTER_STEP, FaultPoint.AFTER_CHECKPOINT])
def test_a_crash_at_each_point_of_a_compensation_undoes_each_commit_once(rig, ledger, point):
    rig.engine.start("order", {}, execution_id="x1")
    until_compensating(rig, "x1")
    rig.faults.arm(point.value, step=2)  # charge's compensation (the forward steps are done)
    rig.driver.pump()
    for _ in range(5):  # the crashed attempt's lease lapses; the sweeper re-drives it
        if rig.engine.get("x1").terminal:
            break
        rig.clock.advance(rig.engine.config.lease_seconds * 3)
        rig.engine.sweep()
        rig.driver.pump()
    assert rig.status("x1") == "COMPENSATED"
    assert [info.get("phase") for _, info in rig.faults.fired] == ["compensate"], "the fault fired, once"
    assert ledger.undone().count("undo_reserve") == 1
    # A crash after the compensation ran but before its commit runs it again (at least once);
    # its commit, the undo that counts, is recorded once.
    assert rig.store.commits[("x1", 2)] == 1, "charge committed once"
    assert rig.store.commits[("x1", 2, "charge#compensate")] == 1, "its compensation committed once"
    assert rig.engine.store.get_step("x1", 2, "charge#compensate").status is StepStatus.COMPLETED


def test_a_crash_after_the_compensation_commit_rolls_forward_without_running_it_again(rig, ledger):
    rig.engine.start("order", {}, execution_id="x2")
    rig.faults.arm(FaultPoint.AFTER_STEP.value, step=3)  # no-op: ship fails before AFTER_STEP
    original = rig.store.commit_step

    def commit(execution_id, index, name, attempt, result):
        original(execution_id, index, name, attempt, result)
        if name == "charge#compensate" and not getattr(commit, "done", False):
            commit.done = True
            from tests.integration.engine_support import Crash

            raise Crash("after_compensation_commit")

    rig.store.commit_step = commit
    rig.driver.pump()
    rig.clock.advance(rig.engine.config.lease_seconds * 3)
    rig.engine.sweep()
    rig.driver.pump()
    assert rig.status("x2") == "COMPENSATED"
    assert ledger.undone() == ["undo_charge", "undo_reserve"]


def until_compensating(rig, execution_id: str) -> None:
    """Run the forward steps and the failure; the first compensation message stays queued."""
    for _ in range(20):
        if rig.engine.get(execution_id).status.value == "COMPENSATING":
            return
        rig.driver.deliver(rig.driver.receive(1))
    raise AssertionError("never started compensating")


def test_duplicate_deliveries_of_a_compensation_message_run_it_once(rig, ledger):
    rig.engine.start("order", {}, execution_id="d1")
    until_compensating(rig, "d1")
    ex = rig.engine.get("d1")
    assert ex.status.value == "COMPENSATING" and ex.current_step == 2
    duplicate = StepMessage("d1", 2, 1, MessageKind.COMPENSATE)
    rig.engine.queue.send(duplicate)
    rig.engine.queue.send(duplicate)
    rig.driver.pump()
    assert rig.status("d1") == "COMPENSATED"
    assert ledger.undone() == ["undo_charge", "undo_reserve"]


def test_forward_messages_are_stale_while_compensating(rig, ledger):
    rig.engine.start("order", {}, execution_id="s1")
    rig.driver.pump()
    rig.engine.queue.send(StepMessage("s1", 2, 1, MessageKind.STEP))
    rig.engine.queue.send(StepMessage("s1", 0, 1, MessageKind.REDRIVE))
    rig.driver.pump()
    assert ledger.undone() == ["undo_charge", "undo_reserve"]
    assert [w for w, _ in ledger.calls].count("charge") == 1


def test_step_options_are_validated_and_described(ledger):
    with pytest.raises(WorkflowDefinitionError):
        step(ledger.do("a"), compensate="not callable")
    with pytest.raises(WorkflowDefinitionError):
        step(ledger.do("a"), compensate_retry=QUICK)
    with pytest.raises(WorkflowDefinitionError):
        step(ledger.do("a"), catch=42)
    reg = Registry()
    spec = add_workflow(reg, "d", [step(ledger.do("a"), compensate=ledger.undo("a"), catch=lambda ctx, e: None)]).spec
    assert spec.describe()["steps"][0]["compensate"] == "undo_a"
    assert spec.describe()["steps"][0]["catch"] == "<lambda>"


def test_a_separate_rig_sees_the_same_rules(aws, make_engine, clock, ledger):
    reg = Registry()
    add_workflow(reg, "two", [step(ledger.do("a"), compensate=ledger.undo("a")), step(refuse, name="b")])
    rig = build_rig(aws, make_engine, clock, reg)
    rig.engine.start("two", {}, execution_id="t1")
    rig.driver.pump()
    assert rig.status("t1") == "COMPENSATED"
    assert ledger.undone() == ["undo_a"]


# ------------------------------------------------------------- API, CLI client and the example


def test_the_api_cancels_with_compensate_and_shows_the_history_in_phases(fn) -> None:
    start = {"workflow": "order_saga", "input": {"amount": 3}, "execution_id": "api1"}
    status, _ = fn.api("POST", "/executions", start)
    assert status == 201
    fn.drain()
    status, body = fn.api("GET", "/executions/api1")
    assert body["status"] == "COMPENSATED"
    steps = fn.api("GET", "/executions/api1/history")[1]["steps"]
    assert [(s["name"], s["phase"]) for s in steps] == [
        ("reserve_stock", "forward"),
        ("charge_card", "forward"),
        ("ship", "forward"),
        ("charge_card#compensate", "compensation"),
        ("reserve_stock#compensate", "compensation"),
    ]
    described = {w["name"]: w for w in fn.api("GET", "/workflows")[1]["workflows"]}["order_saga"]
    assert described["steps"][1]["compensate"] == "refund_card"


def test_the_api_cancel_body_is_checked_and_compensate_undoes(fn) -> None:
    fn.api("POST", "/executions", {"workflow": "order_saga", "input": {"courier": "ups"}, "execution_id": "api2"})
    status, body = fn.api("POST", "/executions/api2/cancel", {"compensate": "yes"})
    assert status == 400
    status, body = fn.api("POST", "/executions/api2/cancel", {"compensate": True, "other": 1})
    assert status == 400
    assert fn.api("GET", "/executions/api2")[1]["status"] == "RUNNING", "a refused cancel changes nothing"
    status, body = fn.api("POST", "/executions/api2/cancel", {"compensate": True})
    assert status == 200 and body["status"] == "CANCELLED", "nothing had committed: a plain cancel"


def test_a_dlq_redrive_keeps_a_compensation_failure_for_a_person(rig, ledger):
    from engine.adapters.dlq import SqsDeadLetters
    from engine.dead_letters import redrive

    ledger.fail_undo["charge"] = -1
    rig.engine.start("order", {}, execution_id="q1")
    rig.driver.pump()
    assert rig.status("q1") == "COMPENSATION_FAILED"
    box = SqsDeadLetters(rig.aws["sqs"], rig.aws["DeadLetterQueue"])
    (result,) = redrive(rig.engine, box, 10)
    assert (result.kind, result.execution_id, result.action) == ("compensation_failed", "q1", "kept")
    assert rig.status("q1") == "COMPENSATION_FAILED" and ledger.undone().count("undo_reserve") == 0
    assert len(dead_letters(rig.aws)) == 1, "the record stays in the DLQ"
