"""The suite's tiers (tests/tiers.py): --slow selects the slow tier and only it, every test gets
its tier's timeout, and a run ends with each tier's time against its budget and the slowest tests."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.unit

SUITE = {
    "tests/unit/test_fast.py": """
import pytest

def test_quick():
    assert True

@pytest.mark.slow
def test_long():
    assert True

def test_timeout_of_the_tier(request):
    assert request.node.get_closest_marker("timeout").args == (30,)

@pytest.mark.timeout(7)
def test_own_timeout_wins(request):
    assert request.node.get_closest_marker("timeout").args == (7,)
""",
    "tests/chaos/test_scenario.py": """
def test_scenario(request):
    assert request.node.get_closest_marker("timeout").args == (600,)
""",
}


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(**{path.removesuffix(".py"): body for path, body in SUITE.items()})
    pytester.makeini("[pytest]\nmarkers =\n    slow: the slow tier\n    unit: pure\n")
    return pytester


def test_the_default_run_leaves_the_slow_tier_out_and_applies_each_tiers_timeout(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "tests.tiers", "--import-mode=importlib")
    result.assert_outcomes(passed=4, deselected=1)
    out = result.stdout.str()
    assert "tier budgets (summed test time)" in out and "the 10 slowest tests" in out
    assert any(line.startswith("unit ") and "of 45 s" in line and "(3 tests)" in line for line in out.splitlines())
    assert any(line.startswith("chaos ") and "of 200 s" in line for line in out.splitlines())
    assert "tests/unit/test_fast.py::test_quick" in out


def test_slow_runs_only_the_slow_tier(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "tests.tiers", "--import-mode=importlib", "--slow")
    result.assert_outcomes(passed=1, deselected=4)
    assert "tests/unit/test_fast.py::test_long" in result.stdout.str()
