"""`loom chaos all` on the embedded emulator, as CI runs it: every row PASS, each with its own
evidence. This module runs the first group of scenarios; test_scenarios_more.py the second, on a
stack of its own, at the same time (tests/chaos/scenario_checks.py says why).

The group runs once (chaos.runner.run_all on the module's chaos stack); each test below then
reads one scenario's row, so a failure names its scenario.
"""

from __future__ import annotations

import pytest

from chaos import SCENARIOS
from chaos.scenario import Result
from tests.chaos.scenario_checks import CHECKS, GROUPS, check_table, row

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

NAMES = GROUPS[0]


def test_the_groups_run_every_scenario_once_and_check_each() -> None:
    grouped = [name for group in GROUPS for name in group]
    assert sorted(grouped) == sorted(SCENARIOS) and len(grouped) == len(set(grouped))
    assert set(CHECKS) == set(SCENARIOS)


def test_the_table_json_and_junit_of_the_group(rows: dict[str, Result], tmp_path) -> None:
    check_table(rows, NAMES, tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_scenario(rows: dict[str, Result], name: str) -> None:
    CHECKS[name](row(rows, name))
