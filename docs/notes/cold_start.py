"""CPU, time and memory of a worker's cold start in the local pool: forked from its template, or fresh.

Each round SIGKILLs the pool's one idle worker and waits for its replacement; the figures are the
CPU (user + system, from /proc) the killed process had used, which for a process that served
nothing is its start, its imports and its init (``wiring.warm()``'s clients), and its peak
resident memory (VmHWM, what the pool holds against MemorySize). Used by
docs/notes/2026-12-07-fork-server.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/cold_start.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from loom.local.lambdas.package import build
from loom.local.lambdas.pool import FunctionPool

ROUNDS = 12
# What the worker's init reads; nothing listens there, and init makes no request.
ENV = {
    "PATH": os.environ.get("PATH", ""),
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "cold-start",
    "AWS_SECRET_ACCESS_KEY": "cold-start",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "LOOM_TABLE_NAME": "t",
    "LOOM_QUEUE_URL": "http://127.0.0.1:9/q",
    "LOOM_DLQ_URL": "http://127.0.0.1:9/d",
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def memory_mb(pid: int, field: str = "VmHWM") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no {field} for {pid}")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def measure(package_dir: Path, fork: bool) -> tuple[float, float, float]:
    """Medians: a new worker's CPU seconds and peak MB, and the seconds from a kill to its replacement."""
    pool = FunctionPool(
        function="WorkerFunction",
        handler="functions.worker.handler",
        env=ENV,
        timeout=10,
        package=build(package_dir),
        fork=fork,
    ).start()
    cpus, waits, peaks = [], [], []
    try:
        if fork:
            print(f"the template: {memory_mb(parent(pool.pids()[0]), 'VmRSS'):.1f} MB resident")
        for _ in range(ROUNDS):
            (pid,) = pool.pids()
            cpus.append(cpu_seconds(pid))
            peaks.append(memory_mb(pid))
            began = time.monotonic()
            os.kill(pid, 9)
            while pool.pids() in ([], [pid]):
                time.sleep(0.005)
            waits.append(time.monotonic() - began)
    finally:
        pool.stop()
    return statistics.median(cpus), statistics.median(waits), statistics.median(peaks)


def main() -> None:
    with tempfile.TemporaryDirectory() as state:
        for fork in (True, False, True, False):
            cpu, wait, peak = measure(Path(state), fork)
            how = "forked" if fork else "fresh "
            print(f"{how}: CPU {cpu:.3f} s a cold start, replaced in {wait:.3f} s, peak {peak:.1f} MB (medians)")


if __name__ == "__main__":
    main()
