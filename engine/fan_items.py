"""What a fan-out item sees: the map's items and one item's context (the items and their undo share it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.attempts import context_for
from engine.errors import InvalidFanoutItems
from engine.fanout_spec import FanKind, FanoutSpec
from engine.join import MAX_ITEMS
from engine.parts import Parts
from engine.state import Execution, canonical_json
from engine.workflow import StepContext


def item_values(parts: Parts, ex: Execution, st: FanoutSpec) -> list[Any]:
    """The map's items (``InvalidFanoutItems`` if not a list of at most MAX_ITEMS JSON values),
    or one None per branch."""
    if st.kind is FanKind.PARALLEL:
        return [None] * len(st.branches)
    assert st.items is not None
    values = st.items(context_for(parts, ex, st))
    if not isinstance(values, (list, tuple)):
        raise InvalidFanoutItems(f"map {st.name!r}: items must return a list, not {type(values).__name__}")
    if len(values) > MAX_ITEMS:
        raise InvalidFanoutItems(f"map {st.name!r}: {len(values):,} items; the most a map takes is {MAX_ITEMS:,}")
    try:
        canonical_json(list(values))
    except (TypeError, ValueError) as exc:
        raise InvalidFanoutItems(f"map {st.name!r}: the items are not JSON values: {exc}") from exc
    return list(values)


def item_context(parts: Parts, ex: Execution, st: FanoutSpec, idx: int, value: Any, attempt: int) -> StepContext:
    base = context_for(parts, ex, st)
    return replace(base, attempt=attempt, item=value, item_index=idx, log=base.log.bind(item=idx))
