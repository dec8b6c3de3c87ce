"""The embedded emulator's own account of where its CPU goes, per operation (scripts/bench.py --local-throughput).

On when the emulator starts with ``LOOM_EMULATOR_METER=<file>`` in its environment; the bench
sets it, reads the file before and after a phase and divides by the steps committed.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


class RequestMeter:
    """CPU seconds the emulator's threads spent per operation (``LOOM_EMULATOR_METER``: bench.py --local-throughput).

    Thread CPU time, which a busy machine moves far less than wall time; from the request line to the last byte sent.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._cpu: dict[str, float] = defaultdict(float)
        self._count: dict[str, int] = defaultdict(int)

    def add(self, operation: str, cpu: float) -> None:
        with self._lock:
            self._cpu[operation] += cpu
            self._count[operation] += 1

    def run(self, every: float = 0.5) -> None:
        """Write the totals every ``every`` seconds (a reader diffs two reads to get one phase's share)."""
        while True:
            time.sleep(every)
            self.dump()

    def dump(self) -> None:
        with self._lock:
            doc = {op: {"requests": self._count[op], "cpu_seconds": self._cpu[op]} for op in sorted(self._cpu)}
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
        partial.replace(self.path)  # a reader never sees half a file


METER: RequestMeter | None = None  # set by the emulator's main when asked


def operation(headers: Any, path: str) -> str:
    """``DynamoDB_20120810.UpdateItem`` -> ``dynamodb.UpdateItem`` (JSON protocols name it in X-Amz-Target)."""
    if headers is None:
        return "(no request)"
    target = str(headers.get("X-Amz-Target") or "")
    if target:
        prefix, _, action = target.partition(".")
        return f"{'dynamodb' if prefix.startswith('DynamoDB') else prefix.lower()}.{action}"
    return "moto-api" if path.startswith("/moto-api") else "other"
