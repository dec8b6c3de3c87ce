"""Fan-out's pure parts: the completion policy, the window, the shards, the specs, the messages."""

from __future__ import annotations

import pytest

from engine import map_items, parallel
from engine.errors import MalformedMessage, WorkflowDefinitionError
from engine.fanout_spec import FanKind
from engine.join import (
    MAX_ITEMS,
    MAX_SHARDS,
    CompletionPolicy,
    JoinVerdict,
    judge_join,
    next_item,
    shard_of_item,
    shards_for,
    shards_of_page,
    started_items,
    to_resend,
)
from engine.messages import MessageKind, StepMessage
from engine.workflow import StepContext, sleep, step, wait_for_signal

C, S, F = JoinVerdict.CONTINUE, JoinVerdict.SUCCEED, JoinVerdict.FAIL


@pytest.mark.parametrize(
    ("n", "ok", "failed", "policy", "verdict"),
    [
        (3, 0, 0, CompletionPolicy(), C),
        (3, 2, 0, CompletionPolicy(), C),
        (3, 3, 0, CompletionPolicy(), S),  # default: every item must succeed
        (3, 1, 1, CompletionPolicy(), F),  # ... so the first failure decides
        (0, 0, 0, CompletionPolicy(), S),  # nothing to do
        (5, 3, 2, CompletionPolicy(tolerated_failures=2), S),
        (5, 2, 2, CompletionPolicy(tolerated_failures=2), C),
        (5, 1, 3, CompletionPolicy(tolerated_failures=2), F),  # more than tolerated: fail at once
        (10, 5, 2, CompletionPolicy(tolerated_failure_percentage=20), C),
        (10, 8, 2, CompletionPolicy(tolerated_failure_percentage=20), S),
        (10, 1, 3, CompletionPolicy(tolerated_failure_percentage=20), F),
        (10, 3, 0, CompletionPolicy(min_successful=3), S),  # early success
        (10, 2, 7, CompletionPolicy(min_successful=3), C),  # 1 left: still reachable
        (10, 2, 8, CompletionPolicy(min_successful=3), F),  # out of reach
        (10, 2, 1, CompletionPolicy(min_successful=3, tolerated_failures=0), F),
        (2, 2, 0, CompletionPolicy(min_successful=5), S),  # more than n: all of them
        (4, 3, 1, CompletionPolicy(tolerated_failures=1, tolerated_failure_percentage=10), F),  # both apply
    ],
)
def test_judge_join(n, ok, failed, policy, verdict):
    assert judge_join(n, ok, failed, policy) is verdict


def test_the_window_frees_one_slot_per_final_item():
    assert started_items(10, 3, []) == {0, 1, 2}
    assert next_item(1, 10, 3) == 4 and next_item(8, 10, 3) is None
    assert started_items(10, 3, [1]) == {0, 1, 2, 4}
    assert to_resend(10, 3, [1]) == [0, 2, 4]
    assert to_resend(10, 3, range(10)) == []
    # however the finals fall, never more than the window is re-sent
    assert all(len(to_resend(50, 5, range(k))) <= 5 for k in range(50))


def test_items_spread_over_at_most_32_shards():
    assert shards_for(0) == 1 and shards_for(200) == 1 and shards_for(201) == 2
    assert shards_for(10_000) == MAX_SHARDS
    counts = [0] * MAX_SHARDS
    for i in range(10_000):
        counts[shard_of_item(i, MAX_SHARDS)] += 1
    assert max(counts) - min(counts) <= 1, "no hot partition"


def test_a_page_spans_the_shards_of_its_own_indexes():
    assert shards_of_page(1, 1, 2) == [1] and shards_of_page(400, 1, 3) == [1]
    assert shards_of_page(5, 2, 3) == [0, 2] and shards_of_page(0, 100, 3) == [0, 1, 2]
    assert shards_of_page(7, 0, 3) == []


def noop(ctx):
    return None


@pytest.mark.parametrize(
    "build",
    [
        lambda: parallel(noop, min_successful=2),
        lambda: parallel(min_successful=1),
        lambda: parallel(noop, max_concurrency=-1),
        lambda: map_items(items=lambda c: [], run=noop, max_concurrency=-1),
        lambda: map_items(items=lambda c: [], run=noop, max_concurrency=2.5),
        lambda: parallel(sleep(seconds=1)),
        lambda: parallel(wait_for_signal("go")),
        lambda: parallel(parallel(noop)),
        lambda: parallel(42),
        lambda: map_items(items=[1, 2], run=noop),
        lambda: map_items(items=lambda c: [], run=noop, tolerated_failures=-1),
        lambda: map_items(items=lambda c: [], run=noop, tolerated_failure_percentage=101),
        lambda: map_items(items=lambda c: [], run=noop, min_successful=0),
        lambda: map_items(items=lambda c: [], run=noop, name="no spaces"),
        lambda: map_items(items=lambda c: [], run=noop, compensate=3),
    ],
)
def test_bad_definitions_are_refused(build):
    with pytest.raises(WorkflowDefinitionError):
        build()


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"semantics": "at_most_once"}, "at_most_once"),
        ({"timeout": 5}, "timeout"),
        ({"catch": lambda ctx, err: {}}, "catch"),
    ],
)
def test_item_options_the_runner_would_ignore_are_refused(option, said):
    item = step(noop, name="item", **option)
    for build in (lambda: parallel(item, noop), lambda: map_items(items=lambda c: [], run=item)):
        with pytest.raises(WorkflowDefinitionError, match=said):
            build()


def test_no_window_and_no_branches_are_the_references_not_errors():
    """Lambda durable functions take an empty parallel (an empty batch) and a max_concurrency
    of 0 or none as no limit; both were refused at definition here."""
    assert parallel(noop, noop, noop, max_concurrency=0).max_concurrency == 3
    assert parallel(noop, noop).max_concurrency == 2
    empty = parallel(name="nothing")
    assert empty.branches == () and empty.max_concurrency == 1 and empty.compensate is None
    for window in (0, None):
        assert map_items(items=lambda c: [], run=noop, max_concurrency=window).max_concurrency == MAX_ITEMS
    assert map_items(items=lambda c: [], run=noop).max_concurrency == 10, "Loom's default window stays 10"


def test_specs_keep_their_items_policy_and_kind():
    quick = step(noop, name="quick")
    spec = parallel(quick, noop, name="both")
    assert spec.kind is FanKind.PARALLEL and spec.max_concurrency == 2
    assert spec.item_spec(0).name == "quick" and spec.item_spec(1).name == "noop"
    m = map_items(items=lambda c: [], run=noop, max_concurrency=50, min_successful=2, compensate=noop)
    assert m.kind is FanKind.MAP and m.policy.min_successful == 2 and m.compensates_items


def test_item_messages_carry_their_index_and_old_bodies_stay_valid():
    msg = StepMessage("e1", 2, 1, MessageKind.ITEM, item=7)
    assert StepMessage.decode(msg.encode()) == msg
    plain = StepMessage("e1", 2)
    assert '"item"' not in plain.encode() and StepMessage.decode(plain.encode()).item is None
    with pytest.raises(MalformedMessage):
        StepMessage.decode('{"execution_id":"e1","step":2,"kind":"item","item":-1}')
    with pytest.raises(MalformedMessage):
        StepMessage.decode('{"execution_id":"e1","step":2,"kind":"item"}')


def test_an_items_idempotency_key_names_its_index():
    ctx = StepContext("e1", "w", 3, "price", 1, {}, None, item_index=4)
    assert ctx.idempotency_key == "e1:3:4"
    assert StepContext("e1", "w", 3, "price", 1, {}, None).idempotency_key == "e1:3"


def test_results_page_through_a_stored_marker():
    seen = []

    def pages(step, start, count):
        seen.append((step, start, count))
        return list(range(start, start + count))

    data = {"price": {"$loom": "results", "step": 1, "count": 5, "stored": True}}
    ctx = StepContext("e1", "w", 2, "next", 1, data, None, pages=pages)
    assert list(ctx.results("price", page_size=2)) == [0, 1, 2, 3, 4]
    assert seen == [(1, 0, 2), (1, 2, 2), (1, 4, 1)]
    with pytest.raises(KeyError):
        list(ctx.results("missing"))
