"""Callback race: concurrent completions of one token (same body, other bodies, failures,
heartbeats), and a completion racing its own timeout.

Must show: per token exactly one completion wins (200, not a repeat); every other answer is a
200 repeat of that same body or a 410 (the wait has ended); history records the winner and
nothing else; the next step runs once. Against the timeout, exactly one of the two takes
effect, and the API's answer agrees with what history shows.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Any

from chaos.invariants import check_waits
from chaos.observe import Watcher
from chaos.scenario import Result, Scenario, new_id, verify
from chaos.target import TIME, Target

NAME = "callback_race"
FAULT = "10 concurrent completions per token; a completion racing the sweeper's timeout"
EXECUTIONS = 3
BODIES: list[tuple[str, Any]] = (
    [("succeed", {"result": {"paid": 1}})] * 4
    + [("succeed", {"result": {"paid": 2}})] * 2
    + [("fail", {"error": {"type": "Declined", "message": "card"}})] * 2
    + [("heartbeat", None)] * 2
)


def token_of(t: Target, eid: str, attempt: int = 1) -> str:
    effects = t.ledger.effects(eid)
    return str(effects[f"{eid}:1.{attempt}"]["callback_token"])


def storm(t: Target, token: str) -> list[tuple[str, Any, int, dict[str, Any]]]:
    """Every completion of BODIES at once (a barrier lines the threads up)."""
    barrier = threading.Barrier(len(BODIES))
    answers: list[tuple[str, Any, int, dict[str, Any]]] = []
    lock = threading.Lock()

    def fire(action: str, body: Any) -> None:
        barrier.wait()
        status, answer = t.http("POST", f"/callbacks/{token}/{action}", body)
        with lock:
            answers.append((action, body, status, answer))

    threads = [threading.Thread(target=fire, args=pair) for pair in BODIES]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return answers


def judge(r: Result, eid: str, answers: list[tuple[str, Any, int, dict[str, Any]]]) -> tuple[str, Any] | None:
    codes = Counter(status for _, _, status, _ in answers)
    # 410: the wait has ended (another body won); 409: a roll-forward that lost to the winner's advance.
    r.expect(set(codes) <= {200, 409, 410}, f"{eid}: answers other than 200/409/410: {dict(codes)}")
    winners = [(a, b) for a, b, status, ans in answers if status == 200 and a != "heartbeat" and not ans.get("repeat")]
    r.expect(len(winners) == 1, f"{eid}: {len(winners)} winning completions, expected exactly 1")
    if len(winners) != 1:
        return None
    won = winners[0]
    for action, body, status, ans in answers:
        if status == 200 and action != "heartbeat" and ans.get("repeat"):
            r.expect((action, body) == won, f"{eid}: a 200 repeat of another body {body} than the winner's {won}")
    return won


def run(t: Target, r: Result) -> None:
    ids = [new_id(NAME, i) for i in range(EXECUTIONS)]
    racer = new_id(NAME, 9)
    outcomes: dict[str, str] = {}
    with Watcher(t, interval=0.1) as w:
        w.add(*ids, racer)
        for eid in [*ids, racer]:
            t.start("payment_webhook", {"amount": 1, "settle_after": 1}, eid)
        w.wait([*ids, racer], lambda ex: ex.status.value == "WAITING", timeout=60, what="WAITING")
        first = time.time()
        for eid in ids:
            won = judge(r, eid, storm(t, token_of(t, eid)))
            outcomes[eid] = "none" if won is None else won[0]
            if won is not None and won[0] == "fail":  # the retry asks again: answer its new token
                w.wait([eid], lambda ex: ex.status.value == "WAITING" and ex.attempt == 2, timeout=120, what="retry")
                t.http("POST", f"/callbacks/{token_of(t, eid, 2)}/succeed", {"result": {"paid": 3}})
        # The racer: its timeout is due; the sweeper and a completion go at the same instant.
        t.advance_time(3600 + 1)
        answer: dict[str, Any] = {}
        go = threading.Barrier(2)

        def complete() -> None:
            go.wait()
            answer["status"], answer["body"] = t.http(
                "POST", f"/callbacks/{token_of(t, racer)}/succeed", {"result": {"paid": 9}}
            )

        th = threading.Thread(target=complete)
        th.start()
        go.wait()
        t.tick_sweeper()
        th.join(60)
        w.wait([racer], lambda ex: ex.attempt == 2 or ex.current_step > 1, timeout=60, what="the race's outcome")
        if answer.get("status") == 410:
            w.wait([racer], lambda ex: ex.status.value == "WAITING" and ex.attempt == 2, timeout=120, what="retry")
            t.http("POST", f"/callbacks/{token_of(t, racer, 2)}/succeed", {"result": {"paid": 9}})
        w.wait([*ids, racer], timeout=120)
        done = time.time()
    [record] = [h for h in t.history(racer) if h.index == 1]
    took = record.attempts[0].outcome.value if record.attempts else "none"
    r.expect(
        (answer.get("status"), took) in ((200, "completed"), (410, "failed")),
        f"the racing completion answered {answer.get('status')} but history shows attempt 1 {took}",
    )
    for eid in [*ids, racer]:
        ex = t.get(eid)
        assert ex is not None
        for v in check_waits(ex, t.history(eid), t.store.signals(eid)):
            r.fail(f"{eid}: {v}")
        runs = (t.entries(eid).get(f"{eid}:3") or {}).get("runs", 0)
        r.expect(runs == 1, f"{eid}: the step after the wait ran {runs} times, expected once")
    r.injected = f"{len(BODIES)} concurrent completions x {EXECUTIONS} tokens; sweeper vs completion at the timeout"
    r.observed = (
        f"winners: {dict(Counter(outcomes.values()))}; timeout race: API {answer.get('status')}, history {took}"
    )
    r.recovered(first, done)
    r.evidence.update(winners=outcomes, timeout_race={"api": answer.get("status"), "history": took})
    verify(r, t, w, [*ids, racer], api_check=True)


SCENARIO = Scenario(NAME, FAULT, (TIME,), run, __doc__ or "")

if __name__ == "__main__":  # the program: above every layer, so it may import the CLI
    from chaos.cli import main_for

    sys.exit(main_for(NAME))
