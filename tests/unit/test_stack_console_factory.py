"""The stack serves a console only through the factory its composer (the CLI) hands it: it never
imports loom.console (tests/unit/test_kit_layers.py), and a console port without a factory is
refused as the options are made, not silently served without a console."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loom.local.stack import StackOptions


def test_a_console_port_without_a_factory_is_refused_as_the_options_are_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="console_port needs a console_factory"):
        StackOptions(state_dir=tmp_path, console_port=0)


def test_a_factory_or_no_console_port_is_accepted(tmp_path: Path) -> None:
    def factory(stack: Any, port: int) -> Any:
        raise AssertionError("not called before the stack starts")

    assert StackOptions(state_dir=tmp_path, console_port=0, console_factory=factory).console_factory is factory
    assert StackOptions(state_dir=tmp_path).console_port is None
