"""RetentionDays reaches the engine; a bad value is refused with a clear error (functions/settings.py)."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.errors import InvalidInput
from functions.settings import Settings

BASE = {"LOOM_TABLE_NAME": "t", "LOOM_QUEUE_URL": "q", "LOOM_DLQ_URL": "d"}


def test_the_default_is_thirty_days_and_zero_keeps_for_ever():
    assert Settings.from_env(BASE).engine_config().retention_seconds == 30 * 86400
    assert Settings.from_env({**BASE, "LOOM_RETENTION_DAYS": "7"}).engine_config().retention_seconds == 7 * 86400
    assert Settings.from_env({**BASE, "LOOM_RETENTION_DAYS": "0"}).engine_config().retention_seconds == 0


@pytest.mark.parametrize("bad", ["thirty", "-1", "4000", "nan"])
def test_a_retention_that_is_not_a_number_of_days_is_refused_by_name(bad):
    with pytest.raises(InvalidInput, match="LOOM_RETENTION_DAYS"):
        Settings.from_env({**BASE, "LOOM_RETENTION_DAYS": bad})


def test_the_engine_refuses_a_negative_retention_and_its_grace_is_two_leases():
    with pytest.raises(InvalidInput, match="retention_seconds"):
        EngineConfig(retention_seconds=-1)
    assert EngineConfig(lease_seconds=8).end_grace_seconds == 16
