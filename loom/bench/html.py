"""``scripts/bench.py --html``: the bench's own figures drawn as inline SVG on one page.

Two charts the tables make hard to see: what one committed step costs in each mode (and
the floor: the same work without the engine), and what one sweeper tick costs as the
number of sleeping executions grows. The tables stay the reference (``render`` in
loom/bench/report.py); the page links nothing and runs no script.
"""

from __future__ import annotations

from typing import Any

from loom.svg import bars, esc, lines

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#202124;background:#fff;max-width:60rem}"
    "table{border-collapse:collapse}th,td{border:1px solid #dadce0;padding:.3rem .6rem;text-align:left}"
    "th{background:#f1f3f4}.no{color:#b3261e;font-weight:600}.yes{color:#1b7a3d}"
)


def _no_moto(values: dict[str, float]) -> float:
    return sum(v for k, v in values.items() if k != "moto")  # moto's own figure is a cross-check, not a cost


def step_costs(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{measure: {mode: value per committed step}}`` for the engine's modes and the floor."""
    runs = [*result.get("runs", []), *([result["floor"]] if result.get("floor") else [])]
    out: dict[str, dict[str, float]] = {
        "SQS requests": {},
        "DynamoDB requests": {},
        "write units": {},
        "read units": {},
        "Lambda invocations": {},
    }
    for r in runs:
        t, mode = r["totals"], str(r["mode"])
        out["SQS requests"][mode] = float(t["sqs_requests_per_step"])
        out["DynamoDB requests"][mode] = float(t["dynamodb_requests_per_step"])
        out["write units"][mode] = _no_moto(t["wcu_per_step"])
        out["read units"][mode] = _no_moto(t["rcu_per_step"])
        invocations = r.get("lambda", {}).get("worker_invocations_per_step")
        if invocations is not None:
            out["Lambda invocations"][mode] = float(invocations)
    return {k: v for k, v in out.items() if v}


def sweeper_costs(result: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """``{measure: [(sleeping executions, per tick)]}``."""
    ticks = result.get("sweeper", [])
    return {
        "requests": [(float(s["sleeping"]), float(s["requests"])) for s in ticks],
        "read units (GSI1)": [(float(s["sleeping"]), float(s["rcu"].get("GSI1", 0.0))) for s in ticks],
        "write units (table)": [(float(s["sleeping"]), float(s["wcu"].get("table", 0.0))) for s in ticks],
    }


def _checks(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{esc(c['check'])}</td><td>{esc(c['value'])}</td>"
        f'<td class="{"yes" if c["met"] else "no"}">{"met" if c["met"] else "NOT met"}</td></tr>'
        for c in result.get("checks", [])
    )
    return f'<table><tr><th scope="col">check</th><th scope="col">value</th><th scope="col">met</th></tr>{rows}</table>'


def render(result: dict[str, Any]) -> str:
    """The page; raises ``ValueError`` for a document that is not the bench's result."""
    if not isinstance(result, dict) or not isinstance(result.get("runs"), list) or "sweeper" not in result:
        raise ValueError("not a bench result: it needs 'runs' and 'sweeper' (scripts/bench.py --json writes one)")
    machine = result.get("machine", {})
    due = ", ".join(sorted({str(s.get("due", "?")) for s in result["sweeper"]})) or "-"
    costs = bars(step_costs(result), "cost of one committed step, by mode", "per committed step")
    sweep = lines(
        sweeper_costs(result), "cost of one sweeper tick against sleeping executions", "sleeping executions", "per tick"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Loom bench</title>'
        f"<style>{STYLE}</style></head><body><h1>Loom bench</h1>"
        f"<p><small>{esc(machine.get('command', ''))} &middot; {esc(machine.get('nproc', '?'))} cores, "
        f"Python {esc(machine.get('python', '?'))}, moto {esc(machine.get('moto', '?'))}</small></p>"
        "<h2>Cost per committed step</h2>"
        "<p>chain: steps run back to back in one invocation; one_step: one message per step; "
        "floor: the same work with no engine. Requests exclude the example ledger's; capacity units are "
        "computed from item sizes.</p>"
        f"{costs}<h2>Sweeper cost per tick</h2><p>Due at each tick: {esc(due)} of the sleeping executions.</p>{sweep}"
        f"<h2>Targets</h2>{_checks(result)}</body></html>\n"
    )
