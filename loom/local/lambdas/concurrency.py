"""How many processes each local function gets: the template's caps, or a stated approximation.

In AWS a function's concurrency is bounded by its ReservedConcurrentExecutions
and, for an SQS trigger, by the event source's ScalingConfig.MaximumConcurrency
(the smaller wins). Without either, Lambda scales up to the account's
unreserved concurrency: a laptop cannot copy that, so the local number is
then an approximation and the plan says so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from loom.template import FunctionSpec

# A laptop guard: a template cap of 1000 would otherwise start 1000 Python processes.
LOCAL_PROCESS_LIMIT = 32
DEFAULT_SIZES = {"worker": 2, "sweeper": 2, "api": 2}


class CapSource(enum.Enum):
    TEMPLATE = "template"  # the template's own cap, honoured exactly
    OVERRIDE = "override"  # --workers (or StackOptions) chose the number
    DEFAULT = "default"  # nothing chose it: an approximation
    LIMITED = "limited"  # the template's cap, cut to LOCAL_PROCESS_LIMIT


@dataclass(frozen=True)
class ConcurrencyPlan:
    function: str
    size: int
    source: CapSource
    template_cap: int | None
    note: str

    @property
    def approximate(self) -> bool:
        return self.source is not CapSource.TEMPLATE


class ConcurrencyError(ValueError):
    """A concurrency setting the local stack cannot run."""


def template_cap(spec: FunctionSpec) -> tuple[int | None, str]:
    """The smaller of ReservedConcurrentExecutions and the SQS MaximumConcurrency, and what set it."""
    caps = {
        "ReservedConcurrentExecutions": spec.reserved_concurrency,
        "ScalingConfig.MaximumConcurrency": spec.sqs_max_concurrency(),
    }
    named = {k: v for k, v in caps.items() if v is not None}
    if not named:
        return None, ""
    return min(named.values()), ", ".join(f"{k}={v}" for k, v in named.items())


def plan(spec: FunctionSpec, role: str, override: int | None = None) -> ConcurrencyPlan:
    """The process count for ``spec`` in ``role`` (worker | sweeper | api), and the sentence that explains it."""
    cap, why = template_cap(spec)
    fn = spec.logical_id
    if cap == 0:
        raise ConcurrencyError(f"{fn}: ReservedConcurrentExecutions is 0, so AWS never runs it; nor does `loom up`")
    if override is not None:
        if override < 1:
            raise ConcurrencyError(f"{fn}: concurrency must be at least 1, not {override}")
        if cap is None:
            note = f"{override} process(es) chosen locally; the template sets no cap (approximation)"
        else:
            note = f"{override} process(es) chosen locally, overriding the template's {cap} ({why})"
        return ConcurrencyPlan(fn, override, CapSource.OVERRIDE, cap, note)
    if cap is None:
        size = DEFAULT_SIZES[role]
        note = (
            f"{size} process(es): the template sets neither ReservedConcurrentExecutions nor "
            "ScalingConfig.MaximumConcurrency, so AWS would scale up to the account's unreserved "
            "concurrency; local concurrency is an approximation"
        )
        return ConcurrencyPlan(fn, size, CapSource.DEFAULT, None, note)
    if cap > LOCAL_PROCESS_LIMIT:
        note = f"{LOCAL_PROCESS_LIMIT} process(es): the template allows {cap} ({why}), more than a laptop runs"
        return ConcurrencyPlan(fn, LOCAL_PROCESS_LIMIT, CapSource.LIMITED, cap, note)
    return ConcurrencyPlan(fn, cap, CapSource.TEMPLATE, cap, f"{cap} process(es), as in AWS ({why})")
