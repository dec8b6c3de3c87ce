"""What users write to fan out: ``parallel(...)`` branches and ``map(...)`` over items.

A fan-out step is a ``StepSpec`` (so catch, compensation and the history treat it as
one step); engine/fanout.py runs it. ``map`` shadows the builtin on purpose: it is the
issue's spelling, as in Lambda durable functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from engine.errors import WorkflowDefinitionError
from engine.join import MAX_ITEMS, CompletionPolicy, OnFailure
from engine.retry import RetryPolicy, for_wait
from engine.workflow import (
    NAME_RE,
    TIMED_WAITS,
    WAIT_SPECS,
    ChildSpec,
    SleepSpec,
    StepContext,
    StepFn,
    StepSpec,
    WorkflowSpec,
    child,
    describe_retry,
)

ItemsFn = Callable[[StepContext], Any]
# ``namer(item, index) -> str``: a map item's name in the history and the console (engine/fan_items.py).
ItemNamer = Callable[[Any, int], str]


class FanKind(StrEnum):
    PARALLEL = "parallel"
    MAP = "map"


def _never(ctx: StepContext) -> None:
    raise WorkflowDefinitionError("a fan-out step runs its items, never a body of its own")


def undo_items(ctx: StepContext) -> None:
    """The compensation a fan-out step declares when its items do: engine/fan_undo.py runs
    each committed item's own compensation instead (this marker is never called)."""
    raise WorkflowDefinitionError("a fan-out step's items are undone one by one (engine/fan_undo.py)")


def _undo_marker(specs: tuple[StepSpec, ...]) -> StepFn | None:
    return undo_items if any(s.compensate is not None for s in specs) else None


@dataclass(frozen=True)
class FanoutSpec(StepSpec):
    """``branches``: one StepSpec per branch (parallel) or the one StepSpec every item runs (map)."""

    kind: FanKind = FanKind.MAP
    branches: tuple[StepSpec, ...] = ()
    items: ItemsFn | None = None
    max_concurrency: int = 1
    policy: CompletionPolicy = field(default_factory=CompletionPolicy)
    on_failure: OnFailure = OnFailure.BATCH
    item_namer: ItemNamer | None = None

    def item_spec(self, idx: int) -> StepSpec:
        return self.branches[idx] if self.kind is FanKind.PARALLEL else self.branches[0]

    def item_policy(self, idx: int, default: RetryPolicy) -> RetryPolicy:
        """The item's policy, else the fan-out step's, else ``default`` (a timed wait's timeout
        is not retried then: ``retry.for_wait``)."""
        item = self.item_spec(idx)
        own = item.retry or self.retry
        if own is not None:
            return own
        return for_wait(default) if isinstance(item, TIMED_WAITS) else default

    @property
    def compensates_items(self) -> bool:
        return any(b.compensate is not None for b in self.branches)

    def describe_fan(self, spec: WorkflowSpec) -> dict[str, Any]:
        """Kind, window, completion policy and each branch (or the one ``run`` of a map) with its
        retry policy and compensation: what the console's Workflows page draws."""
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "max_concurrency": self.max_concurrency,
            "completion": describe_policy(self.policy),
            "on_failure": self.on_failure.value,
            "retry": describe_retry(spec.policy_for(self)),
            "branches": [_describe_branch(self, spec, i) for i in range(len(self.branches))],
        }
        if self.kind is FanKind.MAP and self.items is not None:
            out["items"] = _fn_name(self.items)
        if self.item_namer is not None:
            out["item_namer"] = _fn_name(self.item_namer)
        if self.compensates_items:
            out["compensate"] = "each committed item's own compensation"
        if self.catch is not None:
            out["catch"] = _fn_name(self.catch)
        return out


def _fn_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", repr(fn)))


def describe_policy(policy: CompletionPolicy) -> dict[str, Any]:
    """The completion policy's numbers; ``all`` when every item must succeed."""
    return {
        "min_successful": policy.min_successful,
        "tolerated_failures": policy.tolerated_failures,
        "tolerated_failure_percentage": policy.tolerated_failure_percentage,
        "all": policy.min_successful is None
        and policy.tolerated_failures is None
        and policy.tolerated_failure_percentage is None,
    }


def _describe_branch(st: FanoutSpec, spec: WorkflowSpec, idx: int) -> dict[str, Any]:
    branch = st.branches[idx]
    out: dict[str, Any] = {
        "index": idx,
        "name": branch.name,
        "kind": "child" if isinstance(branch, ChildSpec) else "step",
        "retry": describe_retry(st.item_policy(idx, spec.retry)),
    }
    if isinstance(branch, ChildSpec):
        out["workflow"] = branch.workflow
    if branch.compensate is not None:
        out["compensate"] = _fn_name(branch.compensate)
        out["compensate_retry"] = describe_retry(spec.compensation_policy_for(branch))
    return out


def _item_input(ctx: StepContext) -> dict[str, Any]:
    return {"item": ctx.item}


def _as_step(fn: StepSpec | StepFn | str, what: str) -> StepSpec:
    if isinstance(fn, str):  # a workflow name: each item runs it as a child, with {"item": value}
        return child(fn, input=_item_input)
    if isinstance(fn, ChildSpec):
        return fn
    if isinstance(fn, (FanoutSpec, SleepSpec, *WAIT_SPECS)):
        raise WorkflowDefinitionError(
            f"{what} must be a step function, step(...), child(...) or a workflow name, not a wait, sleep or fan-out"
        )
    if isinstance(fn, StepSpec):
        return _plain_item(fn, what)
    if not callable(fn):
        raise WorkflowDefinitionError(f"{what} {fn!r} is not callable")
    return StepSpec(fn=fn, name=getattr(fn, "__name__", "item"))


def _plain_item(spec: StepSpec, what: str) -> StepSpec:
    """Refuse what an item would silently not get: items keep no start mark (so no
    at_most_once), are not held back for a declared timeout, and are caught as one step."""
    refused = {
        "semantics='at_most_once'": spec.semantics == "at_most_once",
        "timeout": spec.timeout is not None,
        "catch": spec.catch is not None,
    }
    named = [option for option, present in refused.items() if present]
    if named:
        raise WorkflowDefinitionError(
            f"{what} ({spec.name!r}) sets {', '.join(named)}: fan-out items run at least once, with no "
            "per-item timeout hold-back, and a failure is caught on the fan-out step itself (catch= of "
            "parallel/map)"
        )
    return spec


def _count(value: object, what: str, *, least: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise WorkflowDefinitionError(f"{what} must be an integer >= {least}, not {value!r}")
    return value


def _map_window(value: object) -> int:
    """0 or None is the reference's "no limit": a window as wide as the largest map."""
    return _count(value, "max_concurrency", least=0) or MAX_ITEMS


def completion_policy(
    min_successful: int | None, tolerated_failures: int | None, tolerated_failure_percentage: float | None
) -> CompletionPolicy:
    pct = tolerated_failure_percentage
    if pct is not None and (
        isinstance(pct, bool) or not isinstance(pct, (int, float)) or not math.isfinite(pct) or not 0 <= pct <= 100
    ):
        raise WorkflowDefinitionError(f"tolerated_failure_percentage must be in [0, 100], not {pct!r}")
    return CompletionPolicy(
        min_successful=_count(min_successful, "min_successful", least=1),
        tolerated_failures=_count(tolerated_failures, "tolerated_failures", least=0),
        tolerated_failure_percentage=None if pct is None else float(pct),
    )


def _on_failure(value: object) -> OnFailure:
    try:
        return OnFailure(str(value)) if isinstance(value, str) else OnFailure(repr(value))
    except ValueError:
        choices = " or ".join(repr(v.value) for v in OnFailure)
        raise WorkflowDefinitionError(f"on_failure must be {choices}, not {value!r}") from None


def _name(name: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise WorkflowDefinitionError(f"{what} {name!r} must match {NAME_RE.pattern}")
    return name


def parallel(
    *branches: StepSpec | StepFn | str,
    name: str = "parallel",
    max_concurrency: int | None = None,
    min_successful: int | None = None,
    tolerated_failures: int | None = None,
    tolerated_failure_percentage: float | None = None,
    on_failure: str = "batch",
    retry: RetryPolicy | None = None,
    catch: Any = None,
) -> FanoutSpec:
    """Run the branches side by side; each branch's dict merges into the context in branch order.

    Failed branches do not fail the step (``on_failure="batch"``): the next step reads
    ``ctx.batch(name)``. ``on_failure="fail"`` fails it (FanoutFailed) once the completion
    policy is out of reach, for a catch or a compensation to take over.

    No branches is a fan-out that is over as it opens (the reference's empty batch), and a
    ``max_concurrency`` of 0 or None runs every branch at once."""
    specs = tuple(_as_step(b, f"branch {i} of {name!r}") for i, b in enumerate(branches))
    # A window of at least 1 even for no branches: the join record's window is a slot count.
    window = _count(max_concurrency, "max_concurrency", least=0) or max(1, len(specs))
    policy = completion_policy(min_successful, tolerated_failures, tolerated_failure_percentage)
    if policy.min_successful is not None and policy.min_successful > len(specs):
        raise WorkflowDefinitionError(f"min_successful {policy.min_successful} > {len(specs)} branches")
    return FanoutSpec(
        fn=_never,
        name=_name(name, "step name"),
        retry=retry,
        catch=catch,
        compensate=_undo_marker(specs),
        kind=FanKind.PARALLEL,
        branches=specs,
        max_concurrency=window,
        policy=policy,
        on_failure=_on_failure(on_failure),
    )


def map_items(  # Lambda durable functions' map, named so that it does not shadow the builtin
    *,
    items: ItemsFn,
    run: StepSpec | StepFn | str,
    name: str = "map",
    max_concurrency: int | None = 10,
    min_successful: int | None = None,
    tolerated_failures: int | None = None,
    tolerated_failure_percentage: float | None = None,
    on_failure: str = "batch",
    retry: RetryPolicy | None = None,
    compensate: StepFn | None = None,
    catch: Any = None,
    item_namer: ItemNamer | None = None,
) -> FanoutSpec:
    """Run ``run`` once per element of ``items(ctx)`` (a list of JSON values, at most 10,000).

    ``context[name]`` is the list of results in item order (None for a failed or unstarted
    item), or, when that list cannot fit the execution item, a marker that
    ``ctx.results(name)`` pages through. ``max_concurrency`` of 0 or None means no window, as in the
    reference: every item is sent as the map opens (at most MAX_ITEMS of them). Failed items
    do not fail the step unless ``on_failure="fail"``: ``ctx.batch(name)`` tells the next step.
    ``item_namer(item, index)`` names each item for the history and the console: 1 to 64 safe
    characters, unique within the map (checked as the map opens; engine/fan_items.py).
    """
    if not callable(items):
        raise WorkflowDefinitionError(f"map items {items!r} must be a function of the context")
    spec = _as_step(run, f"map run of {name!r}")
    if compensate is not None:
        if not callable(compensate):
            raise WorkflowDefinitionError(f"compensate {compensate!r} of map {name!r} is not callable")
        spec = replace(spec, compensate=compensate)
    if item_namer is not None and not callable(item_namer):
        raise WorkflowDefinitionError(f"item_namer {item_namer!r} of map {name!r} must be a function of (item, index)")
    return FanoutSpec(
        fn=_never,
        name=_name(name, "step name"),
        retry=retry,
        catch=catch,
        compensate=_undo_marker((spec,)),
        kind=FanKind.MAP,
        branches=(spec,),
        items=items,
        max_concurrency=_map_window(max_concurrency),
        policy=completion_policy(min_successful, tolerated_failures, tolerated_failure_percentage),
        on_failure=_on_failure(on_failure),
        item_namer=item_namer,
    )
