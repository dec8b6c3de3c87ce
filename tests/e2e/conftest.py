"""e2e fixtures: the fake handlers' deployment package (functions run from a package, as in AWS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.local.lambdas.package import FunctionPackage, build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fake_package(tmp_path_factory: pytest.TempPathFactory) -> FunctionPackage:
    """tests/ as a SOURCES entry plus requirements.txt: what tests.e2e.fake_handlers needs."""
    return build(tmp_path_factory.mktemp("fake-package"), [str(ROOT / "tests")])
