"""One chaos stack (embedded emulator, throttling proxy, crash hook) shared by the scenario tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from chaos.scenario import Result
from chaos.target import Target


@pytest.fixture(scope="module")
def chaos_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    from chaos.stackctl import chaos_stack
    from engine.log import configure

    configure(os.environ.get("LOOM_TEST_LOG_LEVEL", "WARNING"))
    with chaos_stack(state_dir=tmp_path_factory.mktemp("chaos-stack"), workers=3) as target:
        yield target


@pytest.fixture(scope="module")
def rows(chaos_target: Target, request: pytest.FixtureRequest) -> dict[str, Result]:
    """The rows of the module's group of scenarios (its ``NAMES``), run once on its stack."""
    from chaos.runner import run_all

    return {r.name: r for r in run_all(chaos_target, names=request.module.NAMES, out=None)}
