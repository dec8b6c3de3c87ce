"""The suite's tiers: what runs by default and what with ``--slow``, a timeout and a time budget
per tier, and at the end of a run each tier's time against its budget and the ten slowest tests.

A tier is the directory a test lives in. The default run (``./scripts/test``) is every tier
but the tests marked ``slow``; ``./scripts/test --slow`` runs only those (the 100-execution
soak, the long hypothesis run). CI runs both. A budget is the tier's summed test time on the
2-core machine (with ``-n 2`` two tests run at once, so the wall time is less); going over it
is reported, not failed: speed goals are measured by scripts/bench.py, never by timed tests.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Tier:
    timeout: float  # seconds a test of the tier may take before pytest-timeout names it
    budget: float  # seconds of test time the whole tier may take


TIERS = {
    "unit": Tier(timeout=30, budget=45),
    "integration": Tier(timeout=120, budget=300),
    "e2e": Tier(timeout=300, budget=240),
    "chaos": Tier(timeout=600, budget=200),
}
SLOW_BUDGET = 600.0  # the --slow tier, every directory together
SLOWEST = 10


def tier_of(nodeid: str) -> str:
    parts = Path(nodeid.split("::", 1)[0]).parts
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS else "other"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        default=False,
        help="run only the slow tier (tests marked slow: the soak, the long hypothesis run)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    want_slow = bool(config.getoption("--slow"))
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("slow") is not None) == want_slow else drop).append(item)
        tier = TIERS.get(tier_of(item.nodeid))
        if tier is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(tier.timeout))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class _Times:
    def __init__(self) -> None:
        self.by_test: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.by_test[report.nodeid] += report.duration  # setup, call and teardown


_TIMES = pytest.StashKey[_Times]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TIMES] = _Times()
    config.pluginmanager.register(config.stash[_TIMES])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    times = config.stash[_TIMES].by_test
    if not times:
        return
    slow_run = bool(config.getoption("--slow"))
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for nodeid, seconds in times.items():
        totals[tier_of(nodeid)] += seconds
        counts[tier_of(nodeid)] += 1
    write = terminalreporter.write_line
    terminalreporter.section("tier budgets (summed test time)")
    for name in sorted(totals):
        budget = TIERS[name].budget if name in TIERS and not slow_run else None
        over = budget is not None and totals[name] > budget
        limit = f" of {budget:.0f} s" if budget is not None else ""
        note = "  OVER BUDGET" if over else ""
        write(f"{name:<12} {totals[name]:8.1f} s{limit}  ({counts[name]} tests){note}")
    if slow_run and sum(totals.values()) > SLOW_BUDGET:
        write(f"the slow tier took {sum(totals.values()):.0f} s, over its {SLOW_BUDGET:.0f} s budget")
    terminalreporter.section(f"the {SLOWEST} slowest tests")
    for nodeid, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:SLOWEST]:
        write(f"{seconds:8.1f} s  {nodeid}")
