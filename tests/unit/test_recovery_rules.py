"""Recovery in seconds (DESIGN.md): a dead worker's redelivered message adopts the attempt it left
without a runner, an attempt in flight elsewhere is looked at again when its lease is out, and the
worker's settings keep a running batch hidden through a missed beat."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

import pytest

from engine.adapters.sqs import SqsQueue
from engine.batch import Heartbeat, queue_wait
from engine.config import EngineConfig
from engine.errors import InvalidInput
from engine.messages import DELAY_ATTRIBUTE, MessageKind, StepMessage
from engine.state import Execution, Status
from engine.verdicts import MessageVerdict, check_message, lapse_wait, may_adopt
from functions.settings import Settings

pytestmark = pytest.mark.unit

CFG = EngineConfig(lease_seconds=60, early_tolerance=1.0, adopt_quiet_seconds=10)
NOW = 1000.0
QUIET = NOW - 15  # the dead worker's last write, one redelivery (20 s less a beat) ago


def ex(**changes: object) -> Execution:
    base = Execution("e", "wf", Status.RUNNING, 3, 7, {}, {}, 0.0, QUIET, attempt=1)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message",
    [
        StepMessage("e", 2),  # a crash between checkpoint and enqueue: step 3 was never sent
        StepMessage("e", 0),  # a chain that began at step 0 and died in step 3
        StepMessage("e", 2, 2, MessageKind.RETRY),  # the retry that ran step 2, chained on, died
        StepMessage("e", 3, 1, MessageKind.REDRIVE),  # an earlier round of the same step (attempt 1 < 2)
    ],
)
def test_a_redelivered_message_the_quiet_execution_moved_past_adopts_its_attempt(message: StepMessage) -> None:
    current = ex(attempt=2) if message.step == 3 else ex()
    check = check_message(message, current, NOW, CFG, redelivered=True)
    assert check.verdict is MessageVerdict.ADOPT
    # What it runs is the sweeper's redrive of the current attempt: guarded, pointing at it.
    redrive = StepMessage.redrive_of(current)
    assert (redrive.step, redrive.attempt, redrive.kind) == (3, current.attempt, MessageKind.REDRIVE)
    assert check_message(redrive, current, NOW, CFG, redelivered=True).verdict is MessageVerdict.RUN


@pytest.mark.parametrize(
    ("message", "execution", "redelivered", "why"),
    [
        (StepMessage("e", 2), ex(), False, "a first delivery: a duplicate, not a dead worker"),
        (StepMessage("e", 2), ex(updated_at=NOW - 3), True, "written 3 s ago: a live chain"),
        (StepMessage("e", 2), ex(status=Status.WAITING), True, "a wait's timer is the sweeper's"),
        (StepMessage("e", 2), ex(status=Status.SLEEPING), True, "a sleep's wake is the sweeper's"),
        (StepMessage("e", 2), ex(status=Status.COMPLETED), True, "ended"),
        (StepMessage("e", 2), ex(catching={"type": "X"}), True, "a catch handler runs with its own record"),
        (StepMessage("e", 2, 1, MessageKind.WAKE), ex(), True, "not a forward step's message"),
        (StepMessage("e", 2, 1, MessageKind.ITEM, item=0), ex(), True, "items have the join"),
        (StepMessage("e", 2, 1, MessageKind.CHILD_DONE), ex(), True, "a child's notice"),
        (StepMessage("e", 4), ex(), True, "ahead of the execution"),
        (StepMessage("e", 3, 2, MessageKind.RETRY), ex(), True, "a later attempt than the current"),
    ],
)
def test_anything_else_stays_stale(message: StepMessage, execution: Execution, redelivered: bool, why: str) -> None:
    assert not may_adopt(message, execution, NOW, CFG, redelivered=redelivered), why
    assert check_message(message, execution, NOW, CFG, redelivered=redelivered).verdict is MessageVerdict.STALE


def test_the_quiet_time_is_a_bound_not_a_guess() -> None:
    assert may_adopt(StepMessage("e", 2), ex(updated_at=NOW - 10), NOW, CFG, redelivered=True)
    assert not may_adopt(StepMessage("e", 2), ex(updated_at=NOW - 9.9), NOW, CFG, redelivered=True)


def test_an_attempt_in_flight_is_looked_at_again_when_its_lease_is_out() -> None:
    assert lapse_wait(NOW - 20, NOW, CFG) == 41  # 40 s of the lease left, plus the early tolerance
    assert lapse_wait(NOW - 100, NOW, CFG) == 1  # out already: at once (SQS's smallest delay)
    assert lapse_wait(NOW, NOW, replace(CFG, lease_seconds=2000)) is None  # past SQS's 900 s: the sweeper's


def settings(**env: str) -> Settings:
    return Settings.from_env({"LOOM_TABLE_NAME": "t", "LOOM_QUEUE_URL": "q", "LOOM_DLQ_URL": "d", **env})


def test_the_worker_settings_derive_the_quiet_time_from_the_heartbeat() -> None:
    template = settings(LOOM_VISIBILITY_TIMEOUT="20", LOOM_HEARTBEAT_SECONDS="5")
    assert template.adopt_quiet_seconds == 10.0
    assert template.engine_config().adopt_quiet_seconds == 10.0
    assert settings().adopt_quiet_seconds == 10.0  # the defaults are the template's
    assert settings(LOOM_VISIBILITY_TIMEOUT="4", LOOM_HEARTBEAT_SECONDS="0").adopt_quiet_seconds == 4.0


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"LOOM_VISIBILITY_TIMEOUT": "20", "LOOM_HEARTBEAT_SECONDS": "10"}, "below half of LOOM_VISIBILITY_TIMEOUT"),
        ({"LOOM_VISIBILITY_TIMEOUT": "0"}, "at least 1 second"),
        ({"LOOM_HEARTBEAT_SECONDS": "-1"}, "must not be negative"),
    ],
)
def test_a_heartbeat_that_cannot_keep_a_batch_hidden_is_refused(env: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        settings(**env)


class Recorder:
    """The queue port's visibility calls, and an event for each."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []
        self.called = threading.Event()

    def change_visibility_many(self, receipts: Sequence[str], timeout_seconds: int) -> list[str]:
        self.calls.append((list(receipts), timeout_seconds))
        self.called.set()
        return []


def test_the_first_beat_is_at_the_batch_s_start() -> None:
    queue = Recorder()
    with Heartbeat(queue, {"m1": "r1", "m2": "r2"}, interval=3600, extend_to=20, beat_first=True):  # type: ignore[arg-type]
        assert queue.called.wait(timeout=10), "no beat at the start"
    assert queue.calls == [(["r1", "r2"], 20)]  # one batch call; the next beat would be an hour on


def _record(sent: object, first: object, delay: object = None) -> dict[str, object]:
    attributes = {"ApproximateReceiveCount": "1"}
    if sent is not None:
        attributes["SentTimestamp"] = str(sent)
    if first is not None:
        attributes["ApproximateFirstReceiveTimestamp"] = str(first)
    held = {} if delay is None else {DELAY_ATTRIBUTE: {"stringValue": str(delay), "dataType": "Number"}}
    return {"attributes": attributes, "messageAttributes": held}


@pytest.mark.parametrize(
    ("record", "waited"),
    [
        (_record(1_000_000, 1_042_500), 42.5),  # SQS's two timestamps, in milliseconds
        (_record(1_000_000, 1_042_500, delay=40), 2.5),  # held back on purpose is not a backlog
        (_record(1_000_000, 1_030_000, delay=40), 0.0),  # received early: no wait, not a negative one
        (_record(1_042_500, 1_000_000), 0.0),  # clocks that disagree
        (_record(None, 1_042_500), 0.0),  # an event without the timestamps (a hand-made test event)
        (_record("soon", 1_042_500), 0.0),
        (_record(1_000_000, 1_042_500, delay="x"), 0.0),
        ({"attributes": None}, 0.0),
    ],
)
def test_the_queues_wait_is_read_from_sqs_own_timestamps(record: dict[str, object], waited: float) -> None:
    assert queue_wait(record) == pytest.approx(waited)


class _Sent:
    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def send_message(self, **kwargs: object) -> dict[str, str]:
        self.calls.append(kwargs)
        return {"MessageId": "m"}


def test_a_delayed_message_carries_its_delay_and_a_prompt_one_nothing_extra() -> None:
    client = _Sent()
    queue = SqsQueue(client, "https://queue", "https://dlq")
    queue.send(StepMessage("e", 1), 0)
    queue.send(StepMessage("e", 1, 2, MessageKind.RETRY), 12)
    assert "MessageAttributes" not in client.calls[0]
    assert client.calls[1]["DelaySeconds"] == 12
    assert client.calls[1]["MessageAttributes"] == {DELAY_ATTRIBUTE: {"DataType": "Number", "StringValue": "12"}}
