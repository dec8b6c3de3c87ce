"""The soak: many executions at once with every fault mixed in at random, from a seeded plan.

The same seed gives the same plan (its digest is printed), so a failing soak
can be replayed. Faults come in two kinds: knobs in an execution's input (a
step that crashes its worker once, a crash between checkpoint and enqueue, a
transient failure) and timed events against the whole stack (duplicate
copies, SIGKILLed workers, sweeper storms and races, a shortened visibility
timeout, a throttling window, a purged queue).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from chaos import containers, faults, soak_mix
from chaos.invariants import Snapshot
from chaos.observe import Watcher
from chaos.scenario import FAIL, PASS, Result
from chaos.soak_checks import check_planned
from chaos.soak_drive import Driver
from chaos.target import KILL, PURGE, THROTTLE, TICK, TIME, Target, sweep_in_subprocesses
from engine.state import canonical_json

TIMED_KINDS = ("duplicate", "kill_worker", "sweep_storm", "sweep_race", "visibility", "throttle", "purge")
KNOB_KINDS = ("crash_in_step", "crash_after_checkpoint", "transient_failure")
NEEDS = {"kill_worker": KILL, "sweep_storm": TICK, "sweep_race": TICK, "throttle": THROTTLE, "purge": PURGE}


@dataclass(frozen=True)
class PlannedExecution:
    index: int
    workflow: str
    input: dict[str, Any]
    knobs: tuple[str, ...]
    kind: str = soak_mix.Kind.CHAIN.value
    expect: str = "COMPLETED"  # the status it must end in
    drive: dict[str, Any] = field(default_factory=dict)  # how the soak answers its waits


@dataclass(frozen=True)
class PlannedFault:
    at: float  # seconds after the first start
    kind: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    seed: int
    executions: tuple[PlannedExecution, ...]
    faults: tuple[PlannedFault, ...]

    @property
    def digest(self) -> str:
        doc = {
            "seed": self.seed,
            "executions": [asdict(e) for e in self.executions],
            "faults": [asdict(f) for f in self.faults],
        }
        return hashlib.sha256(canonical_json(doc).encode()).hexdigest()[:16]

    def kinds(self) -> Counter[str]:
        return Counter(e.kind for e in self.executions)

    def expected(self) -> Counter[str]:
        return Counter(e.expect for e in self.executions)

    def expected_by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter[str]] = {}
        for e in self.executions:
            out.setdefault(e.kind, Counter())[e.expect] += 1
        return {kind: dict(c) for kind, c in sorted(out.items())}

    def counts(self) -> Counter[str]:
        c: Counter[str] = Counter(f.kind for f in self.faults)
        for e in self.executions:
            c.update(e.knobs)
        return c


def make_plan(executions: int, seed: int, *, window: float = 20.0) -> Plan:
    """A deterministic mix of kinds (chaos/soak_mix.py), knobs on about a third of the
    executions, timed faults across the window."""
    rng = random.Random(seed)
    planned: list[PlannedExecution] = []
    for i in range(executions):
        d = soak_mix.draft(soak_mix.draw_kind(rng), i, rng)
        knobs, names = soak_mix.knobs_for(d, rng)
        data = soak_mix.merge_knobs({**d.data, "chaos": d.data.get("chaos", {})}, knobs)
        planned.append(PlannedExecution(i, d.workflow, data, names, d.kind.value, d.expect, d.drive))
    count = max(len(TIMED_KINDS), executions // 6)
    kinds = list(TIMED_KINDS) + [
        rng.choice(("duplicate", "kill_worker", "sweep_storm", "duplicate", "throttle", "visibility"))
        for _ in range(count - len(TIMED_KINDS))
    ]
    rng.shuffle(kinds)
    timed = []
    for kind in kinds:
        at = round(rng.uniform(1.0, window), 2)
        params: dict[str, Any] = {}
        if kind == "duplicate":
            params = {"copies": rng.randint(1, 3)}
        elif kind == "kill_worker":
            params = {"which": rng.randrange(16)}
        elif kind == "visibility":
            params = {"seconds": 1, "for": round(rng.uniform(2, 5), 1)}
        elif kind == "throttle":
            params = {"share": round(rng.uniform(0.2, 0.5), 2), "for": round(rng.uniform(2, 4), 1)}
        elif kind == "sweep_storm":
            params = {"ticks": rng.randint(3, 8)}
        timed.append(PlannedFault(at, kind, params))
    # One purge at most: real SQS allows one a minute.
    seen_purge = False
    kept = []
    for f in sorted(timed, key=lambda f: f.at):
        if f.kind == "purge":
            if seen_purge:
                continue
            seen_purge = True
        kept.append(f)
    return Plan(seed, tuple(planned), tuple(kept))


@dataclass
class SoakSummary:
    seed: int
    digest: str
    executions: int
    planned: dict[str, int]
    kinds: dict[str, int] = field(default_factory=dict)  # planned executions by workflow kind
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)  # final statuses, by kind
    injected: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    # What background faults ran into (a sweeper tick timing out under throttling, say): the
    # system's answer to a fault, reported, while the invariants decide pass or fail.
    incidents: list[str] = field(default_factory=list)
    recovery_p50: float | None = None
    recovery_p99: float | None = None
    seconds: float = 0.0
    # What the run cost, read from the outside afterwards (``tally``): step body runs, runs of
    # a key beyond its first, duplicates the ledger absorbed, writes the history does not
    # name (start marks, reclaims, postponements) and messages left in the dead-letter queue.
    figures: dict[str, int] = field(default_factory=dict)
    # Seconds the step queue took to empty once every execution had ended (stale copies).
    drain_seconds: float | None = None

    def render(self) -> str:
        lines = [
            f"soak seed={self.seed} plan digest={self.digest}",
            f"executions: {self.executions}  statuses: {self.statuses}  in {self.seconds:.0f}s",
            "by kind: " + ", ".join(f"{k}={n} {self.by_kind.get(k, {})}" for k, n in sorted(self.kinds.items())),
            "faults injected by kind: " + ", ".join(f"{k}={v}" for k, v in sorted(self.injected.items())),
        ]
        if self.skipped:
            lines.append("not injected on this target: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items()))
        if self.incidents:
            lines.append(f"incidents during faults: {len(self.incidents)}")
            lines += [f"  - {i}" for i in self.incidents[:10]]
        lines.append(f"invariant violations: {len(self.violations)}")
        lines += [f"  - {v}" for v in self.violations[:20]]
        p50 = "-" if self.recovery_p50 is None else f"{self.recovery_p50:.1f}s"
        p99 = "-" if self.recovery_p99 is None else f"{self.recovery_p99:.1f}s"
        lines.append(f"recovery time p50={p50} p99={p99}")
        if self.drain_seconds is not None:
            lines.append(f"step queue drained {self.drain_seconds:.0f}s after the last execution ended")
        if self.figures:
            lines.append("figures: " + ", ".join(f"{k}={v}" for k, v in self.figures.items()))
        return "\n".join(lines)

    def as_result(self) -> Result:
        return Result(
            name="soak",
            fault=f"all faults mixed (seed {self.seed})",
            injected=", ".join(f"{k}={v}" for k, v in sorted(self.injected.items())),
            observed=f"{self.executions} executions: {self.statuses}",
            invariant=f"{len(self.violations)} violation(s)",
            status=FAIL if self.violations else PASS,
            recovery_seconds=self.recovery_p99,
            duration_seconds=self.seconds,
            violations=list(self.violations),
            evidence={
                "digest": self.digest,
                "p50": self.recovery_p50,
                "p99": self.recovery_p99,
                "incidents": list(self.incidents),
                "drain_seconds": self.drain_seconds,
            },
        )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return round(ordered[k], 2)


class _Injector:
    def __init__(self, t: Target, w: Watcher, ids: list[str], rng: random.Random) -> None:
        self.t, self.w, self.ids, self.rng = t, w, ids, rng
        self.recoveries: list[float] = []
        self.pending: list[tuple[float, dict[str, int]]] = []  # (injected at, versions then)
        self.threads: list[threading.Thread] = []
        self.incidents: list[str] = []

    def mark(self) -> None:
        versions = {eid: ex.version for eid in self.ids if (ex := self.w.latest(eid)) is not None and not ex.terminal}
        self.pending.append((time.time(), versions))

    def background(self, fn: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as exc:
                self.incidents.append(f"{type(exc).__name__}: {exc}")

        th = threading.Thread(target=run, daemon=True)
        th.start()
        self.threads.append(th)

    def inject(self, f: PlannedFault) -> None:
        t = self.t
        if f.kind == "duplicate":
            bodies = [m["Body"] for m in faults.peek(t)]
            if not bodies:
                live = [ex for eid in self.ids if (ex := self.w.latest(eid)) is not None and not ex.terminal]
                bodies = [faults.step_body(ex.id, ex.current_step, ex.attempt) for ex in live[:10]]
            faults.send_copies(t, bodies, f.params["copies"])
        elif f.kind == "kill_worker":
            if t.docker_kill:
                containers.docker_kill_container()  # a worker Lambda's container, under LocalStack
            elif pids := t.worker_pids():
                t.kill(pids[f.params["which"] % len(pids)])
        elif f.kind == "sweep_storm":
            self.background(lambda: [t.tick_sweeper() for _ in range(f.params["ticks"])])
        elif f.kind == "sweep_race":
            self.background(lambda: sweep_in_subprocesses(t, 2, at=time.time() + 2.0))
        elif f.kind == "visibility":

            def shorten() -> None:
                with faults.shortened_visibility(t, f.params["seconds"]):
                    time.sleep(f.params["for"])  # the window the fault lasts, in real time

            self.background(shorten)
        elif f.kind == "throttle":
            t.proxy.throttle(f.params["share"], f.params["for"])
        elif f.kind == "purge":
            faults.purge(t)
            if t.can(TIME):
                t.advance_time(2 * t.lease)  # the leases that now drive everything run out sooner
        self.mark()

    def settle(self) -> None:
        for th in self.threads:
            th.join(timeout=120)
        for at, versions in self.pending:
            worst = 0.0
            for eid, v in versions.items():
                moved = self.w.first_seen(eid, _moved_past(v, at))
                if moved is not None:
                    worst = max(worst, moved - at)
            self.recoveries.append(worst)


def tally(entries: dict[str, dict[str, Any]], extra_writes: int) -> Counter[str]:
    """One execution's costs from its ledger rows (runs and duplicates per idempotency key)."""
    runs = [int(row.get("runs", 0)) for row in entries.values()]
    return Counter(
        step_runs=sum(runs),
        repeat_runs=sum(max(0, r - 1) for r in runs),
        absorbed_duplicates=sum(int(row.get("duplicates", 0)) for row in entries.values()),
        extra_writes=extra_writes,
    )


# Final checks read at once: each is round trips to the emulator and some Python here, and the
# two overlap on two cores (1,000 executions' checks took 34.5 s one at a time).
CHECK_THREADS = 4


@dataclass(frozen=True)
class _Checked:
    status: str
    violations: list[str]
    costs: Counter[str]
    recovery: float | None  # the longest gap of a knobbed execution's trail


def _check_one(target: Target, w: Watcher, eid: str, e: PlannedExecution, driver: Driver) -> _Checked:
    ex = target.get(eid)
    violations, report, entries = check_planned(target, w, eid, ex, e, driver.answers.get(eid))
    recovery = None
    if e.knobs:
        recovery = max((b.seen_at - a.seen_at for a, b in itertools.pairwise(w.trail(eid))), default=0.0)
    status = ex.status.value if ex else "MISSING"
    return _Checked(status, violations, tally(entries, report.extra_writes), recovery)


def _check_all(
    target: Target, w: Watcher, ids: list[str], plan: Plan, driver: Driver, summary: SoakSummary
) -> list[float]:
    """Each planned execution against its kind's invariants; the knobbed ones' recovery gaps."""
    statuses: Counter[str] = Counter()
    figures: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    knob_recoveries = []
    with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        checked = list(pool.map(lambda eid, e: _check_one(target, w, eid, e, driver), ids, plan.executions))
    for eid, e, c in zip(ids, plan.executions, checked, strict=True):
        statuses[c.status] += 1
        by_kind.setdefault(e.kind, Counter())[c.status] += 1
        summary.violations += [f"{eid} ({e.kind} {e.workflow}): {v}" for v in c.violations]
        figures.update(c.costs)
        if c.recovery is not None:
            knob_recoveries.append(c.recovery)
    answers = driver.answers.values()
    figures.update(
        callbacks_sent=sum(len(a.sent) for eid, a in driver.answers.items() if "callback" in driver.planned[eid].drive),
        signals_sent=sum(len(a.sent) for eid, a in driver.answers.items() if "signal" in driver.planned[eid].drive),
        ambiguous_answers=sum(a.ambiguous for a in answers),
    )
    summary.statuses = dict(statuses)
    summary.by_kind = {kind: dict(c) for kind, c in sorted(by_kind.items())}
    summary.figures = {**figures, "dlq_messages": faults.dlq_depth(target)}
    return knob_recoveries


def _settle_children(w: Watcher, kids: list[str], summary: SoakSummary, timeout: float) -> None:
    """A crashed child's hold leaves the due index at the sweeper's next visit, and a child swept
    while its parent still waited leaves it at the first sweep after its parent took the notice
    (``Target.settle_seconds``): wait for both."""
    if not kids:
        return
    try:
        w.wait(kids, lambda ex: ex.terminal and ex.next_wake_at is None, timeout=timeout, what="children settled")
    except Exception as exc:
        summary.violations.append(str(exc))


def _finish_driving(driver: Driver, summary: SoakSummary, timeout: float = 60.0) -> None:
    """The late completions go once their executions have moved on; then nothing may be left."""
    deadline = time.monotonic() + timeout
    while driver.pending() and time.monotonic() < deadline:
        driver.step()
        time.sleep(0.5)  # the watcher's next pass, in real time
    if driver.pending():
        summary.violations.append(f"the soak never answered the waits of {driver.pending()[:5]}")
    summary.incidents += driver.errors


def run_soak(
    target: Target, executions: int, seed: int, *, out: TextIO | None = None, timeout: float = 240.0
) -> SoakSummary:
    plan = make_plan(executions, seed)
    summary = SoakSummary(seed, plan.digest, executions, dict(plan.counts()), kinds=dict(plan.kinds()))

    def say(msg: str) -> None:
        if out is not None:
            print(msg, file=out, flush=True)

    say(f"soak: {executions} executions, seed {seed}, plan digest {plan.digest}, {len(plan.faults)} timed faults")
    say(f"soak: kinds {dict(sorted(plan.kinds().items()))}, expected ends {dict(plan.expected())}")
    run_tag = f"soak{seed}-{random.Random().getrandbits(32):08x}"
    ids = [f"{run_tag}-{e.index}" for e in plan.executions]
    kids = [
        k for eid, e in zip(ids, plan.executions, strict=True) for k in soak_mix.child_ids(soak_mix.Kind(e.kind), eid)
    ]
    injected: Counter[str] = Counter()
    started = time.time()
    with Watcher(target, interval=0.3) as w:
        w.add(*ids, *kids)
        driver = Driver(target, w, dict(zip(ids, plan.executions, strict=True)))
        stop = threading.Event()
        driving = threading.Thread(target=driver.run, args=(stop,), name="soak-driver", daemon=True)
        driving.start()  # an early signal goes as soon as the watcher sees its execution
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(
                pool.map(
                    lambda p: target.start(p[1].workflow, p[1].input, p[0]), zip(ids, plan.executions, strict=True)
                )
            )
        for e in plan.executions:
            injected.update(e.knobs)
        injector = _Injector(target, w, ids, random.Random(seed))
        _inject_all(target, plan, injector, injected, summary)
        say(f"soak: all faults injected after {time.time() - started:.0f}s; waiting for every execution")
        try:
            w.wait_seen(ids, timeout=timeout)
        except Exception as exc:
            summary.violations.append(str(exc))
        stop.set()
        driving.join(timeout=180)
        _finish_driving(driver, summary)
        _settle_children(w, kids, summary, timeout=target.settle_seconds)
        injector.settle()
        summary.incidents = list(injector.incidents) + summary.incidents
        if target.proxy is not None:
            target.proxy.calm()
        drain_began = time.time()
        depth = faults.wait_drained(target, 30, limit=max(60.0, 0.5 * executions))
        summary.drain_seconds = round(time.time() - drain_began, 1)
        if any(depth.values()):
            summary.violations.append(f"messages still circulating in the step queue: {depth}")
    recoveries = injector.recoveries + _check_all(target, w, ids, plan, driver, summary)
    summary.injected = dict(injected)
    summary.recovery_p50 = percentile(recoveries, 50)
    summary.recovery_p99 = percentile(recoveries, 99)
    summary.seconds = round(time.time() - started, 1)
    return summary


def _inject_all(target: Target, plan: Plan, injector: _Injector, injected: Counter[str], summary: SoakSummary) -> None:
    """The timed faults on the plan's schedule (those the target cannot take are reported skipped)."""
    t0 = time.time()
    for f in plan.faults:
        need = NEEDS.get(f.kind)
        if need and not target.can(need):
            summary.skipped[f.kind] = target.missing[need]
            continue
        delay = t0 + f.at - time.time()
        if delay > 0:
            time.sleep(delay)  # the plan's schedule, in real time
        try:
            injector.inject(f)
            injected[f.kind] += 1
        except Exception as exc:
            summary.violations.append(f"injecting {f.kind} failed: {type(exc).__name__}: {exc}")


def _moved_past(version: int, at: float) -> Callable[[Snapshot], bool]:
    """A snapshot past ``version``, seen from ``at`` on."""
    return lambda s: s.version > version and s.seen_at >= at
