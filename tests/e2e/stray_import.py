"""A handler module with a stray import: yaml is in the dev venv, never in the deployment package."""

from __future__ import annotations

from typing import Any

import yaml  # the stray import under test


def handler(event: Any, context: Any) -> Any:
    return yaml.safe_dump(event)
