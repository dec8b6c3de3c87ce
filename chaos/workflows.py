"""Workflows shaped for chaos scenarios (registered when LOOM_WORKFLOW_MODULES lists ``chaos.workflows``).

Every step lands its side effect in the ledger under its idempotency key, like
the examples, and adds what the chaos kit needs to aim a fault from outside:
the pid of the process running the step, a window after the effect in which a
worker can be killed, and a downstream "switch" the kit can repair.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

from engine import (
    NonRetryableError,
    RetryPolicy,
    StepContext,
    child,
    map_items,
    sleep,
    step,
    wait_for_callback,
    workflow,
)
from workflows.waiting import OrderApproval


class DownstreamBroken(Exception):
    """The step's downstream service rejects the call (until the chaos kit repairs it)."""


def _ledger(ctx: StepContext) -> Any:
    return ctx.services.get("ledger")


def _land(ctx: StepContext, kind: str, **data: Any) -> dict[str, Any]:
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.apply(ctx.idempotency_key, {"kind": kind, **data})
    return {f"{kind}_key": ctx.idempotency_key}


def _plain(name: str) -> Any:
    def run(ctx: StepContext) -> dict[str, Any]:
        ledger = _ledger(ctx)
        if ledger is not None:
            ledger.ran(ctx.idempotency_key)
        return _land(ctx, name, index=ctx.step_index)

    run.__name__ = name
    return run


def charge_then_linger(ctx: StepContext) -> dict[str, Any]:
    """Land the charge, then linger on the first run: the window where a worker dies after its effect.

    The effect records the pid (and hostname) running it so the kit can SIGKILL
    exactly that process, or its Lambda container, from outside; the re-run (same idempotency key) finds the effect
    already applied and does not charge twice.
    """
    ledger = _ledger(ctx)
    runs = ledger.ran(ctx.idempotency_key) if ledger is not None else ctx.attempt
    where = {"pid": os.getpid(), "host": socket.gethostname()}  # a container's hostname is its id
    out = _land(ctx, "charge", amount=ctx.data.get("amount", 0), run=runs, **where)
    if runs == 1:
        time.sleep(float(ctx.data.get("linger", 20)))
    return {**out, "charged": ctx.data.get("amount", 0)}


@workflow("chaos_crash_window")
class CrashWindow:
    steps = [_plain("reserve"), charge_then_linger, _plain("ship")]
    retry = RetryPolicy(max_attempts=4, base=0.5, max_delay=2, jitter="none")


def _repaired(ctx: StepContext) -> bool:
    ledger = _ledger(ctx)
    entries = getattr(ledger, "entries", None)
    return entries is not None and f"{ctx.execution_id}:fix" in entries(ctx.execution_id)


def downstream_call(ctx: StepContext) -> dict[str, Any]:
    """Raises while the downstream is broken (poison), or kills its worker if the input says so."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    if not _repaired(ctx):
        if ctx.data.get("poison") == "kill":
            os._exit(137)  # an OOM or segfault: the process dies on every attempt
        raise DownstreamBroken("the downstream service rejects this request (chaos poison)")
    return _land(ctx, "downstream", index=ctx.step_index)


@workflow("chaos_poison")
class Poison:
    steps = [_plain("prepare"), downstream_call, _plain("confirm")]
    retry = RetryPolicy(max_attempts=2, base=0.5, max_delay=1, jitter="none")


@workflow("chaos_nap")
class Nap:
    """A short sleep: its wake travels as a delayed SQS message (and the lease as a backup)."""

    steps = [_plain("before"), sleep(seconds=4, name="nap"), _plain("after")]


# The lost-timer scenario's timers: longer than the scenario waits for both executions to reach
# their waits, so neither delayed message fires on its own before the purge however loaded the
# machine. With 4 s timers, an execution that reached its wait 4 s before the other had its
# message delivered, not lost, and the scenario failed on a loaded machine.
LOST_TIMER_SECONDS = 300


@workflow("chaos_lost_nap")
class LostNap:
    """A sleep whose delayed wake the lost-timer scenario deletes before it can fire."""

    steps = [_plain("before"), sleep(seconds=LOST_TIMER_SECONDS, name="nap"), _plain("after")]


@workflow("chaos_long_nap")
class LongNap:
    """A sleep past SQS's 15-minute delay: only the sweeper can wake it (time travel gets there)."""

    steps = [_plain("before"), sleep(minutes=20, name="long_nap"), _plain("after")]


def flaky(ctx: StepContext) -> dict[str, Any]:
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    if ctx.attempt <= int(ctx.data.get("fail_first", 1)):
        raise DownstreamBroken(f"attempt {ctx.attempt} fails (chaos backoff)")
    return _land(ctx, "flaky", index=ctx.step_index)


@workflow("chaos_backoff")
class Backoff:
    """A retry that waits in a delayed message: the other timer the lost-timer scenario deletes."""

    steps = [
        _plain("first"),
        step(
            flaky,
            retry=RetryPolicy(max_attempts=3, base=LOST_TIMER_SECONDS, max_delay=LOST_TIMER_SECONDS, jitter="none"),
        ),
        _plain("last"),
    ]


def _undo(name: str) -> Any:
    """A compensation that lands its undo under ``<id>:<step>:compensate``; with ``linger_undo``
    its first run lingers after the effect, with its pid, so the kit can kill it there."""

    def run(ctx: StepContext) -> dict[str, Any]:
        ledger = _ledger(ctx)
        runs = ledger.ran(ctx.idempotency_key) if ledger is not None else ctx.attempt
        where = {"pid": os.getpid(), "host": socket.gethostname()}
        out = _land(ctx, f"undo_{name}", index=ctx.step_index, run=runs, undoes=dict(ctx.result or {}), **where)
        if runs == 1 and ctx.data.get("linger_undo") == name:
            time.sleep(float(ctx.data.get("linger", 20)))
        return out

    run.__name__ = f"undo_{name}"
    return run


def ship_or_refuse(ctx: StepContext) -> dict[str, Any]:
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    raise NonRetryableError("no courier will take it (chaos saga)")


UNDO_RETRY = RetryPolicy(max_attempts=4, base=0.5, max_delay=2, jitter="none")


@workflow("chaos_saga")
class Saga:
    """reserve, charge, ship: ship always fails, so charge and then reserve are undone."""

    steps = [
        step(_plain("reserve"), compensate=_undo("reserve"), compensate_retry=UNDO_RETRY),
        step(_plain("charge"), compensate=_undo("charge"), compensate_retry=UNDO_RETRY),
        step(ship_or_refuse, name="ship", compensate=_undo("ship")),
    ]
    retry = RetryPolicy(max_attempts=2, base=0.5, max_delay=1, jitter="none")


def price_line(ctx: StepContext) -> dict[str, Any]:
    """A fan-out item: lands its effect under ``<id>:<step>:<item>``, the item's own key."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
        ledger.apply(ctx.idempotency_key, {"kind": "price", "item": ctx.item_index})
    return {"line": ctx.item, "price": int(ctx.item) * 10}


def _lines(ctx: StepContext) -> list[Any]:
    return list(range(int(ctx.data.get("lines", 8))))


def _total(ctx: StepContext) -> dict[str, Any]:
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    return _land(ctx, "total", total=sum(r["price"] for r in ctx.results("prices") if r is not None))


@workflow("chaos_fanout")
class Fanout:
    """A map over the input's lines (window 3), then a step that reads the results in item order."""

    steps = [map_items(items=_lines, run=price_line, name="prices", max_concurrency=3), step(_total, name="total")]
    retry = RetryPolicy(max_attempts=3, base=0.5, max_delay=1, jitter="none")


def priced_or_refused(ctx: StepContext) -> dict[str, Any]:
    """An item of ``chaos_fanout_batch``: a line the input lists in ``refuse`` fails for good."""
    if ctx.item_index in (ctx.data.get("refuse") or []):
        raise NonRetryableError(f"line {ctx.item_index} cannot be priced (chaos batch)")
    return price_line(ctx)


def _batch_report(ctx: StepContext) -> dict[str, Any]:
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    batch = ctx.batch("prices")
    return _land(ctx, "report", reason=batch.reason.value, failed=batch.failed, not_started=batch.not_started)


@workflow("chaos_fanout_batch")
class FanoutBatch:
    """A map over the input's lines (window 3, no tolerance) whose refused lines end the batch
    early; the step after reads the batch result."""

    steps = [
        map_items(items=_lines, run=priced_or_refused, name="prices", max_concurrency=3),
        step(_batch_report, name="report"),
    ]
    retry = RetryPolicy(max_attempts=2, base=0.5, max_delay=1, jitter="none")


# ---------------------------------------------------------------- the composite: every primitive at once


def screen_order(ctx: StepContext) -> dict[str, Any]:
    """The child's one step: lands its effect, returns no ``_key`` (the parent commits this output)."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    _land(ctx, "screen", order=ctx.data.get("order_id"))
    return {"screened": True}


@workflow("chaos_composite_screen")
class CompositeScreen:
    """The composite's child: a fraud screen in an execution of its own."""

    steps = [screen_order]
    retry = RetryPolicy(max_attempts=3, base=0.5, max_delay=1, jitter="none")


def _screen_input(ctx: StepContext) -> dict[str, Any]:
    knobs = ctx.data.get("child_chaos")  # the kit aims the crash hook at the child through the parent
    return {"order_id": ctx.execution_id, **({"chaos": knobs} if isinstance(knobs, dict) else {})}


def hand_over_token(ctx: StepContext, token: str) -> None:
    """The provider's inbox is the ledger (one request per attempt, as ``payment_webhook``'s):
    the kit reads the token there and completes it through the control plane."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.apply(
            f"{ctx.execution_id}:{ctx.step_index}.{ctx.attempt}", {"kind": "payment_request", "callback_token": token}
        )


def ship_parcel(ctx: StepContext) -> dict[str, Any]:
    """Refuses for good when the input says ``ship: refuse``: its catch takes over."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    if ctx.data.get("ship") == "refuse":
        raise NonRetryableError("the courier refuses the parcel (chaos composite)")
    return _land(ctx, "ship", index=ctx.step_index)


def ship_by_fallback(ctx: StepContext, error: dict[str, Any]) -> dict[str, Any]:
    """The catch: another courier, unless the input says ``fallback: refuse`` (then the saga unwinds).

    Its effect lands under ``<id>:<step>:catch``; its result names no ``_key`` (the
    forward step's key is the only one a step's record may name)."""
    ledger = _ledger(ctx)
    if ledger is not None:
        ledger.ran(ctx.idempotency_key)
    if ctx.data.get("fallback") == "refuse":
        raise NonRetryableError("no fallback courier either (chaos composite)")
    if ledger is not None:
        ledger.apply(ctx.idempotency_key, {"kind": "fallback_ship", "caught": error.get("type")})
    return {"shipped_by": "fallback"}


@workflow("chaos_composite")
class Composite:
    """map (items undone one by one) -> child -> callback -> charge (undone) -> ship (caught) -> confirm.

    ``ship: refuse`` sends ship to its catch; ``fallback: refuse`` fails the catch too, so the
    saga undoes charge, then each priced line from the last to the first."""

    steps = [
        map_items(
            items=_lines,
            run=step(price_line, name="price_line", compensate=_undo("line"), compensate_retry=UNDO_RETRY),
            name="prices",
            max_concurrency=3,
        ),
        child("chaos_composite_screen", input=_screen_input, name="screen"),
        wait_for_callback("payment", submit=hand_over_token, timeout=timedelta(hours=1)),
        step(_plain("charge"), compensate=_undo("charge"), compensate_retry=UNDO_RETRY),
        step(ship_parcel, name="ship", catch=ship_by_fallback),
        _plain("confirm"),
    ]
    retry = RetryPolicy(max_attempts=2, base=0.5, max_delay=1, jitter="none")


@workflow("chaos_approval")
class Approval:
    """``order_approval`` with retries: a worker lost mid-step (the soak kills some) spends an
    attempt as ``WorkerLost``, and the example's single attempt would end FAILED on the first."""

    steps = list(OrderApproval.steps)
    retry = RetryPolicy(max_attempts=4, base=0.5, max_delay=2, jitter="none")


# ---------------------------------------------------------------- a deploy between two steps

REDEPLOY_VERSIONS = "LOOM_CHAOS_REDEPLOY"
"""Which versions of ``chaos_redeploy`` a deploy registers ("1", "2" or "1,2"): the redeploy
scenario "deploys" by setting it on every function and recycling their processes."""


class RedeployV1:
    """a, a sleep only the sweeper wakes (past SQS's 15-minute delay), then b."""

    steps = [_plain("a"), sleep(minutes=20, name="park"), _plain("b")]


class RedeployV2:
    """Version 1 with an audit inserted before b: an execution of version 1 parked at the sleep
    would run audit where it expects b, so it must block instead."""

    steps = [_plain("a"), sleep(minutes=20, name="park"), _plain("audit"), _plain("b")]


# The kit reads the functions' environment here, not in functions/: the knob exists only for
# the chaos kit, whose deploy is a change of this variable (the default is version 1 alone).
_REDEPLOY_SHAPES = {1: RedeployV1, 2: RedeployV2}
for _version in os.environ.get(REDEPLOY_VERSIONS, "1").split(","):
    workflow("chaos_redeploy", version=int(_version))(_REDEPLOY_SHAPES[int(_version)])
