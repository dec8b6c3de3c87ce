"""Fixtures the engine test modules share; each module brings its own ``reg`` of workflows."""

from __future__ import annotations

import pytest

from tests.integration.engine_support import Recorder, build_rig


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def rig(aws, make_engine, clock, reg):
    return build_rig(aws, make_engine, clock, reg)
