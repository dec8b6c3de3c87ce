"""The sweeper's share of the budget between shards, decided without I/O (engine/sweeper.py)."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.sweeper import first_shard_at, plan_round

pytestmark = pytest.mark.unit


def test_the_budget_is_split_evenly_up_to_a_page() -> None:
    assert plan_round([2, 3, 0, 1], 500, 100) == [(2, 100), (3, 100), (0, 100), (1, 100)]
    assert plan_round([0, 1, 2, 3], 20, 10) == [(0, 5), (1, 5), (2, 5), (3, 5)]
    assert plan_round([0], 14, 10) == [(0, 10)]


def test_a_budget_smaller_than_the_shards_goes_to_the_first_in_turn() -> None:
    assert plan_round([3, 0, 1, 2], 2, 100) == [(3, 1), (0, 1)]


def test_each_tick_starts_where_the_last_ones_first_round_ended() -> None:
    small = EngineConfig(shards=4, sweep_limit=2, sweep_period_seconds=60)
    assert [first_shard_at(60.0 * k + 0.5, small) for k in range(4)] == [0, 2, 0, 2]
    odd = EngineConfig(shards=4, sweep_limit=5, sweep_period_seconds=60)
    assert [first_shard_at(60.0 * k + 59.9, odd) for k in range(4)] == [0, 1, 2, 3]
