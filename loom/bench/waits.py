"""What a wait costs: writes and SQS requests beyond the steps it replaces, and nothing while waiting.

In-process on moto (``mock_aws``): the real DynamoDB and SQS adapters, a driver that plays the
SQS event source one message at a time (no chaining: the dearest case), and botocore event
hooks that count every request. Each wait is measured against the same workflow with a plain
step in its place, so "beyond its steps" is a difference of two measured runs.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from engine import Registry
from engine.adapters.dynamodb import DynamoStore
from engine.adapters.sqs import SqsQueue
from engine.batch import process_batch
from engine.clock import FakeClock
from engine.config import EngineConfig
from engine.runtime import Engine
from engine.workflow import NOT_YET, build_spec, child, wait_for_callback, wait_for_signal, wait_until
from loom.bench.report import table
from loom.template import create_resources

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
SENDS = frozenset({"SendMessage", "SendMessageBatch"})
MONTH_SECONDS = 30 * 86400
APPROVAL_STEPS = 4  # the "long human approval": reserve, wait 3 days for a signal, decide, ship, notify


def _plain(ctx: Any) -> dict[str, Any]:
    return {f"s{ctx.step_index}": True}


def _registry(tokens: list[str], polls: list[int]) -> Registry:
    def submit(ctx: Any, token: str) -> None:
        tokens.append(token)

    def check(ctx: Any) -> Any:
        polls.append(1)
        return NOT_YET if len(polls) <= 3 else {"settled": True}

    reg = Registry()
    reg.add(build_spec("plain", [_plain, _plain, _plain]))
    reg.add(build_spec("callback", [_plain, wait_for_callback("cb", submit=submit, timeout=3 * 86400), _plain]))
    reg.add(build_spec("signal", [_plain, wait_for_signal("go", timeout=3 * 86400), _plain]))
    reg.add(build_spec("poll", [_plain, wait_until(check, every=60, timeout=3600), _plain]))
    reg.add(build_spec("kid", [_plain]))
    reg.add(build_spec("parent", [_plain, child("kid"), _plain]))
    reg.add(build_spec("approval", [_plain, wait_for_signal("approval", timeout=3 * 86400), _plain, _plain, _plain]))
    return reg


class _Rig:
    def __init__(self, session: Any, refs: dict[str, Any]) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.delivered = 0
        self.tokens: list[str] = []
        self.polls: list[int] = []
        ddb, self.sqs = session.client("dynamodb"), session.client("sqs")
        for client in (ddb, self.sqs):
            client.meta.events.register("before-call.*.*", self._count)
        self.queue_url = refs["StepQueue"]
        self.clock = FakeClock()
        rig = self

        class HeldQueue(SqsQueue):
            """moto runs DelaySeconds on the wall clock; hold delayed sends for the fake clock
            (each still counted as the one SendMessage it is)."""

            def send(self, message: Any, delay_seconds: int = 0) -> None:
                if delay_seconds <= 0:
                    super().send(message, 0)
                    return
                rig.calls[("sqs", "SendMessage")] += 1
                rig.held.append((rig.clock.now() + delay_seconds, message))

        self.held: list[tuple[float, Any]] = []
        self.raw_queue = HeldQueue(self.sqs, refs["StepQueue"], refs["DeadLetterQueue"])
        self.engine = Engine(
            registry=_registry(self.tokens, self.polls),
            store=DynamoStore(ddb, refs["Table"], 4),
            queue=self.raw_queue,
            clock=self.clock,
            config=EngineConfig(shards=4),
            rng=random.Random(0),
        )
        self.counting = True

    def _count(self, model: Any, **_: Any) -> None:
        if self.counting:
            self.calls[(model.service_model.service_name, model.name)] += 1

    @contextmanager
    def quiet(self) -> Any:
        """The driver's own receives and deletes are the event source's, counted as deliveries."""
        self.counting = False
        try:
            yield
        finally:
            self.counting = True

    def release_due(self) -> None:
        due = [(t, m) for t, m in self.held if t <= self.clock.now()]
        self.held = [(t, m) for t, m in self.held if t > self.clock.now()]
        with self.quiet():
            for _, m in due:
                super(type(self.raw_queue), self.raw_queue).send(m, 0)

    def drain(self) -> None:
        self.release_due()
        while True:
            with self.quiet():
                got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0)
            messages = got.get("Messages", [])
            if not messages:
                return
            m = messages[0]
            self.delivered += 1
            record = {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
            }
            process_batch(self.engine, {"Records": [record]}, remaining=None)
            with self.quiet():
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    def figures(self) -> dict[str, int]:
        ddb_writes = sum(n for (svc, op), n in self.calls.items() if svc == "dynamodb" and op in WRITES)
        ddb_reads = sum(n for (svc, op), n in self.calls.items() if svc == "dynamodb" and op not in WRITES)
        sends = sum(n for (svc, op), n in self.calls.items() if svc == "sqs" and op in SENDS)
        return {"writes": ddb_writes, "reads": ddb_reads, "sqs_sends": sends, "deliveries": self.delivered}


def _measure(story: Callable[[_Rig], None]) -> dict[str, int]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        rig = _Rig(session, create_resources(session))
        story(rig)
        return rig.figures()


def _run(
    workflow: str, *, before: Callable[[_Rig], object] | None = None, answer: Callable[[_Rig], object] | None = None
) -> dict[str, int]:
    def story(rig: _Rig) -> None:
        rig.engine.start(workflow, {}, execution_id="b1")
        if before is not None:
            before(rig)
        rig.drain()
        if answer is not None:
            assert rig.engine.get("b1").status.value == "WAITING"
            answer(rig)
            rig.drain()
        while not rig.engine.get("b1").terminal:  # polls: the delayed checks, on the fake clock
            rig.clock.advance(60)
            rig.drain()
        assert rig.engine.get("b1").status.value == "COMPLETED"

    return _measure(story)


def _waiting_cost() -> dict[str, int]:
    """Requests on behalf of a WAITING execution while three simulated days pass: none."""

    def story(rig: _Rig) -> None:
        rig.engine.start("signal", {}, execution_id="b1")
        rig.drain()
        rig.calls.clear()
        rig.delivered = 0
        for _ in range(3 * 24):  # an hour at a time, one second short of the timeout
            rig.clock.advance(3600 - 1 / 72)
            rig.drain()

    return _measure(story)


def wait_costs() -> dict[str, Any]:
    """Each wait against the plain workflow it replaces one step of."""
    base = _run("plain")
    rows = {
        "callback": _run(
            "callback", answer=lambda r: r.engine.complete_callback(r.tokens[-1], "succeed", {"result": {}})
        ),
        "signal, sent while waiting": _run("signal", answer=lambda r: r.engine.signal("b1", "go", {})),
        "signal, sent before the wait": _run("signal", before=lambda r: r.engine.signal("b1", "go", {})),
        "poll, 3 not-yets": _run("poll"),
        "child (1-step child)": _run("parent"),
    }
    out: list[dict[str, Any]] = []
    for name, fig in rows.items():
        extra = {k: fig[k] - base[k] for k in fig}
        out.append({"wait": name, **fig, **{f"extra_{k}": v for k, v in extra.items()}})
    result = {"baseline": base, "rows": out, "while_waiting": _waiting_cost(), "approval": _approval()}
    result["checks"] = checks(result)
    return result


def checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's budget: a callback or signal costs <= 3 writes and <= 1 SQS request beyond its steps."""
    out = []
    for r in result["rows"]:
        if r["wait"].startswith(("callback", "signal")):
            sqs = r["extra_sqs_sends"] + r["extra_deliveries"]
            out.append(
                {
                    "check": f"{r['wait']}: <= 3 writes and <= 1 SQS request beyond its steps",
                    "value": f"{r['extra_writes']} writes, {sqs} SQS",
                    "met": r["extra_writes"] <= 3 and sqs <= 1,
                }
            )
    idle = result["while_waiting"]
    out.append(
        {
            "check": "waiting 3 days costs no request for the execution",
            "value": idle,
            "met": not any(idle.values()),
        }
    )
    return out


def _approval() -> dict[str, Any]:
    """The free-tier projection's "long human approval": 4 steps around a 3-day signal wait."""
    fig = _run("approval", answer=lambda r: r.engine.signal("b1", "approval", {"approved": True}))
    # Each SQS message is sent once, received once and deleted once; each delivery is one invocation.
    sqs_requests = fig["sqs_sends"] + 2 * fig["deliveries"] + 0
    # Fixed monthly costs first, as in the step projection: 2 idle pollers long-polling 20 s,
    # and the sweeper's tick every minute (one Lambda invocation each).
    idle_polls, ticks = 2 * MONTH_SECONDS / 20, MONTH_SECONDS / 60
    allowances = {
        "sqs_requests": (1_000_000 - idle_polls, sqs_requests),
        "lambda_requests": (1_000_000 - ticks, fig["deliveries"] + 1),  # + the control plane's signal request
        "dynamodb_table_wcu": (20 * MONTH_SECONDS, fig["writes"]),  # small items: 1 WCU a write
    }
    per_month = {k: room / cost for k, (room, cost) in allowances.items()}
    binding = min(per_month, key=per_month.__getitem__)
    return {
        "per_execution": {**fig, "sqs_requests": sqs_requests, "lambda_invocations": fig["deliveries"] + 1},
        "executions_per_month": per_month,
        "binding": binding,
        "waiting_cost": "0 requests, 0 invocations; one ~1 KB item per waiting execution",
    }


def render(result: dict[str, Any]) -> str:
    rows = [
        [
            r["wait"],
            r["writes"],
            r["extra_writes"],
            r["sqs_sends"],
            r["extra_sqs_sends"],
            r["extra_deliveries"],
            r["extra_reads"],
        ]
        for r in result["rows"]
    ]
    base = result["baseline"]
    parts = [
        "== waits: cost beyond the plain step each replaces ==",
        f"baseline (3 plain steps, one message each): {base['writes']} writes, {base['sqs_sends']} SQS sends, "
        f"{base['deliveries']} deliveries",
        table(["wait", "writes", "+writes", "SQS sends", "+sends", "+deliveries", "+reads"], rows),
        f"while waiting 3 days: {result['while_waiting']}",
    ]
    a = result["approval"]
    parts.append(
        f"long human approval (4 steps, 3-day signal wait): {a['per_execution']}; executions a month: "
        + ", ".join(f"{k} {v:,.0f}" for k, v in a["executions_per_month"].items())
        + f"; binds: {a['binding']}"
    )
    parts += [f"{'met' if c['met'] else 'NOT MET'}: {c['check']} ({c['value']})" for c in result.get("checks", [])]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(wait_costs()))
