"""The side-effect ledger the example steps write, keyed by idempotency key.

It stands for an external system (payments, inventory): ``apply`` lands an
effect once per key however often a step runs, and ``runs`` counts how often
the step body actually ran. Chaos checks compare the two.
"""

from __future__ import annotations

from typing import Any, Protocol


class Ledger(Protocol):
    def apply(self, key: str, effect: dict[str, Any]) -> bool:
        """Record ``effect`` under ``key`` once; True the first time, False after."""

    def ran(self, key: str) -> int:
        """Count one more run of the step body under ``key``; returns the new count."""

    def effects(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """Every effect applied for an execution, by idempotency key."""


class MemoryLedger:
    """For unit tests and in-process runs."""

    def __init__(self) -> None:
        self.applied: dict[str, dict[str, Any]] = {}
        self.attempts: dict[str, int] = {}
        self.duplicates = 0

    def apply(self, key: str, effect: dict[str, Any]) -> bool:
        if key in self.applied:
            self.duplicates += 1
            return False
        self.applied[key] = dict(effect)
        return True

    def ran(self, key: str) -> int:
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]

    def effects(self, execution_id: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.applied.items() if k.split(":", 1)[0] == execution_id}
