"""Engine settings. Handlers build this from environment variables; the engine never reads them."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from engine.errors import InvalidInput


@dataclass(frozen=True)
class EngineConfig:
    # GSI1 partitions the due index into this many shards (DUE#0..DUE#n-1).
    shards: int = 4
    # Longest a step may run unobserved: at least the worker's timeout (every run starts
    # with more than a whole lease ahead, see verdicts.run_is_covered, and ends within the
    # timeout). A RUNNING execution's next_wake_at is kept between lease and 2 * lease
    # ahead, so a lost message or a dead worker is found 1 to 2 leases later (DESIGN.md,
    # Performance: recovery). The one default: functions/settings.py and template.yaml
    # take theirs from here (tests/integration/test_template.py checks the template's).
    lease_seconds: float = 60.0
    # A redelivered message the execution has moved past adopts its current attempt
    # (verdicts.may_adopt) once the execution has had no write for this long. At most the
    # queue's visibility timeout less two heartbeats: a redelivery comes at least that long
    # after the dead invocation's last write. functions/settings.py derives it so.
    adopt_quiet_seconds: float = 10.0
    # SQS DelaySeconds stops at 15 minutes; longer waits belong to the sweeper.
    max_sqs_delay: int = 900
    # Run the next step in the same invocation instead of a queue round trip.
    chain: bool = True
    # Time kept back when starting a step: one with a declared timeout starts (chained or
    # from a batch) only with that timeout plus this left; any step is chained only with
    # more than this left.
    chain_reserve_seconds: float = 10.0
    # A batch's records after the first start only while the invocation has this share of its
    # time (as it was when the batch began) left, or the chain reserve if that is less, plus
    # the longest record so far; the rest are handed back (verdicts.check_record).
    record_reserve_fraction: float = 0.25
    # A message may arrive this much before its ready time and still run.
    early_tolerance: float = 1.0
    # Executions one sweep call may re-drive, and the page size of its queries.
    sweep_limit: int = 500
    sweep_page: int = 100
    # The sweeper's schedule (template.yaml: rate(1 minute)). Only used to turn the
    # clock into a tick number, so that consecutive sweeps start at consecutive shards.
    sweep_period_seconds: float = 60.0
    # How long a lapsed lease may be put down to the queue's backlog (in leases, counted from
    # the execution's last transition, when its message was sent). Past it the message is
    # taken as lost even while the queue is busy: under a backlog that never drains, a lost
    # message is re-driven after this long instead of never.
    backlog_patience_leases: float = 15.0
    # The same patience while the dead-letter queue holds messages: SQS may have parked the
    # execution's message there after maxReceiveCount deliveries, where no backlog delivers
    # it, and the sweeper cannot tell which executions' messages those are.
    parked_patience_leases: float = 2.0
    # How long the message being handled waited in the step queue, in seconds: not a setting.
    # The worker sets it per message (engine/batch.py::queue_wait, from SQS's own timestamps);
    # the message a step sends next will likely wait as long, so its lease starts that much
    # later (transitions.lease). Under a backlog the lease then outlasts the wait: no start
    # mark for a late message and no sweeper postponement. 0 everywhere else.
    queue_wait: float = 0.0
    # A sweep stops with this much of its invocation left, so that it sends what it claimed.
    sweep_reserve_seconds: float = 10.0
    # A schedule's fire time found by a sweep at most this late is on time (a tick's period and
    # one more for a late or slow tick); later, it was missed, and its ``catch_up`` decides.
    schedule_grace_seconds: float = 120.0
    # A BLOCKED execution (engine/definitions.py) is looked at again by the sweeper this often:
    # slow on purpose, one read and one write each time, never a message.
    blocked_recheck_seconds: float = 300.0
    # How long an ended execution and every item it left stay readable (template.yaml's
    # RetentionDays; 0 keeps them for ever). The ending write sets the execution's
    # ``expires_at``; the sweeper stamps the rest once no late write can land (DESIGN.md,
    # "Retention").
    retention_seconds: float = 30 * 86400.0

    @property
    def end_grace_seconds(self) -> float:
        """After an execution ends, how long a write of an attempt that was still running may land:
        the worker's invocation (its Timeout, at most a lease) and as much again. The sweeper stamps
        the execution's other items with its expiry after this, so a late write is stamped too."""
        return 2 * self.lease_seconds

    def __post_init__(self) -> None:
        if self.shards < 1 or self.shards > 1000:
            raise InvalidInput("shards must be between 1 and 1000")
        if self.lease_seconds <= 0:
            raise InvalidInput("lease_seconds must be positive")
        if self.adopt_quiet_seconds < 0:
            raise InvalidInput("adopt_quiet_seconds must not be negative")
        if not 0 <= self.queue_wait < float("inf"):
            raise InvalidInput("queue_wait must be a finite number of seconds, not negative")
        if self.sweep_limit < 1 or self.sweep_page < 1:
            raise InvalidInput("sweep_limit and sweep_page must be at least 1")
        if self.sweep_period_seconds <= 0:
            raise InvalidInput("sweep_period_seconds must be positive")
        if self.blocked_recheck_seconds <= 0:
            raise InvalidInput("blocked_recheck_seconds must be positive")
        if self.retention_seconds < 0:
            raise InvalidInput("retention_seconds must not be negative (0 keeps ended executions for ever)")
        if self.schedule_grace_seconds < 0:
            raise InvalidInput("schedule_grace_seconds must not be negative")
        if not 0 <= self.record_reserve_fraction < 1:
            raise InvalidInput("record_reserve_fraction must be at least 0 and below 1")
        if not 0 <= self.max_sqs_delay <= 900:
            raise InvalidInput("max_sqs_delay must be between 0 and 900")


def shard_of(execution_id: str, shards: int) -> int:
    """Stable across processes (unlike ``hash``), so every writer picks the same shard."""
    return zlib.crc32(execution_id.encode("utf-8")) % shards
