"""``loom chaos ... --html report.html``: one self-contained page, one row per scenario.

Each row: the scenario and its fault, a timeline (inline SVG: the run, the fault, the
recovery, from ``Result.timeline``), the invariants checked with their verdict and any
violation, and the recovery time. No script, no external file: it opens from a CI
artifact as it is. Every text from a result is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from chaos.scenario import FAIL, PASS, SKIP, Result
from loom.svg import esc, spans

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#202124;background:#fff}
table{border-collapse:collapse;width:100%}
th,td{border:1px solid #dadce0;padding:.5rem;vertical-align:top;text-align:left}
th{background:#f1f3f4}
.PASS{color:#1b7a3d;font-weight:600}.FAIL{color:#b3261e;font-weight:600}.SKIP{color:#5f6368;font-weight:600}
ul{margin:.25rem 0;padding-left:1.1rem}
.violation{color:#b3261e}
small{color:#3c4043}
"""


def _timeline(r: Result) -> str:
    if r.status == SKIP:
        return f"<small>skipped: {esc(r.reason.splitlines()[0] if r.reason else '')}</small>"
    rows: list[dict[str, object]] = [{"kind": "run", "label": "scenario run", "start": 0.0, "end": r.duration_seconds}]
    rows += r.timeline
    if not r.timeline and r.recovery_seconds is not None:
        # A result without marks (an older run, the soak): its recovery, placed at the run's end.
        start = max(0.0, r.duration_seconds - r.recovery_seconds)
        rows.append(
            {
                "kind": "recovery",
                "label": f"recovered in {r.recovery_seconds:.1f}s",
                "start": start,
                "end": r.duration_seconds,
            }
        )
    return spans(rows, r.duration_seconds, f"timeline of {r.name}")


def _invariants(r: Result) -> str:
    if r.status == SKIP:
        return "<small>not run</small>"
    head, _, listed = r.invariant.partition(":")
    checks = [c.strip() for c in listed.split(";")[0].split(",") if c.strip()] if listed else []
    mark = "&#10003;" if r.status == PASS else "&#10007;"
    items = "".join(f"<li>{mark} {esc(c)}</li>" for c in checks)
    items += "".join(f'<li class="violation">{esc(v)}</li>' for v in r.violations)
    return f'<span class="{esc(r.status)}">{esc(r.status)}</span> <small>{esc(head)}</small><ul>{items}</ul>'


def _row(r: Result) -> str:
    recovery = "-" if r.recovery_seconds is None else f"{r.recovery_seconds:.1f}s"
    return (
        "<tr>"
        f'<th scope="row">{esc(r.name)}<br><small>{esc(r.fault)}</small></th>'
        f"<td>{_timeline(r)}<br><small>injected: {esc(r.injected)}</small><br>"
        f"<small>observed: {esc(r.observed)}</small></td>"
        f"<td>{_invariants(r)}</td>"
        f"<td>{esc(recovery)}<br><small>run {r.duration_seconds:.1f}s</small></td>"
        "</tr>"
    )


def render(results: Sequence[Result], title: str = "Loom chaos report", now: float | None = None) -> str:
    passed = sum(r.status == PASS for r in results)
    failed = sum(r.status == FAIL for r in results)
    skipped = sum(r.status == SKIP for r in results)
    when = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if now is not None else ""
    rows = "".join(_row(r) for r in results)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{esc(title)}</h1><p>{passed} passed, {failed} failed, {skipped} skipped"
        + (f" &middot; {esc(when)}" if when else "")
        + '</p><table><thead><tr><th scope="col">scenario</th><th scope="col">timeline (seconds from the start)</th>'
        '<th scope="col">invariants</th><th scope="col">recovery</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></body></html>\n"
    )


def write(results: Sequence[Result], path: Path | str, now: float | None = None) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(results, now=now), encoding="utf-8")
    return target
