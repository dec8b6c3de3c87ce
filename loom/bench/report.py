"""The benchmark's printed tables."""

from __future__ import annotations

from typing import Any


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace(",", "").replace("-", "", 1).replace("x", "").isdigit()


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if value == float("inf"):
            return "unbounded"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render(result: dict[str, Any]) -> str:
    parts: list[str] = []
    m = result["machine"]
    parts.append(
        f"machine: {m['nproc']} cores, Python {m['python']}, moto {m['moto']}, {m['platform']}\ncommand: {m['command']}"
    )
    runs = [*result["runs"], result["floor"]]
    parts.append("\n== per committed step ==")
    rows = []
    for r in runs:
        t = r["totals"]
        rows.append(
            [
                r["mode"],
                r["committed_steps"],
                r["steps_per_second"],
                r["step_latency_ms"]["p50"],
                r["step_latency_ms"]["p99"],
                t["sqs_requests_per_step"],
                t["dynamodb_requests_per_step"],
                t["wcu_per_step"].get("table", 0.0),
                t["wcu_per_step"].get("GSI1", 0.0),
                t["wcu_per_step"].get("GSI2", 0.0),
                t["rcu_per_step"].get("table", 0.0),
                t["rcu_per_step"].get("GSI1", 0.0),
                t["ledger_requests_per_step"],
                r.get("lambda", {}).get("worker_invocations_per_step", 0.0),
            ]
        )
    parts.append(
        table(
            [
                "mode",
                "steps",
                "steps/s",
                "p50 ms",
                "p99 ms",
                "SQS req",
                "DDB req",
                "WCU tbl",
                "WCU GSI1",
                "WCU GSI2",
                "RCU tbl",
                "RCU GSI1",
                "ledger req",
                "Lambda inv",
            ],
            rows,
        )
    )
    parts.append("(SQS/DDB requests exclude the example ledger's; capacity units computed from item sizes)")
    for r in runs:
        parts.append(f"\n== requests per committed step: {r['mode']} ==")
        parts.append(
            table(
                ["role", "service", "operation", "count", "per step"],
                [[x["role"], x["service"], x["operation"], x["count"], x["per_step"]] for x in r["requests"]],
            )
        )
        t = r["totals"]
        parts.append(
            f"empty receives: {t['sqs_empty_receives']}; moto's own ConsumedCapacity per step: "
            f"WCU {t['wcu_per_step'].get('moto', 0.0):.3f}, RCU {t['rcu_per_step'].get('moto', 0.0):.3f}"
        )
    parts.append("\n== execution item size (bytes) by step reached ==")
    sizes = result["runs"][0]["execution_item_bytes_by_step"]
    parts.append(table(["step", *sizes.keys()], [["bytes", *sizes.values()]]))
    parts.append("\n== sweeper, one tick ==")
    parts.append(
        table(
            ["sleeping", "due", "requests", "RCU GSI1", "RCU tbl", "WCU tbl", "woken", "operations"],
            [
                [
                    s["sleeping"],
                    s["due"],
                    s["requests"],
                    s["rcu"].get("GSI1", 0.0),
                    s["rcu"].get("table", 0.0),
                    s["wcu"].get("table", 0.0),
                    s["report"].get("woken", 0),
                    " ".join(f"{k}={v}" for k, v in sorted(s["by_operation"].items())),
                ]
                for s in result["sweeper"]
            ],
        )
    )
    parts.append(render_recovery(result["recovery"]))
    parts.append("\n== steps a month inside the always-free allowances ==")
    for p in result["projection"]:
        parts.append(f"{p['mode']}: {p['steps_per_month']:,.0f} steps/month, bound by {p['binding']}")
        parts.append(
            table(
                ["limit", "allowance", "fixed/month", "per step", "steps/month", "note"],
                [
                    [k, v["allowance"], v["fixed_per_month"], v["per_step"], v["steps_per_month"], v["note"]]
                    for k, v in p["limits"].items()
                ],
            )
        )
    parts.append("\n== overhead over the floor (engine / floor, per committed step) ==")
    parts.append(
        table(
            ["mode", "requests", "WCU", "time"],
            [[o["mode"], o["requests"], o["wcu"], o["time"]] for o in result["overhead"]],
        )
    )
    parts.append("\n== targets ==")
    parts.append(table(["check", "value", "met"], [[c["check"], c["value"], c["met"]] for c in result["checks"]]))
    return "\n".join(parts)


def render_recovery(rows: list[dict[str, Any]]) -> str:
    """The recovery scenarios' rows (loom/bench/scenarios.py: ``recovery``)."""
    head = "\n== recovery after a worker is killed (engine seconds from the kill to the step's commit) ==\n"
    return head + table(
        [
            "mode",
            "killed",
            "after step",
            "extension s",
            "lease s",
            "tick s",
            "ticks",
            "engine s",
            "wall s",
            "status",
            "attempts",
        ],
        [
            [
                r["mode"],
                r.get("crash_point", "after_checkpoint"),
                r["crash_after_step"],
                r.get("visibility_timeout", ""),
                r["lease_seconds"],
                r["sweeper_tick_seconds"],
                r["sweeper_ticks"],
                r["engine_seconds"],
                r["wall_seconds"],
                r["final_status"],
                r.get("attempts_recorded", ""),
            ]
            for r in rows
        ],
    )
