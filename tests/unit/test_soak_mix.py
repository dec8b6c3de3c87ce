"""The soak's mixed plan: every kind drawn at 1,000 executions, each with the end it expects and
only the knobs it can obey, the plan a function of the seed; and the kind checks that judge the
soak's answers to its waits fail when they should."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest

from chaos.soak import PlannedExecution, SoakSummary, make_plan
from chaos.soak_checks import Read, check_callback, check_saga, check_saga_undone, check_signal
from chaos.soak_drive import Answers, callback_body
from chaos.soak_mix import CALLBACK_MODES, PIPELINE_STEPS, SIGNAL_MODES, Kind, child_ids
from engine.state import Attempt, AttemptOutcome, Execution, Signal, Status, StepRecord, StepStatus

pytestmark = pytest.mark.unit

WORKFLOWS = {
    Kind.CHAIN: {"pipeline", "payment_retry"},
    Kind.SLEEP: {"chaos_nap"},
    Kind.CALLBACK: {"payment_webhook"},
    Kind.SIGNAL: {"chaos_approval"},
    Kind.MAP: {"chaos_fanout"},
    Kind.CHILD: {"order_with_children"},
    Kind.SAGA: {"order_saga"},
    Kind.SAGA_UNDONE: {"chaos_saga", "order_saga"},
    Kind.COMPOSITE: {"chaos_composite"},
}


@pytest.fixture(scope="module")
def plan():
    return make_plan(1000, 1)


def test_every_kind_is_drawn_with_its_workflows_at_1000_executions(plan) -> None:
    kinds = plan.kinds()
    assert set(kinds) == {k.value for k in Kind}
    assert all(n >= 20 for n in kinds.values()), kinds
    assert kinds[Kind.CHAIN.value] == max(kinds.values())  # chains stay the largest share
    seen: dict[str, set[str]] = {}
    for e in plan.executions:
        seen.setdefault(e.kind, set()).add(e.workflow)
    assert seen == {k.value: w for k, w in WORKFLOWS.items()}
    callbacks = Counter(e.drive["callback"] for e in plan.executions if "callback" in e.drive)
    signals = Counter(e.drive["signal"] for e in plan.executions if "signal" in e.drive)
    assert set(callbacks) == set(CALLBACK_MODES) and set(signals) == set(SIGNAL_MODES)


def test_the_plan_and_its_digest_are_a_function_of_the_seed(plan) -> None:
    again = make_plan(1000, 1)
    assert again == plan and again.digest == plan.digest
    assert make_plan(1000, 2).digest != plan.digest
    # The digest covers what each execution expects: a changed end is another plan.
    first = plan.executions[0]
    changed = replace(plan, executions=(replace(first, expect="FAILED"), *plan.executions[1:]))
    assert changed.digest != plan.digest


def test_each_kind_expects_its_end(plan) -> None:
    for e in plan.executions:
        if e.kind == Kind.SAGA_UNDONE.value:
            assert e.expect == "COMPENSATED" and "courier" not in e.input
        elif e.kind == Kind.COMPOSITE.value:
            undone = e.input.get("ship") == "refuse" and e.input.get("fallback") == "refuse"
            assert e.expect == ("COMPENSATED" if undone else "COMPLETED")
            assert e.drive["role"] == ("undone" if undone else e.drive["role"])
        else:
            assert e.expect == "COMPLETED", e
        if e.kind == Kind.SAGA.value:
            assert e.input["courier"]  # a courier takes it: the saga completes
    ends = plan.expected()
    assert ends["COMPENSATED"] > 0 and ends["COMPLETED"] + ends["COMPENSATED"] == 1000


def test_knobs_only_where_the_kind_can_obey_them(plan) -> None:
    knobs = Counter(k for e in plan.executions for k in e.knobs)
    assert set(knobs) == {"crash_in_step", "crash_after_checkpoint", "transient_failure"}
    assert 200 <= sum(knobs.values()) <= 450  # about a third
    by_kind: dict[str, set[str]] = {}
    for e in plan.executions:
        by_kind.setdefault(e.kind, set()).update(e.knobs)
        chaos = e.input["chaos"]
        if "transient_failure" in e.knobs:
            assert e.workflow == "pipeline" and set(chaos["fail"]) <= set(PIPELINE_STEPS)
        if "crash_in_step" in e.knobs:
            where = e.input["child_chaos"] if e.kind == Kind.CHILD.value else chaos
            assert where["crash_after_effect"] is True
        if "crash_after_item" in chaos:
            assert e.kind in (Kind.MAP.value, Kind.COMPOSITE.value) and chaos["crash_after_item"][0] < 6
        if not e.knobs:
            assert not ({"crash", "fail", "crash_after_checkpoint", "crash_after_item"} & set(chaos))
    # Every kind takes some knob; a crash inside a step only where the examples' steps run.
    assert all(by_kind[k.value] for k in Kind)
    assert "crash_in_step" not in by_kind[Kind.SLEEP.value] | by_kind[Kind.MAP.value]


def test_children_are_named_as_the_engine_names_them() -> None:
    assert child_ids(Kind.CHILD, "p") == ("p--0-1", "p--1-1")
    assert child_ids(Kind.COMPOSITE, "p") == ("p--1-1",)
    assert child_ids(Kind.CHAIN, "p") == ()


class FakeTarget:
    """What the kind checks read beyond the execution itself: its signals."""

    def __init__(self, history: list[StepRecord], signals: list[Signal] = (), entries: dict | None = None) -> None:
        self._history, self._signals, self._entries = history, list(signals), entries or {}

    def read(self) -> Read:
        return Read(EX, self._history, self._entries)

    @property
    def store(self) -> SimpleNamespace:
        return SimpleNamespace(signals=lambda eid: self._signals)


def seen(t: FakeTarget) -> tuple[FakeTarget, Read]:
    return t, t.read()


def done(ex_id: str, index: int, result: dict) -> StepRecord:
    attempt = Attempt(1, 0.0, 1.0, AttemptOutcome.COMPLETED)
    return StepRecord(ex_id, index, "wait", StepStatus.COMPLETED, (attempt,), result)


EX = Execution("soak-7", "payment_webhook", Status.COMPLETED, 9, 4, {}, {}, 0.0, 0.0)
CALLBACK = PlannedExecution(7, "payment_webhook", {}, (), "callback", "COMPLETED", {"callback": "twice", "step": 1})


def test_callback_check_wants_one_winner_and_the_winners_body() -> None:
    t = FakeTarget([done(EX.id, 1, callback_body(EX.id)["result"])])
    assert check_callback(*seen(t), CALLBACK, Answers([(200, False), (200, True)])) == []
    assert check_callback(*seen(t), CALLBACK, Answers([(200, False), (409, False)])) == []
    assert check_callback(*seen(t), CALLBACK, Answers([(200, False), (200, False)]))  # two winners
    assert check_callback(*seen(t), CALLBACK, Answers([(200, True)]))  # nobody won
    assert check_callback(*seen(t), CALLBACK, Answers([(200, True)], ambiguous=1)) == []  # the first try won
    assert check_callback(*seen(t), CALLBACK, Answers([(200, False), (500, False)]))
    assert check_callback(*seen(t), CALLBACK, None)
    other = FakeTarget([done(EX.id, 1, {"paid": "other"})])
    assert check_callback(*seen(other), CALLBACK, Answers([(200, False)]))


def test_signal_check_wants_each_kept_and_exactly_one_consumed() -> None:
    key = "1#a"
    record = StepRecord(
        EX.id,
        1,
        "approval",
        StepStatus.COMPLETED,
        (Attempt(1, 0, 1, AttemptOutcome.COMPLETED, detail={"signal": key}),),
    )
    one = Signal(EX.id, "approval", key, {}, 0.0, consumed_by="1:1")
    extra = Signal(EX.id, "approval", "2#b", {}, 0.0)
    planned = replace(CALLBACK, drive={"signal": "burst", "step": 1, "name": "approval"})
    ok = FakeTarget([record], [one, extra])
    assert check_signal(*seen(ok), planned, Answers([(200, False), (200, False)])) == []
    assert check_signal(*seen(ok), planned, Answers([(200, False), (409, False)]))
    assert check_signal(*seen(FakeTarget([record], [one])), planned, Answers([(200, False), (200, False)]))
    none_taken = FakeTarget([record], [replace(one, consumed_by=None), extra])
    assert check_signal(*seen(none_taken), planned, Answers([(200, False), (200, False)]))


def test_a_completed_saga_undoes_nothing() -> None:
    assert check_saga(*seen(FakeTarget([])), CALLBACK, None) == []
    assert check_saga(*seen(FakeTarget([], entries={f"{EX.id}:0:compensate": {}})), CALLBACK, None)


def test_the_summary_reports_counts_by_kind() -> None:
    summary = SoakSummary(1, "d", 3, {}, kinds={"chain": 2, "saga_undone": 1})
    summary.by_kind = {"chain": {"COMPLETED": 2}, "saga_undone": {"COMPENSATED": 1}}
    text = summary.render()
    assert "chain=2 {'COMPLETED': 2}" in text and "saga_undone=1 {'COMPENSATED': 1}" in text


def test_a_failed_saga_must_undo_each_committed_step_once_in_reverse_order() -> None:
    ex = replace(EX, id="s-1", workflow="chaos_saga", status=Status.COMPENSATED, current_step=0)
    won = (Attempt(1, 0.0, 1.0, AttemptOutcome.COMPLETED),)

    def rec(index: int, name: str, finished: float = 1.0) -> StepRecord:
        return StepRecord(ex.id, index, name, StepStatus.COMPLETED, won, {}, finished_at=finished)

    forward = [rec(0, "reserve"), rec(1, "charge")]
    landed = {f"s-1:{i}:compensate": {"effect": {"kind": "undo"}, "runs": 1} for i in (0, 1)}
    planned = replace(CALLBACK, workflow="chaos_saga", kind="saga_undone", expect="COMPENSATED", drive={})

    def check(history: list[StepRecord], entries: dict) -> list[str]:
        return check_saga_undone(FakeTarget([]), Read(ex, history, entries), planned, None)

    undo = [rec(1, "charge#compensate", 2.0), rec(0, "reserve#compensate", 3.0)]
    assert check(forward + undo, landed) == []
    backwards = [rec(1, "charge#compensate", 3.0), rec(0, "reserve#compensate", 2.0)]
    assert check(forward + backwards, landed)  # reserve undone before charge
    assert check(forward + undo[:1], landed)  # reserve never undone
    assert check(forward + undo, {"s-1:1:compensate": landed["s-1:1:compensate"]})  # an undo that never landed
