"""The one fault hook inside the worker: a crash between checkpoint and enqueue.

Real life kills workers there (a Lambda timeout, an OOM) and nothing outside the
process can aim at that instant, so the chaos kit needs this hook. It is inert
unless LOOM_CHAOS_CRASH_AFTER_CHECKPOINT is on (a template parameter that
defaults to off), and even then fires only for executions whose input asks:
``{"chaos": {"crash_after_checkpoint": [<step index>, ...]}}``, or, for a fan-out step's
items (after an item's commit, before its join), ``{"chaos": {"crash_after_item": [<item index>, ...]}}``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

EXIT_CODE = 137  # what a SIGKILLed process reports


class CrashAfterCheckpoint:
    def point(self, name: str, **info: Any) -> None:
        if name != "after_checkpoint":
            return
        knobs = (info.get("input") or {}).get("chaos") or {}
        steps = knobs.get("crash_after_checkpoint") or []
        items = knobs.get("crash_after_item") or []
        item = info.get("item")
        if isinstance(knobs, dict) and (item in items if item is not None else info.get("step") in steps):
            print(
                f'{{"event": "chaos.crash_after_checkpoint", "execution_id": "{info.get("execution_id")}", '
                f'"step": {info.get("step")}}}',
                flush=True,
            )
            sys.stdout.flush()
            os._exit(EXIT_CODE)
