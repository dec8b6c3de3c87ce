"""``loom history`` for people: one row per step (done, running, sleeping, waiting, pending),
durations, compact local times, each failed attempt's cause and retry delay under its step,
and the execution-level entries (started, cancelled, the end) around the table.

It reads the control plane's history answer only (``state``, ``pending``, ``events``, see
engine/progress.py); an older control plane without those fields still prints its steps.
"""

from __future__ import annotations

import io
from datetime import datetime, tzinfo
from typing import Any

from engine.error_report import one_line
from loom.cli import output

# Live states drawn on the current step's row: that is where a reader looks for them.
ROW_STATES = frozenset({"sleeping", "waiting", "retrying", "running"})
TERMINAL = frozenset({"completed", "failed", "cancelled", "compensated", "compensation_failed"})


def local_time(epoch: float | None, now: float, tz: tzinfo | None = None) -> str:
    """``23:52:07`` today, ``Dec 02 23:52`` another day, in the reader's zone (``tz`` for tests)."""
    if epoch is None:
        return "-"
    at = datetime.fromtimestamp(epoch).astimezone(tz)
    today = datetime.fromtimestamp(now).astimezone(tz)
    if at.date() == today.date():
        return at.strftime("%H:%M:%S")
    return at.strftime("%b %d %H:%M" if at.year == today.year else "%Y-%m-%d %H:%M")


def duration(seconds: float | None) -> str:
    """``0.12s``, ``12.3s``, ``4m05s``, ``2h03m``, ``3d04h``: two units at most."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    for big, small, b, s in ((86400, 3600, "d", "h"), (3600, 60, "h", "m")):
        if whole >= big:
            return f"{whole // big}{b}{(whole % big) // small:02d}{s}"
    return f"{whole // 60}m{whole % 60:02d}s"


def relative(epoch: float, now: float) -> str:
    delta = epoch - now
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"


def trace_lines(error: dict[str, Any]) -> list[str]:
    lines = []
    for frame in error.get("traceback") or []:
        if "cut_frames" in frame:
            lines.append(f"  ... {frame['cut_frames']} frame(s) cut to fit the record")
        else:
            lines.append(f"  File {frame.get('file')}, line {frame.get('line')}, in {frame.get('function')}")
    return lines


def attempt_lines(step: dict[str, Any], traceback: bool) -> list[str]:
    """One line per attempt that did not complete: how long, why, and the retry delay."""
    lines = []
    for a in step.get("attempts") or []:
        if not isinstance(a, dict) or a.get("outcome") == "completed":
            continue
        error = a.get("error") if isinstance(a.get("error"), dict) else None
        text = f"attempt {a.get('attempt')} {a.get('outcome')}"
        if a.get("duration_seconds") is not None:
            text += f" after {duration(a['duration_seconds'])}"
        if error:
            text += f": {one_line(error)}"
        if a.get("retry_delay") is not None:
            text += f"; next attempt {duration(float(a['retry_delay']))} later"
        lines.append(text)
        if traceback and error:
            lines += trace_lines(error)
    final = step.get("error") if isinstance(step.get("error"), dict) else None
    if final and not lines:  # a failure recorded on the step but on no attempt
        lines = [one_line(final)] + (trace_lines(final) if traceback else [])
    return lines


def _last_cause(step: dict[str, Any]) -> str:
    for a in reversed(step.get("attempts") or []):
        if isinstance(a, dict) and isinstance(a.get("error"), dict):
            return one_line(a["error"])
    error = step.get("error")
    return one_line(error) if isinstance(error, dict) else str(error or "")


MAX_ITEMS = 20  # a map's items shown under its row; the API pages the rest


def item_lines(step: dict[str, Any]) -> list[str]:
    """A map's or parallel's items (``items`` in the history, when the step has them), nested."""
    items = [i for i in step.get("items") or [] if isinstance(i, dict)]
    lines = []
    if isinstance(step.get("n"), int) and "items" in step:
        decided = f"; join {str(step['decided']).lower()}" if step.get("decided") else ""
        lines.append(f"items: {step.get('ok')} succeeded, {step.get('failed')} failed of {step['n']}{decided}")
    for item in items[:MAX_ITEMS]:
        tries = len(item.get("attempts") or [])
        took = duration(item.get("duration_seconds"))
        named = f" {item['name']}" if item.get("name") else ""  # a parallel's branch, a named map item
        text = f"item {item.get('index')}{named}: {item.get('status', '?')}, {tries} attempt(s), {took}"
        errors = [
            a["error"] for a in item.get("attempts") or [] if isinstance(a, dict) and isinstance(a.get("error"), dict)
        ]
        lines.append(text + (f": {one_line(errors[-1])}" if errors else ""))
    more = len(items) - MAX_ITEMS
    if more > 0:
        lines.append(f"... and {more} more item(s) (`loom history --json` has the whole page)")
    nxt = step.get("items_next")
    if nxt is not None:
        lines.append(f"... more items from {nxt} (items_next: history?step={step.get('index')}&items_from={nxt})")
    return lines


def _step_row(step: dict[str, Any], now: float, tz: tzinfo | None, traceback: bool) -> dict[str, Any]:
    lines = attempt_lines(step, traceback)
    # One failure with nothing more to say fits the row; several, a delay or a trace go under it.
    brief = len(lines) == 1 and "next attempt" not in lines[0]
    return {
        **step,
        "tries": len(step.get("attempts") or []),
        "started": local_time(step.get("started_at_epoch"), now, tz),
        "took": duration(step.get("duration_seconds")),
        "note": _last_cause(step) if brief else "",
        "details": ([] if brief else lines) + item_lines(step),
    }


def state_of(body: dict[str, Any]) -> dict[str, Any]:
    """The answer's ``state`` object, empty from an older control plane."""
    found = body.get("state")
    return found if isinstance(found, dict) else {}


def unregistered_line(body: dict[str, Any]) -> str:
    """The answer's ``unregistered`` message (its workflow is not registered in the stack, so the
    steps not run yet are unknown and its callbacks refused), empty when it is or from an older one."""
    found = body.get("unregistered")
    return str(found.get("message") or found.get("code") or "") if isinstance(found, dict) else ""


def local_reason(state: dict[str, Any], now: float, tz: tzinfo | None = None) -> str:
    """The state's reason with its UTC wake time told as a compact local time and how far off."""
    reason, until = str(state.get("reason", "")), state.get("until_epoch")
    if until is None:
        return reason
    when = f"{local_time(until, now, tz)} ({relative(until, now)})"
    for cut, join in ((" (timeout ", ", timeout "), (" until ", " until "), (" at ", " at ")):
        if cut in reason:
            return f"{reason.split(cut)[0]}{join}{when}"
    return f"{reason} until {when}"


def _mark_current(rows: list[dict[str, Any]], body: dict[str, Any], now: float, tz: tzinfo | None) -> None:
    state = state_of(body)
    kind = str(state.get("kind", ""))
    if kind not in ROW_STATES:
        return
    at = state.get("step")  # absent from an older control plane: the first step not done
    for row in rows:
        if row.get("phase", "forward") != "forward" or (at is not None and row.get("index") != at):
            continue
        if row.get("status") in ("pending", "RUNNING", "RETRYING"):
            row["status"] = kind.upper()
            row["note"] = local_reason(state, now, tz)
            return
        if at is not None:
            return  # the row's record is newer than the state (read just before it): it says more


def rows_of(
    body: dict[str, Any], now: float, tz: tzinfo | None = None, traceback: bool = False
) -> list[dict[str, Any]]:
    steps = [_step_row(s, now, tz, traceback) for s in body.get("steps") or [] if isinstance(s, dict)]
    pending = [
        {**p, "status": "pending", "tries": None, "started": "", "took": "", "note": "", "details": []}
        for p in body.get("pending") or []
        if isinstance(p, dict)
    ]
    forward = [r for r in steps if r.get("phase", "forward") != "compensation"] + pending
    forward.sort(key=lambda r: int(r.get("index", 0)))  # stable: a catch stays after its step
    rows = forward + [r for r in steps if r.get("phase") == "compensation"]
    _mark_current(rows, body, now, tz)
    return rows


def event_line(event: dict[str, Any], now: float, tz: tzinfo | None = None) -> str:
    text = f"{event.get('kind', '?')} {local_time(event.get('at_epoch'), now, tz)}"
    if event.get("kind") == "cancelled" and event.get("compensate"):
        text += " (with compensation)"
    if event.get("error"):
        text += f": {event['error']}"
    return text


def render(body: dict[str, Any], now: float, tz: tzinfo | None = None, traceback: bool = False) -> str:
    """The whole history as text, deterministic in ``now`` and ``tz`` (``loom watch`` compares it).

    ``now`` is the control plane's clock when it says (``read_at``): under ``loom time advance``
    the reader's clock is not the functions', and "in 59m" must count in theirs."""
    read_at = body.get("read_at_epoch")
    now = float(read_at) if isinstance(read_at, (int, float)) else now
    out = io.StringIO()
    state = state_of(body)
    if state:
        out.write(f"{body.get('id')}  {str(state.get('kind', '')).upper()}  {local_reason(state, now, tz)}\n")
    missing = unregistered_line(body)
    if missing:  # why no step is pending: the stack does not have its workflow
        out.write(f"NOT REGISTERED: {missing}\n")
    events = [e for e in body.get("events") or [] if isinstance(e, dict)]
    first, rest = events[:1], events[1:]
    for e in first:
        out.write(event_line(e, now, tz) + "\n")
    rows = rows_of(body, now, tz, traceback)
    columns = [("index", "#"), ("name", "step"), ("kind", "kind"), ("status", "status"), ("tries", "attempts")]
    columns += [("started", "started"), ("took", "took"), ("note", "note")]
    if any(r.get("phase", "forward") != "forward" for r in rows):
        columns.insert(1, ("phase", "phase"))  # a saga's compensations and catches: say which is which
    if not any("kind" in r for r in rows):
        columns = [c for c in columns if c[0] != "kind"]  # an older control plane
    output.table(rows, columns, out, width=100, details="details")
    for e in rest:
        out.write(event_line(e, now, tz) + "\n")
    return out.getvalue()
