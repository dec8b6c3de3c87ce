"""A soak of 100 executions of every kind (chains, waits, maps, children, sagas) with every fault
mixed in: each ends as its plan expects, zero invariant violations."""

from __future__ import annotations

import pytest

from chaos.soak import make_plan, run_soak

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(600)]


def test_soak_100_executions_has_no_violations(tmp_path) -> None:
    from chaos.stackctl import chaos_stack

    with chaos_stack(state_dir=tmp_path, workers=3) as target:
        # Lost messages wait for the queue to drain (backlog patience): give the tail room on a busy machine.
        summary = run_soak(target, 100, seed=11, timeout=420)
    assert summary.digest == make_plan(100, 11).digest
    assert summary.violations == []
    plan = make_plan(100, 11)
    assert summary.statuses == dict(plan.expected())
    assert summary.by_kind == plan.expected_by_kind()
    assert len(summary.kinds) >= 7  # the mix, not only chains
    assert sum(summary.injected.values()) >= 20 and not summary.skipped
    assert summary.recovery_p99 is not None
