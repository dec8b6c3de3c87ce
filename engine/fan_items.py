"""What a fan-out item sees: the map's items and one item's context (the items and their undo share it)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from engine.attempts import context_for
from engine.errors import InvalidFanoutItems
from engine.fanout_spec import FanKind, FanoutSpec
from engine.join import MAX_ITEMS
from engine.parts import Parts
from engine.state import Execution, canonical_json
from engine.workflow import StepContext

# A name a person reads in the console and a shell prints as is: ASCII letters, digits, a few
# separators and inner spaces; no quotes, angle brackets or control characters.
ITEM_NAME_RE = re.compile(r"^[A-Za-z0-9_.:@/#+=-](?:[A-Za-z0-9 _.:@/#+=-]{0,62}[A-Za-z0-9_.:@/#+=-])?$")


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


def item_label(st: FanoutSpec, idx: int, value: Any) -> str | None:
    """Item ``idx``'s name from the map's ``item_namer`` (None without one); ``InvalidFanoutItems``
    when the namer fails or its name is not 1 to 64 of the safe characters."""
    if st.item_namer is None:
        return None
    try:
        label = st.item_namer(value, idx)
    except Exception as exc:
        raise InvalidFanoutItems(
            f"map {st.name!r}: item_namer failed on item {idx}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(label, str) or not ITEM_NAME_RE.fullmatch(label):
        raise InvalidFanoutItems(
            f"map {st.name!r}: item {idx}'s name {label!r} must be 1 to 64 ASCII letters, digits, inner spaces "
            "or _.:@/#+=-"
        )
    return label


def check_item_names(st: FanoutSpec, values: list[Any]) -> None:
    """As the map opens, before any item runs: every name valid, no two alike. A name is how a
    person finds an item; each item's record is named from its own (item, index) alone, so a
    duplicate is refused rather than made unique from the other items' names."""
    if st.item_namer is None:
        return
    seen: dict[str, int] = {}
    for idx, value in enumerate(values):
        label = item_label(st, idx, value)
        assert label is not None
        if label in seen:
            raise InvalidFanoutItems(
                f"map {st.name!r}: items {seen[label]} and {idx} are both named {label!r}; item names must be unique"
            )
        seen[label] = idx
