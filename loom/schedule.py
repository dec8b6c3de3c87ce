"""EventBridge schedule expressions, checked the way EventBridge checks them.

``sam deploy`` fails (the rule is rejected) on ``rate(5 minute)``, ``rate(0 minutes)``,
``rate(1 minutes)`` or a malformed cron. The local stack reads the same template, so it rejects
the same expressions when it reads it, instead of running a schedule that AWS would never
accept. The parser is the engine's (engine/schedule_expr.py), which also computes the fire
times of a workflow's ``schedule=``: one reading of the syntax for the template and the engine.
"""

from __future__ import annotations

from engine.errors import InvalidSchedule
from engine.schedule_expr import check, check_cron, rate_seconds

#: A schedule expression EventBridge would reject (a ValueError).
ScheduleError = InvalidSchedule

__all__ = ["ScheduleError", "check", "check_cron", "rate_seconds"]
