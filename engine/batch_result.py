"""A fan-out's batch result: what the step after a ``parallel`` or ``map`` reads.

With ``on_failure="batch"`` (the default) a fan-out step never fails on its items: it joins
with the items' results where they always were (a map's list under its name, a parallel's
branch dicts merged) plus this summary under ``"<name>:batch"`` (a colon: no step name can
take that key). The next step reads it with ``ctx.batch(name)`` and decides, for instance
with ``raise_if_failed()``. Stored as JSON, it stays small at any number of items: counts,
the reason, and at most ``MAX_ERRORS`` brief errors; every item's full record is in the
history (``items_from`` pages) and in ``ctx.results(name)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import FanoutFailed
from engine.join import CompletionReason

MARK = "batch"
MAX_ERRORS = 25
MAX_MESSAGE = 300


def key(name: str) -> str:
    return f"{name}:{MARK}"


@dataclass(frozen=True)
class ItemError:
    index: int
    type: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "type": self.type, "message": self.message}


@dataclass(frozen=True)
class BatchResult:
    """Each item SUCCEEDED, FAILED, or NOT_STARTED (declined once no item could start: the
    reference calls these STARTED, for its branches that had not ended when the batch closed)."""

    step: str
    reason: CompletionReason
    total: int
    succeeded: int
    failed: int
    errors: tuple[ItemError, ...] = ()
    errors_truncated: bool = False

    @property
    def not_started(self) -> int:
        return self.total - self.succeeded - self.failed

    @property
    def has_failure(self) -> bool:
        return self.failed > 0

    def raise_if_failed(self) -> None:
        """Fail the step that reads the batch, non-retryably, naming the first failure."""
        if not self.has_failure:
            return
        first = f": item {self.errors[0].index} {self.errors[0].type}: {self.errors[0].message}" if self.errors else ""
        raise FanoutFailed(f"{self.failed} of {self.total} items of {self.step!r} failed ({self.reason.value}){first}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "$loom": MARK,
            "step": self.step,
            "reason": self.reason.value,
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "not_started": self.not_started,
            "errors": [e.to_dict() for e in self.errors],
            "errors_truncated": self.errors_truncated,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> BatchResult:
        errors = tuple(ItemError(int(e["index"]), str(e["type"]), str(e["message"])) for e in value.get("errors", ()))
        return cls(
            step=str(value["step"]),
            reason=CompletionReason(value["reason"]),
            total=int(value["total"]),
            succeeded=int(value["succeeded"]),
            failed=int(value["failed"]),
            errors=errors,
            errors_truncated=bool(value.get("errors_truncated", False)),
        )


def brief_error(index: int, error: Mapping[str, Any] | None) -> ItemError:
    info = error or {}
    message = str(info.get("message", ""))
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return ItemError(index, str(info.get("type", "Error")), message)


def read(data: Mapping[str, Any], name: str) -> BatchResult:
    """The batch of fan-out step ``name`` from a context; KeyError if it has none."""
    value = data.get(key(name))
    if not (isinstance(value, Mapping) and value.get("$loom") == MARK):
        raise KeyError(f"{name!r} has no batch result: is it a parallel or map step that ran before this one?")
    return BatchResult.from_dict(value)
