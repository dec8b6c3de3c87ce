"""`loom chaos all`, the second group of scenarios, on a chaos stack of its own (see
test_scenarios.py and tests/chaos/scenario_checks.py)."""

from __future__ import annotations

import pytest

from chaos.scenario import Result
from tests.chaos.scenario_checks import CHECKS, GROUPS, check_table, row

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

NAMES = GROUPS[1]


def test_the_table_json_and_junit_of_the_group(rows: dict[str, Result], tmp_path) -> None:
    check_table(rows, NAMES, tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_scenario(rows: dict[str, Result], name: str) -> None:
    CHECKS[name](row(rows, name))
