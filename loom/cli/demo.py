"""``loom demo``: the example workflows end to end on a fresh embedded stack.

order_fulfillment (with its one-hour sleep, woken through time travel),
payment_retry (fails twice, then succeeds), poison_pill (fails into the DLQ),
payment_webhook (WAITING on a callback, completed from outside through the API).
Progress is printed as it happens, each execution's history as a table, then
the chaos table. The exit status is non-zero
when any workflow ends in the wrong state.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from chaos.report import render_table
from chaos.runner import run_all
from engine.adapters.ledger import DynamoLedger
from engine.log import configure
from loom.cli.output import table
from loom.local import private
from loom.local.emulator.client import ApiError, LocalApi, ok
from loom.local.emulator.clock import format_duration
from loom.local.stack import LocalStack, StackOptions

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATED", "COMPENSATION_FAILED")


@dataclass(frozen=True)
class Case:
    workflow: str
    input: dict[str, Any]
    expected: str
    story: str


CASES = (
    Case("order_fulfillment", {"order_id": "A-1001", "amount": 42}, "COMPLETED", "sleeps an hour (time travel)"),
    Case("payment_retry", {"amount": 9.99}, "COMPLETED", "fails twice, then succeeds"),
    Case("poison_pill", {"order_id": "P-1"}, "FAILED", "always fails: FAILED, parked in the DLQ"),
    Case(
        "payment_webhook",
        {"order_id": "W-1", "amount": 12, "settle_after": 1},
        "COMPLETED",
        "WAITING on a payment callback, completed from outside",
    ),
    Case(
        "order_saga",
        {"sku": "S-1", "amount": 30},
        "COMPENSATED",
        "ship fails for good: refund, then release (saga)",
    ),
    Case(
        "price_lines",
        {"lines": [{"sku": f"L{i}", "qty": i + 1, "unit_price": 2.5} for i in range(6)]},
        "COMPLETED",
        "a map over 6 lines, 5 at a time; results in line order",
    ),
)


@dataclass
class DemoOptions:
    tick: float = 0.5
    workers: int = 2
    timeout: float = 180.0
    chaos: bool = True
    state_dir: Path | None = None
    keep_state: bool = False


class Demo:
    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.options = options
        self.out = out or sys.stdout
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:6.1f}s] {text}\n")
        self.out.flush()

    def run(self) -> int:
        own_dir = self.options.state_dir is None
        state_dir = Path(self.options.state_dir or tempfile.mkdtemp(prefix="loom-demo-"))
        log_file = state_dir / "stack.log"
        # The terminal shows progress; the stack's own JSON lines go with the functions' output.
        log_stream = private.open_append(log_file)
        configure("INFO", stream=log_stream)
        self.say("starting the embedded stack (moto server, 3 functions from template.yaml)...")
        stack = LocalStack(
            StackOptions(
                port=0,
                api_port=0,
                workers=self.options.workers,
                tick=self.options.tick,
                state_dir=state_dir,
                queue_visibility_timeout=10,  # a redelivery within 10 s of a kill (the template's: 20 s)
                log_file=log_file,
            )
        )
        workflows_ok = False
        try:
            stack.start()
            self.say(f"emulator {stack.endpoint_url}  control plane {stack.api_url}  workers {stack.worker_pids()}")
            self.say(f"function logs: {log_file}")
            workflows_ok = self.workflows(stack)
        finally:
            self.say("stopping the stack...")
            stack.stop()
            log_stream.close()
            configure("INFO")
        chaos_ok = self.chaos() if self.options.chaos else True
        verdict = workflows_ok and chaos_ok
        if own_dir and verdict and not self.options.keep_state:
            shutil.rmtree(state_dir, ignore_errors=True)
        self.say("demo " + ("PASSED" if verdict else f"FAILED (logs kept in {state_dir})"))
        return 0 if verdict else 1

    # ------------------------------------------------------------------ workflows

    def workflows(self, stack: LocalStack) -> bool:
        api = stack.api
        ids: dict[str, str] = {}
        for case in CASES:
            started = ok(api, "POST", "/executions", {"workflow": case.workflow, "input": case.input})
            ids[case.workflow] = started["id"]
            self.say(f"started {case.workflow:<18} {started['id']}  ({case.story})")
        final = self.follow(stack, ids)
        rows = []
        verdict = True
        for case in CASES:
            ex = final.get(case.workflow) or {}
            checks = self.check(stack, case, ex)
            passed = not checks
            verdict = verdict and passed
            rows.append(
                {
                    "workflow": case.workflow,
                    "id": ex.get("id", ids[case.workflow]),
                    "status": ex.get("status", "?"),
                    "expected": case.expected,
                    "result": "PASS" if passed else "FAIL: " + "; ".join(checks),
                }
            )
            self.history(api, case.workflow, ids[case.workflow])
        self.out.write("\nResults\n")
        table(
            rows,
            [
                ("workflow", "workflow"),
                ("id", "id"),
                ("status", "status"),
                ("expected", "expected"),
                ("result", "result"),
            ],
            self.out,
        )
        self.out.write("\n")
        return verdict

    def follow(self, stack: LocalStack, ids: dict[str, str]) -> dict[str, dict[str, Any]]:
        api = stack.api
        seen: dict[str, tuple[Any, ...]] = {}
        final: dict[str, dict[str, Any]] = {}
        traveled = False
        answered: set[str] = set()
        deadline = time.monotonic() + self.options.timeout
        while len(final) < len(ids) and time.monotonic() < deadline:
            for workflow, ex_id in ids.items():
                if workflow in final:
                    continue
                ex = ok(api, "GET", f"/executions/{ex_id}")
                state = (ex["status"], ex.get("current_step"), ex.get("attempt"))
                if seen.get(workflow) != state:
                    seen[workflow] = state
                    step = ex.get("current_step_name") or f"step {ex.get('current_step')}"
                    extra = f" attempt {ex.get('attempt')}" if (ex.get("attempt") or 1) > 1 else ""
                    where = "" if ex["status"] in TERMINAL and ex["status"] != "FAILED" else f"{step}{extra}"
                    self.say(f"{workflow:<18} {ex['status']:<9} {where}".rstrip())
                if ex["status"] in TERMINAL:
                    final[workflow] = ex
                elif ex["status"] == "SLEEPING" and not traveled:
                    traveled = self.time_travel(stack, workflow, ex)
                elif (
                    ex["status"] == "WAITING"
                    and ex_id not in answered
                    and (ex.get("wait") or {}).get("kind") == "callback"
                ) and self.answer_callback(stack, workflow, ex):
                    answered.add(ex_id)
            time.sleep(0.25)
        for workflow in ids:
            if workflow not in final:
                self.say(f"{workflow}: not finished after {self.options.timeout:.0f}s")
        return final

    def time_travel(self, stack: LocalStack, workflow: str, ex: dict[str, Any]) -> bool:
        wake = ex.get("next_wake_at_epoch")
        if wake is None:
            return False
        functions_now = time.time() + stack.time_offset()
        gap = wake - functions_now
        if gap < 60:
            return False  # a short sleep wakes by itself
        jump = math.ceil(gap / 60) * 60  # whole minutes, as a person would type it
        stack.advance_time(jump)
        self.say(
            f"{workflow} sleeps until {ex.get('next_wake_at')} ({format_duration(gap)} from now): "
            f"`loom time advance {format_duration(jump)}`; the sweeper (every {self.options.tick}s) wakes it"
        )
        return True

    def answer_callback(self, stack: LocalStack, workflow: str, ex: dict[str, Any]) -> bool:
        """Play the payment provider: read the token from its inbox, then POST the callback."""
        inbox = DynamoLedger(stack.client("dynamodb"), stack.refs["Table"]).effects(ex["id"])
        # The request of the attempt the execution waits on: under load a submit whose lease
        # lapsed is retried with a new token, and the older request's token answers 410 wait_ended.
        request = inbox.get(f"{ex['id']}:{ex.get('current_step')}.{ex.get('attempt')}") or {}
        token = request.get("callback_token")
        if request.get("kind") != "payment_request" or not token:
            return False
        try:
            answer = ok(stack.api, "POST", f"/callbacks/{token}/succeed", {"result": {"paid": request["amount"]}})
        except ApiError as exc:
            if exc.status != 410:
                raise
            self.say(
                f"{workflow:<18} the provider's token was for an attempt that has ended (410): it waits for the next"
            )
            return False
        self.say(
            f"{workflow:<18} the provider calls back: POST /callbacks/<token>/succeed -> 200 "
            f"(step {answer['step']}, attempt {answer['attempt']}; the token stays out of logs)"
        )
        return True

    def check(self, stack: LocalStack, case: Case, ex: dict[str, Any]) -> list[str]:
        problems = []
        if ex.get("status") != case.expected:
            problems.append(f"status {ex.get('status')} (expected {case.expected})")
        if case.workflow == "payment_retry" and ex.get("status") == "COMPLETED":
            steps = self._history(stack.api, ex["id"])
            charge = next((s for s in steps if s.get("name") == "flaky_charge"), {})
            if len(charge.get("attempts") or []) < 3:
                problems.append("flaky_charge did not retry twice before succeeding")
        paid = ex.get("output", {}).get("paid")
        if case.workflow == "payment_webhook" and ex.get("status") == "COMPLETED" and paid != case.input["amount"]:
            problems.append("the callback's result did not reach the context")
        if case.workflow == "order_saga" and ex.get("status") == "COMPENSATED":
            steps = self._history(stack.api, ex["id"])
            undo = [s for s in steps if s.get("phase") == "compensation" and s.get("status") == "COMPLETED"]
            undone = [s.get("name") for s in undo]
            if undone != ["charge_card#compensate", "reserve_stock#compensate"]:
                problems.append(f"compensations {undone}, expected the refund then the release")
        if case.workflow == "price_lines" and ex.get("status") == "COMPLETED":
            prices = ex.get("output", {}).get("prices") or []
            if [p.get("sku") for p in prices] != [line["sku"] for line in case.input["lines"]]:
                problems.append("the map's results are not in line order")
        if case.workflow == "poison_pill" and ex.get("status") == "FAILED":
            if not ex.get("error"):
                problems.append("no error recorded")
            if not self.in_dlq(stack, ex["id"]):
                problems.append("no DLQ record")
        return problems

    def in_dlq(self, stack: LocalStack, execution_id: str) -> bool:
        sqs = stack.client("sqs")
        for _ in range(5):
            # Peek: received with visibility 0 so the messages stay for `loom dlq`.
            resp = sqs.receive_message(
                QueueUrl=stack.refs["DeadLetterQueue"], MaxNumberOfMessages=10, VisibilityTimeout=0
            )
            if any(execution_id in m.get("Body", "") for m in resp.get("Messages") or []):
                return True
        return False

    @staticmethod
    def _history(api: LocalApi, ex_id: str) -> list[dict[str, Any]]:
        body = ok(api, "GET", f"/executions/{ex_id}/history")
        if isinstance(body, dict):
            body = body.get("steps") or body.get("history") or []
        return list(body)

    def history(self, api: LocalApi, workflow: str, ex_id: str) -> None:
        rows = []
        for st in self._history(api, ex_id):
            attempts = st.get("attempts") or []
            started, finished = st.get("started_at_epoch"), st.get("finished_at_epoch")
            failures = [a for a in attempts if a.get("outcome") not in (None, "ok", "completed", "COMPLETED")]
            rows.append(
                {
                    "index": st.get("index"),
                    "name": _step_label(st),
                    "status": st.get("status"),
                    "attempts": len(attempts),
                    "started_at": st.get("started_at"),
                    "took": f"{finished - started:.2f}s" if started and finished else None,
                    "error": _error_text(st.get("error") or (failures[-1].get("error") if failures else None)),
                }
            )
        self.out.write(f"\nHistory of {workflow} ({ex_id})\n")
        table(
            rows,
            [
                ("index", "#"),
                ("name", "step"),
                ("status", "status"),
                ("attempts", "attempts"),
                ("started_at", "started (functions' clock)"),
                ("took", "took"),
                ("error", "last error"),
            ],
            self.out,
        )

    # ------------------------------------------------------------------ chaos

    def chaos(self) -> bool:
        """The chaos table: ``chaos.runner.run_all`` on a stack of its own.

        The kit starts its own stack because its faults need settings the demo's stack
        does not have (the crash hook, a throttling proxy, its own workflows).
        """
        self.say("running the chaos scenarios: each injects one failure and checks the invariants...")
        results = run_all(out=self.out)
        self.out.write("\nChaos\n" + render_table(results) + "\n")
        return all(r.passed for r in results)


def _error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, str):
        text: str = error
        try:
            error = json.loads(text)
        except ValueError:
            return text
    if isinstance(error, dict):
        return f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
    return str(error)


def _step_label(st: dict[str, Any]) -> Any:
    """A compensation's record is named ``<step>#compensate``: shown as ``undo <step>``."""
    name = st.get("name")
    if st.get("phase") == "compensation" and isinstance(name, str):
        return "undo " + name.removesuffix("#compensate")
    return name
