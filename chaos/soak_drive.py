"""The outside world of the soak: it completes the callbacks and sends the signals its waits need.

A callback's token is where the workflow hands it to its provider, the provider's inbox (the
ledger row ``<id>:<step>.<attempt>``, as chaos/callback_race.py reads it); the soak completes
it through the control plane once, twice at the same instant, or once and again after the
execution has moved on (a provider's late retry). A signal goes before the wait (kept until the
wait comes), at the wait, or in a burst of two at the wait. Every answer is kept for the
final check (chaos/soak_checks.py); a 5xx or a dropped connection is retried as a provider
would, and marked ambiguous (the first try may have taken effect, so its retry's "repeat" is
the only answer the soak sees).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.observe import Watcher
from chaos.target import Target
from engine.errors import ConflictError, TransientError, WaitEnded

RETRIES = 6


def callback_body(execution_id: str) -> dict[str, Any]:
    return {"result": {"paid": execution_id[-1]}}


def token_of(t: Target, execution_id: str, step: int, attempt: int) -> str | None:
    row = t.ledger.effects(execution_id).get(f"{execution_id}:{step}.{attempt}") or {}
    token = row.get("callback_token")
    return str(token) if token else None


@dataclass
class Answers:
    """What the control plane answered one execution: (status, repeat) per completion or signal."""

    sent: list[tuple[int, bool]] = field(default_factory=list)
    ambiguous: int = 0  # sends retried after a 5xx or a dropped connection
    stage: int = 0  # 0: nothing sent; 1: the first completion(s) sent; 2: done
    attempt: int = 1  # the wait attempt whose token was completed


class Driver:
    """One pass at a time (``step``) over the executions that wait on the soak."""

    def __init__(self, t: Target, w: Watcher, planned: Mapping[str, Any]) -> None:
        self.t, self.w = t, w
        self.planned = {eid: p for eid, p in planned.items() if p.drive}
        self.answers: dict[str, Answers] = {eid: Answers() for eid in self.planned}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _once(self, path: str, body: Any) -> tuple[int, bool]:
        """One call through the control plane, or through the engine when the target has none."""
        if self.t.api_url:
            status, answer = self.t.http("POST", path, body)
            return status, bool(answer.get("repeat"))
        try:
            if path.startswith("/callbacks/"):
                token = path.split("/")[2]
                return 200, self.t.engine.complete_callback(token, "succeed", body).repeat
            execution_id, name = path.split("/")[2], path.split("/")[4]
            self.t.engine.signal(execution_id, name, body.get("payload"))
            return 200, False
        except WaitEnded:  # a ConflictError the API answers 410
            return 410, False
        except ConflictError:
            return 409, False
        except TransientError:
            return 503, False

    def _post(self, path: str, body: Any) -> tuple[int, bool, bool]:
        """(status, repeat, ambiguous) of one call, retried past 5xx and dropped connections."""
        status, ambiguous = 0, False
        for n in range(RETRIES):
            try:
                status, repeat = self._once(path, body)
            except OSError:
                status, repeat = 0, False
            if status and status < 500 and status != 429:
                return status, repeat, ambiguous
            ambiguous = True
            time.sleep(0.5 * (n + 1))  # a provider's backoff, in real time
        return status, False, ambiguous

    def _send(self, eid: str, path: str, body: Any, copies: int) -> None:
        go = threading.Barrier(copies)
        got = self.answers[eid]

        def fire() -> None:
            go.wait()
            status, repeat, ambiguous = self._post(path, body)
            with self._lock:
                got.sent.append((status, repeat))
                got.ambiguous += int(ambiguous)

        threads = [threading.Thread(target=fire, daemon=True) for _ in range(copies)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)

    def _callback(self, eid: str, drive: Mapping[str, Any], got: Answers) -> None:
        ex = self.w.latest(eid)
        if ex is None:
            return
        step, mode = int(drive["step"]), drive["callback"]
        if got.stage == 0 and ex.status.value == "WAITING" and ex.current_step == step:
            token = token_of(self.t, eid, step, ex.attempt)
            if token:  # the token is never logged or kept: the path is built and dropped here
                got.attempt = ex.attempt
                self._send(eid, f"/callbacks/{token}/succeed", callback_body(eid), 2 if mode == "twice" else 1)
                got.stage = 1 if mode == "late" else 2
        elif got.stage == 1 and (ex.terminal or ex.current_step > step):
            token = token_of(self.t, eid, step, got.attempt)
            if token:
                self._send(eid, f"/callbacks/{token}/succeed", callback_body(eid), 1)
            got.stage = 2

    def _signal(self, eid: str, drive: Mapping[str, Any], got: Answers) -> None:
        ex = self.w.latest(eid)
        if ex is None or got.stage:
            return
        mode, step = drive["signal"], int(drive["step"])
        at_wait = ex.status.value == "WAITING" and ex.current_step == step
        if mode == "early" or at_wait:
            path = f"/executions/{eid}/signals/{drive['name']}"
            self._send(eid, path, {"payload": {"approved": True}}, 2 if mode == "burst" else 1)
            got.stage = 2

    def step(self) -> None:
        for eid, p in self.planned.items():
            got = self.answers[eid]
            if got.stage == 2:
                continue
            try:
                if "callback" in p.drive:
                    self._callback(eid, p.drive, got)
                else:
                    self._signal(eid, p.drive, got)
            except Exception as exc:  # an emulator hiccup: the next pass tries again
                self.errors.append(f"{eid}: {type(exc).__name__}")  # its text may hold a token

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(interval)

    def pending(self) -> list[str]:
        return [eid for eid, got in self.answers.items() if got.stage != 2]
