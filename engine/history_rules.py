"""The step-history rules: when a step's history record may take a commit or a failure.

The history record of a step (``STEP#<nnn>#<name>``) is the commit point of its
result. Two writes touch it, each under a condition that enforces these rules;
the DynamoDB adapter builds its condition expressions from fragments named after
them, and ``tests/integration/test_history_rules.py`` checks that both agree.

    (none) ──fail(a)──► RETRYING ──fail(a'>a)──► RETRYING ...
       │                   │  └──fail(final)──► FAILED   (a final failure is a commit point too)
       └──commit(a)──► COMPLETED ◄──commit(a)──┘

- COMMIT_ONCE: a step is COMPLETED at most once; later commits lose.
- FAILED_IS_FINAL: a late success of an attempt that was already given up on
  (FAILED at that attempt or a later one) must not resurrect the step.
- ONE_RECORD_PER_ATTEMPT: each attempt number appears once in the history; a
  failure *or a commit* of an attempt that is already recorded is refused. (Two
  runs of one attempt, an unguarded first run and a guarded redelivery, may both
  finish: the first record stands, the second run follows it; a callback completed
  after its timeout was recorded loses, and history shows the timeout.)
- NO_FAILURE_AFTER_COMMIT: once COMPLETED, no failure is recorded.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from engine.state import StepRecord, StepStatus


class HistoryRule(StrEnum):
    COMMIT_ONCE = "commit_once"
    FAILED_IS_FINAL = "failed_is_final"
    ONE_RECORD_PER_ATTEMPT = "one_record_per_attempt"
    NO_FAILURE_AFTER_COMMIT = "no_failure_after_commit"


def last_attempt(record: StepRecord | None) -> int:
    if record is None or not record.attempts:
        return 0
    return max(a.attempt for a in record.attempts)


def last_error(record: StepRecord) -> dict[str, Any]:
    """The error of the record's latest attempt (or the record's own, for an older record)."""
    last = record.attempts[-1] if record.attempts else None
    return (last.error if last else None) or record.error or {}


def commit_refused_by(record: StepRecord | None, attempt: int) -> HistoryRule | None:
    """The rule a commit of ``attempt`` would break, or None if it may commit."""
    if record is None:
        return None
    if record.status is StepStatus.COMPLETED:
        return HistoryRule.COMMIT_ONCE
    if last_attempt(record) >= attempt:
        if record.status is StepStatus.FAILED:
            return HistoryRule.FAILED_IS_FINAL
        # Another run of this attempt, or a wait's timeout, recorded it first: this commit loses.
        return HistoryRule.ONE_RECORD_PER_ATTEMPT
    return None


def failure_refused_by(record: StepRecord | None, attempt: int) -> HistoryRule | None:
    """The rule recording a failure of ``attempt`` would break, or None if it may be recorded."""
    if record is None:
        return None
    if last_attempt(record) >= attempt:
        return HistoryRule.ONE_RECORD_PER_ATTEMPT
    if record.status is StepStatus.COMPLETED:
        return HistoryRule.NO_FAILURE_AFTER_COMMIT
    return None
