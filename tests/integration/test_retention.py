"""Retention on the real table (moto): every item an ended execution left gets its expiry, the
readers hide it once that has passed, and TTL's deletes take all of it (engine/retention.py)."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Registry, Status, map_items, step
from engine.config import EngineConfig
from engine.errors import ExecutionNotFound, NonRetryableError
from engine.retention import stamp
from engine.sweeper import SweepAction, sweep_one
from engine.workflow import wait_for_signal
from loom.ttl import Reaper, reap, ttl_attribute
from tests.integration.engine_support import add_workflow, build_rig

pytestmark = pytest.mark.integration

DAY = 86400.0
CFG = EngineConfig(retention_seconds=3 * DAY)


def _items(ctx: Any) -> Any:
    return ctx.data["items"]


@pytest.fixture
def reg() -> Registry:
    reg = Registry()
    add_workflow(
        reg,
        "fanned",
        [
            step(lambda ctx: {"n": len(ctx.data["items"])}, name="count"),
            wait_for_signal("go"),
            map_items(items=_items, run=lambda ctx: {"x": ctx.item}, name="double", max_concurrency=2),
            step(lambda ctx: {"done": True}, name="close"),
        ],
    )

    def broken(ctx: Any) -> Any:
        if not ctx.data.get("fixed"):
            raise NonRetryableError("not yet")
        return {}

    add_workflow(reg, "brittle", [step(lambda ctx: {}, name="first"), step(broken, name="broken")])
    return reg


@pytest.fixture
def rig(aws, make_engine, clock, reg):
    return build_rig(aws, make_engine, clock, reg, config=CFG)


def _table(rig) -> list[dict[str, Any]]:
    ddb, table = rig.aws["dynamodb"], rig.aws["Table"]
    return ddb.scan(TableName=table, ConsistentRead=True)["Items"]


def _of(rig, execution_id: str) -> list[dict[str, Any]]:
    return [i for i in _table(rig) if execution_id in i["PK"]["S"]]


def _finish_fanned(rig, execution_id: str) -> None:
    rig.engine.start("fanned", {"items": [1, 2, 3, 4, 5]}, execution_id=execution_id)
    rig.driver.pump()
    rig.engine.signal(execution_id, "go", {"ok": 1})
    rig.driver.pump()
    assert rig.engine.get(execution_id).status is Status.COMPLETED


def test_every_item_of_an_ended_execution_gets_its_expiry_after_the_grace_and_then_leaves_the_due_index(rig):
    _finish_fanned(rig, "f1")
    ended = rig.engine.get("f1")
    assert ended.expires_at == pytest.approx(ended.updated_at + 3 * DAY)
    kinds = {i["SK"]["S"].split("#")[0] or "#META" for i in _of(rig, "f1")}
    assert {"STEP", "SIGNAL", "FAN", "ITEM", "#META"} <= kinds  # history, the signal, the join, its items

    rig.clock.advance(CFG.end_grace_seconds - 1)
    rig.engine.sweep()  # not due yet: nothing stamped
    # Not even the execution item carries the TTL attribute yet: it is stamped last, so TTL can
    # never delete it and leave the rest unstamped.
    assert not any("expires_at" in i for i in _of(rig, "f1"))

    rig.clock.advance(2)
    report = rig.engine.sweep()
    assert report.retained == 1
    want = str(int(ended.expires_at) + (ended.expires_at % 1 > 0))
    assert {i.get("expires_at", {}).get("N") for i in _of(rig, "f1")} == {want}
    after = rig.engine.get("f1")
    assert after.next_wake_at is None and after.expires_at == ended.expires_at
    assert "GSI1PK" not in next(i for i in _of(rig, "f1") if i["SK"]["S"] == "#META")
    assert rig.engine.sweep().retained == 0  # stamped once


def test_a_sweep_that_stops_half_way_leaves_it_due_and_the_next_one_finishes_without_writing_twice(rig):
    _finish_fanned(rig, "f2")
    rig.clock.advance(CFG.end_grace_seconds + 1)
    ex = rig.engine.get("f2")
    parts = rig.engine
    assert stamp(parts, ex, limit=3) is False  # a sweep that ran out of writes (or died here)
    assert sum("expires_at" in i for i in _of(rig, "f2")) == 3  # the execution item not among them
    left = len(_of(rig, "f2")) - 3
    assert rig.engine.get("f2").next_wake_at is not None  # still due
    action, _ = sweep_one(parts, "f2", rig.clock.now())
    assert action is SweepAction.RETAINED
    assert all("expires_at" in i for i in _of(rig, "f2"))
    assert parts.store.retain("f2", ex.expires_at, 1000).written == 0  # nothing left to write
    assert left > 0


def test_a_write_that_lands_after_the_end_but_within_the_grace_is_stamped_too(rig, aws):
    _finish_fanned(rig, "f3")
    ex = rig.engine.get("f3")
    # A worker that was still running an attempt when the execution ended writes its record late.
    aws["dynamodb"].put_item(
        TableName=aws["Table"], Item={"PK": {"S": "EXEC#f3"}, "SK": {"S": "STEP#099#late"}, "status": {"S": "RUNNING"}}
    )
    rig.clock.advance(CFG.end_grace_seconds + 1)
    rig.engine.sweep()
    late = next(i for i in _of(rig, "f3") if i["SK"]["S"] == "STEP#099#late")
    assert float(late["expires_at"]["N"]) >= ex.expires_at


def test_past_its_retention_an_execution_is_hidden_from_readers_and_ttl_deletes_every_item(rig, aws):
    _finish_fanned(rig, "f4")
    rig.engine.start("fanned", {"items": [1]}, execution_id="alive")
    rig.driver.pump()  # waits for its signal: never expires
    rig.clock.advance(CFG.end_grace_seconds + 1)
    rig.engine.sweep()
    rig.clock.advance(3 * DAY)
    with pytest.raises(ExecutionNotFound, match="retention has passed"):
        rig.engine.get("f4")
    with pytest.raises(ExecutionNotFound):
        rig.engine.history("f4")
    assert [e.id for e in rig.engine.list().items] == ["alive"]
    assert _of(rig, "f4")  # DynamoDB deletes some time later: hidden first
    deleted = reap(aws["dynamodb"], aws["Table"], "expires_at", rig.clock.now())
    assert _of(rig, "f4") == [] and deleted > 5
    assert rig.engine.get("alive").status is Status.WAITING and _of(rig, "alive")


def test_a_redrive_takes_the_stamps_away_so_nothing_of_a_running_execution_expires(rig):
    rig.engine.start("brittle", {}, execution_id="b1")
    rig.driver.pump()
    failed = rig.engine.get("b1")
    assert failed.status is Status.FAILED and failed.expires_at is not None
    rig.clock.advance(CFG.end_grace_seconds + 1)
    rig.engine.sweep()
    assert all("expires_at" in i for i in _of(rig, "b1"))
    again = rig.engine.redrive_failed("b1")
    assert again.expires_at is None
    assert not any("expires_at" in i for i in _of(rig, "b1"))


def test_with_retention_off_nothing_expires_and_an_ended_execution_leaves_the_due_index(aws, make_engine, clock, reg):
    rig = build_rig(aws, make_engine, clock, reg, config=EngineConfig(retention_seconds=0))
    _finish_fanned(rig, "k1")
    ended = rig.engine.get("k1")
    assert ended.next_wake_at is None and ended.expires_at is None
    assert not any("expires_at" in i for i in _of(rig, "k1"))


def test_the_kits_ttl_deletes_only_what_has_expired_and_only_on_a_table_with_ttl_on(aws):
    ddb, table = aws["dynamodb"], aws["Table"]
    assert ttl_attribute(ddb, table) == "expires_at"  # template.yaml's TimeToLiveSpecification, applied
    for i, at in enumerate([100, 200, None]):
        item = {"PK": {"S": f"T#{i}"}, "SK": {"S": "x"}}
        ddb.put_item(TableName=table, Item=item | ({} if at is None else {"expires_at": {"N": str(at)}}))
    assert reap(ddb, table, "expires_at", 150) == 1
    left = sorted(i["PK"]["S"] for i in ddb.scan(TableName=table)["Items"] if i["PK"]["S"].startswith("T#"))
    assert left == ["T#1", "T#2"]
    reaper = Reaper(ddb, table, ttl_attribute(ddb, table), clock=lambda: 250.0)
    assert reaper.maybe_reap() == 1 and reaper.maybe_reap() == 0  # once a period
