"""Steps a month inside the AWS always-free allowances, from measured per-step costs.

Allowances (always free, per month): SQS 1M requests; Lambda 1M requests and
400,000 GB-seconds; DynamoDB 25 WCU and 25 RCU of provisioned capacity, which
template.yaml splits between the table and its indexes. Provisioned capacity is
per second, so a month's worth assumes the load is spread evenly; the peak rate
each capacity allows is reported beside it.

Fixed monthly costs come off each allowance before steps are counted: the
sweeper runs every minute (its idle tick cost, measured), and Lambda's SQS
pollers long-poll an idle queue (``idle_pollers`` polls per 20 seconds; AWS
documents scaling down to as few as 2 pollers when traffic is low).
"""

from __future__ import annotations

from typing import Any

from loom.template import Template

MONTH_SECONDS = 30 * 86400
SQS_REQUESTS = 1_000_000
LAMBDA_REQUESTS = 1_000_000
LAMBDA_GB_SECONDS = 400_000
LONG_POLL_SECONDS = 20


def provisioned(template: Template | None = None) -> dict[str, dict[str, int]]:
    """WCU/RCU of the table and each index, from template.yaml."""
    tpl = template or Template()
    table = next(iter(tpl.of_type("AWS::DynamoDB::Table").values()))["Properties"]
    out = {
        "table": {
            "wcu": int(table["ProvisionedThroughput"]["WriteCapacityUnits"]),
            "rcu": int(table["ProvisionedThroughput"]["ReadCapacityUnits"]),
        }
    }
    for index in table.get("GlobalSecondaryIndexes", []):
        out[index["IndexName"]] = {
            "wcu": int(index["ProvisionedThroughput"]["WriteCapacityUnits"]),
            "rcu": int(index["ProvisionedThroughput"]["ReadCapacityUnits"]),
        }
    return out


def project(
    run: dict[str, Any],
    *,
    sweeper_idle: dict[str, Any],
    sweeper_seconds_per_tick: float,
    sweeper_memory_mb: int,
    idle_pollers: int = 2,
    tick_seconds: float = 60.0,
) -> dict[str, Any]:
    """Steps a month each allowance allows for one measured mode, and which binds first."""
    steps = run["committed_steps"]
    tot = run["totals"]
    lam = run["lambda"]
    ticks = MONTH_SECONDS / tick_seconds
    limits: dict[str, dict[str, float]] = {}

    def limit(name: str, allowance: float, fixed: float, per_step: float, note: str) -> None:
        room = max(0.0, allowance - fixed)
        limits[name] = {
            "allowance": allowance,
            "fixed_per_month": fixed,
            "per_step": per_step,
            "steps_per_month": room / per_step if per_step > 0 else float("inf"),
            "note": note,  # type: ignore[dict-item]
        }

    idle_polls = idle_pollers * MONTH_SECONDS / LONG_POLL_SECONDS
    sweeper_sqs = sum(v for k, v in sweeper_idle["by_operation"].items() if k.startswith("sqs:"))
    limit(
        "sqs_requests",
        SQS_REQUESTS,
        idle_polls + sweeper_sqs * ticks,
        tot["sqs_requests_per_step_without_empty_receives"],
        f"{idle_pollers} idle pollers x 1 long poll / {LONG_POLL_SECONDS}s are fixed; busy receives, "
        "deletes and sends per step",
    )
    # At low traffic the event source hands each message to its own invocation: the
    # conservative count is one invocation per message received, not per batch seen here.
    per_step_invocations = max(lam["worker_invocations_per_step"], tot["messages_received"] / steps)
    limit(
        "lambda_requests",
        LAMBDA_REQUESTS,
        ticks,
        per_step_invocations,
        "one worker invocation per message received; the sweeper's ticks are fixed",
    )
    gb = lam["memory_mb"] / 1024
    limit(
        "lambda_gb_seconds",
        LAMBDA_GB_SECONDS,
        ticks * sweeper_seconds_per_tick * sweeper_memory_mb / 1024,
        lam["worker_billed_seconds_per_step"] * gb,
        "worker duration measured in-process against the local emulator (not AWS latency)",
    )
    cap = provisioned()
    wcu, rcu = tot["wcu_per_step"], tot["rcu_per_step"]
    idle_rcu = sweeper_idle["rcu"]
    for target, units in cap.items():
        key = "table" if target == "table" else target
        limit(
            f"dynamodb_{target}_wcu",
            units["wcu"] * MONTH_SECONDS,
            sweeper_idle["wcu"].get(key, 0.0) * ticks,
            wcu.get(key, 0.0),
            f"{units['wcu']} WCU provisioned; peak {units['wcu'] / wcu[key]:.1f} steps/s"
            if wcu.get(key)
            else f"{units['wcu']} WCU provisioned",
        )
        limit(
            f"dynamodb_{target}_rcu",
            units["rcu"] * MONTH_SECONDS,
            idle_rcu.get(key, 0.0) * ticks,
            rcu.get(key, 0.0),
            f"{units['rcu']} RCU provisioned",
        )
    binding = min(limits, key=lambda k: limits[k]["steps_per_month"])
    return {
        "mode": run["mode"],
        "limits": limits,
        "binding": binding,
        "steps_per_month": limits[binding]["steps_per_month"],
        "assumptions": {
            "month_seconds": MONTH_SECONDS,
            "sweeper_tick_seconds": tick_seconds,
            "idle_pollers": idle_pollers,
        },
    }
