"""The embedded emulator with the worker and sweeper handlers running in this process.

The local stack runs functions in child processes, where the benchmark could
not see their requests. Here the same pieces are assembled around in-process
handlers instead: moto's server in its child process
(:class:`loom.local.emulator.backends.EmbeddedEmulator`), the template's resources
(:func:`loom.template.create_resources`), the functions' environments resolved
from the template, the local stack's SQS event source emulator
(:class:`loom.local.lambdas.esm.SqsEventSource`) fed by :class:`InProcessFunction` in
place of a process pool, and a sweeper ticker. ``functions.wiring.session`` is
pointed at a counted session so the engine the handlers build is metered.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import functions.sweeper
import functions.worker
from engine.runtime import Engine
from functions import wiring
from functions.settings import Settings
from loom.bench.meter import Meter
from loom.jsonvalue import as_object
from loom.local.emulator import clock as offset_clock
from loom.local.emulator.backends import EmbeddedEmulator
from loom.local.lambdas.esm import EsmConfig, SqsEventSource
from loom.local.lambdas.events import scheduled_event
from loom.local.lambdas.pool import Invocation
from loom.local.lambdas.runtime import LambdaContext
from loom.template import Template, create_resources, function_environment

REGION = "us-east-1"


class _Resources:
    """What ``create_resources`` needs of a session: clients for the emulator, and a region."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self.region_name = meter.region

    def client(self, name: str, **_: Any) -> Any:
        return self._meter.uncounted(name)


@dataclass
class InProcessFunction:
    """Stands in for :class:`loom.local.lambdas.pool.FunctionPool`: ``invoke`` calls the handler here.

    Invocations are timed (Lambda bills duration) and tagged with ``role`` for the meter.
    """

    function: str
    handler: Callable[[Any, Any], Any]
    meter: Meter
    role: str
    timeout: float
    memory: int
    size: int = 1
    invocations: list[Invocation] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, event: Any, *, request_id: str | None = None, wait: float | None = None) -> Invocation:
        request_id = request_id or str(uuid.uuid4())
        context = LambdaContext(
            request_id=request_id,
            function_name=self.function,
            memory=self.memory,
            region=self.meter.region,
            timeout_ms=int(self.timeout * 1000),
            log_stream="bench",
        )
        started, t0 = time.time(), time.perf_counter()
        outcome, result, error = "ok", None, None
        with self.meter.role(self.role):
            try:
                result = self.handler(event, context)
            except Exception as exc:
                outcome, error = "error", {"errorType": type(exc).__name__, "errorMessage": str(exc)}
        inv = Invocation(
            function=self.function,
            request_id=request_id,
            pid=os.getpid(),
            started_at=started,
            duration_ms=(time.perf_counter() - t0) * 1000,
            outcome=outcome,
            result=result,
            error=error,
        )
        with self._lock:
            self.invocations.append(inv)
        return inv


class BenchStack:
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    def __init__(
        self,
        *,
        workers: int = 2,
        state_dir: Path,
        batching_window: float | None = None,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.workers = workers
        self.overrides = dict(overrides or {})  # function environment variables to set instead
        self.state_dir = state_dir
        self.batching_window = batching_window
        self.template = Template()
        self.emulator: EmbeddedEmulator | None = None
        self.meter: Meter | None = None
        self.refs: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.worker: InProcessFunction | None = None
        self.sweeper: InProcessFunction | None = None
        self.esm: SqsEventSource | None = None
        self.clock_file = state_dir / offset_clock.FILENAME
        self._saved_env: dict[str, str | None] = {}
        self._saved_session: Callable[[], Any] | None = None
        self._ticker: threading.Thread | None = None
        self._ticker_stop = threading.Event()

    def __enter__(self) -> BenchStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> BenchStack:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        offset_clock.reset(self.clock_file)
        log = open(self.state_dir / "emulator.log", "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the server
        self.emulator = EmbeddedEmulator("127.0.0.1", 0, log=log).start()
        assert self.emulator.keys is not None  # known once started
        admin = self.emulator.keys.env(REGION)  # the bench is the kit's own client: the emulator's admin
        self.meter = Meter(REGION, self.emulator.endpoint_url, admin)
        self.refs = create_resources(_Resources(self.meter), template=self.template)
        functions_ = self.template.functions()
        worker_spec = next(s for s in functions_.values() if s.handler == "functions.worker.handler")
        sweeper_spec = next(s for s in functions_.values() if s.handler == "functions.sweeper.handler")
        env = function_environment(worker_spec, self.refs, self.template)
        env.update(admin)
        env.update(
            {
                "AWS_ENDPOINT_URL": self.emulator.endpoint_url,
                "LOOM_CLOCK_OFFSET_FILE": str(self.clock_file),
                "LOOM_LOG_LEVEL": "WARNING",  # thousands of steps: INFO lines would be the benchmark
            }
        )
        env.update(self.overrides)
        self.env = env
        for name, value in env.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value
        # The handlers build their engine through wiring.session(): hand them a metered one.
        self._saved_session = wiring.session
        wiring.session = lambda: self.meter.session("worker")  # type: ignore[union-attr]
        wiring.reset()
        self.worker = InProcessFunction(
            worker_spec.logical_id,
            functions.worker.handler,
            self.meter,
            "worker",
            timeout=worker_spec.timeout,
            memory=worker_spec.memory,
            size=self.workers,
        )
        self.sweeper = InProcessFunction(
            sweeper_spec.logical_id,
            functions.sweeper.handler,
            self.meter,
            "sweeper",
            timeout=sweeper_spec.timeout,
            memory=sweeper_spec.memory,
        )
        self.sqs_trigger = next(e["Properties"] for e in worker_spec.events.values() if e.get("Type") == "SQS")
        return self

    def stop(self) -> None:
        self.stop_sweeper()
        self.stop_esm()
        if self._saved_session is not None:
            wiring.session = self._saved_session
            self._saved_session = None
        wiring.reset()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        if self.emulator is not None:
            self.emulator.stop()
            self.emulator = None

    # ------------------------------------------------------------------ pieces

    def engine(self) -> Engine:
        """The engine the handlers use right now (it follows LOOM_CHAIN in the environment)."""
        built = wiring.engine(Settings.from_env())
        built.store.return_consumed_capacity = "TOTAL"  # type: ignore[attr-defined]
        return built

    @contextlib.contextmanager
    def mode(self, chain: bool) -> Iterator[Engine]:
        os.environ["LOOM_CHAIN"] = "true" if chain else "false"
        try:
            yield self.engine()
        finally:
            os.environ["LOOM_CHAIN"] = self.env.get("LOOM_CHAIN", "true")

    def start_esm(self) -> SqsEventSource:
        assert self.meter is not None and self.worker is not None
        window = self.batching_window
        if window is None:
            window = float(self.sqs_trigger.get("MaximumBatchingWindowInSeconds", 0))
        self.esm = SqsEventSource(
            self.meter.client("sqs", "esm"),
            self.worker,  # type: ignore[arg-type]
            EsmConfig(
                queue_url=self.refs["StepQueue"],
                queue_arn=self.refs["StepQueue.Arn"],
                region=REGION,
                batch_size=int(self.sqs_trigger.get("BatchSize", 10)),
                batching_window=window,
                report_batch_item_failures="ReportBatchItemFailures"
                in (self.sqs_trigger.get("FunctionResponseTypes") or []),
            ),
            pollers=self.workers,
        ).start()
        return self.esm

    def stop_esm(self) -> None:
        if self.esm is not None:
            self.esm.stop()
            self.esm.join()
            self.esm = None

    def tick_sweeper(self) -> dict[str, Any]:
        assert self.sweeper is not None
        inv = self.sweeper.invoke(scheduled_event("arn:aws:events:us-east-1:123456789012:rule/bench", REGION))
        if inv.outcome != "ok":
            raise RuntimeError(f"sweeper failed: {inv.error}")
        return as_object(inv.result, "the sweeper's answer")

    def start_sweeper(self, every: float) -> None:
        self._ticker_stop.clear()

        def run() -> None:
            while not self._ticker_stop.wait(every):
                with contextlib.suppress(Exception):
                    self.tick_sweeper()

        self._ticker = threading.Thread(target=run, name="bench-sweeper", daemon=True)
        self._ticker.start()

    def stop_sweeper(self) -> None:
        self._ticker_stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=30)
            self._ticker = None

    def advance_time(self, seconds: float) -> float:
        return offset_clock.advance(self.clock_file, seconds)

    def reset_time(self) -> float:
        return offset_clock.reset(self.clock_file)

    def discard_messages(self) -> int:
        """Delete what is visible on the step queue (PurgeQueue allows one call a minute)."""
        assert self.meter is not None
        sqs, url, gone = self.meter.uncounted("sqs"), self.refs["StepQueue"], 0
        while True:
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
            if not batch:
                return gone
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
            )
            gone += len(batch)
