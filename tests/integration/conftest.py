"""Shared fixtures: the engine modules' rig (each module brings its own ``reg``) and the handlers' env."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from functions import wiring
from tests.integration.api_support import Functions
from tests.integration.engine_support import Recorder, build_rig


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def rig(aws, make_engine, clock, reg):
    return build_rig(aws, make_engine, clock, reg)


@pytest.fixture
def fn(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Functions]:
    """The three handlers' environments from template.yaml, over the moto resources."""
    wiring.reset()
    yield Functions(aws, monkeypatch)
    wiring.reset()
