"""What a poll's not-yet means (pure): check again after a delay, or the bound ran out.

not-yet number n (= wait.polls + 1) of attempt a
  ├─ past wait.deadline ────────────► TIMED_OUT  (PollTimeout)
  ├─ n >= max_checks ───────────────► EXHAUSTED  (PollExhausted)
  └─ otherwise ─────────────────────► AGAIN after delay_after(strategy, n), capped at the deadline
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.poll_strategy import check_key, delay_after
from engine.state import Wait
from engine.workflow import PollSpec


class PollVerdict(StrEnum):
    AGAIN = "again"
    TIMED_OUT = "timed_out"
    EXHAUSTED = "exhausted"


@dataclass(frozen=True)
class PollNext:
    verdict: PollVerdict
    checks: int  # the checks this attempt has made, this one included
    delay: float = 0.0  # AGAIN: seconds until the next check


def judge_not_yet(execution_id: str, wait: Wait, st: PollSpec, now: float) -> PollNext:
    """Check number ``wait.polls + 1`` of ``wait``'s attempt said not yet: what follows."""
    checks = wait.polls + 1
    if wait.deadline is not None and now >= wait.deadline:
        return PollNext(PollVerdict.TIMED_OUT, checks)
    if st.max_checks is not None and checks >= st.max_checks:
        return PollNext(PollVerdict.EXHAUSTED, checks)
    delay = delay_after(st.strategy, checks, check_key(execution_id, wait.step, wait.attempt, checks))
    if wait.deadline is not None:
        delay = min(delay, wait.deadline - now)
    return PollNext(PollVerdict.AGAIN, checks, delay)
