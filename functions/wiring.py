"""Builds the engine from Settings, once per process (Lambda keeps it warm)."""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

import boto3
from botocore.config import Config

from engine.adapters.cursor import derive_key
from engine.adapters.dlq import SqsDeadLetters
from engine.adapters.dynamodb import DynamoStore
from engine.adapters.ledger import DynamoLedger
from engine.adapters.sqs import SqsQueue
from engine.clock import Clock, OffsetClock, SystemClock
from engine.log import configure, ensure_configured
from engine.ports import NoFaults
from engine.runtime import Engine
from engine.workflow import default_registry
from functions.faults import CrashAfterCheckpoint
from functions.settings import Settings

# Throttling is retried by botocore itself, with backoff, before Loom sees an error.
BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=5, read_timeout=30)
# The visibility heartbeat: a slow call must not keep the worker from returning (the next beat retries).
HEARTBEAT_CONFIG = Config(retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=2, read_timeout=3)

_lock = threading.Lock()
_cache: dict[Settings, Engine] = {}
_dlq_cache: dict[Settings, SqsDeadLetters] = {}


class FileOffsetClock(OffsetClock):
    """Local time travel: real time plus the seconds written in a file by ``loom time``."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._seen: tuple[int, int] | None = None
        self._value = 0.0
        super().__init__(self._read)

    def _read(self) -> float:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return 0.0
        # The file is replaced, never rewritten in place: a new inode is a new value, even
        # when a reset lands within the filesystem's mtime granularity of an advance.
        seen = (st.st_ino, st.st_mtime_ns)
        if seen != self._seen:
            try:
                with open(self._path, encoding="utf-8") as fh:
                    self._value = float(fh.read().strip() or 0)
            except (OSError, ValueError):
                return self._value
            self._seen = seen
        return self._value


def clock_for(settings: Settings) -> Clock:
    return FileOffsetClock(settings.clock_offset_file) if settings.clock_offset_file else SystemClock()


def ensure_logging() -> None:
    """JSON logs from the first line a function writes, before any request or engine exists."""
    ensure_configured(os.environ.get("LOOM_LOG_LEVEL") or "INFO")


def load_workflows(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


def session() -> Any:
    # boto3 honours AWS_ENDPOINT_URL (and the per-service variants) by itself.
    return boto3.session.Session()


def cursor_key(settings: Settings) -> bytes | None:
    """The stack's cursor key; without a secret the store makes one of its own (this process only)."""
    return derive_key(settings.cursor_secret) if settings.cursor_secret else None


def services(settings: Settings, ddb: Any) -> dict[str, Any]:
    """What steps get in ``ctx.services``. ``chaos`` is True only with the chaos switch on:
    the example workflows obey their input's crash/hold knobs only then."""
    return {"ledger": DynamoLedger(ddb, settings.table_name), "chaos": settings.chaos}


def engine(settings: Settings | None = None) -> Engine:
    settings = settings or Settings.from_env()
    with _lock:
        cached = _cache.get(settings)
        if cached is not None:
            return cached
        configure(settings.log_level)
        load_workflows(settings.workflow_modules)
        s = session()
        ddb = s.client("dynamodb", config=BOTO_CONFIG)
        sqs = s.client("sqs", config=BOTO_CONFIG)
        built = Engine(
            registry=default_registry,
            store=DynamoStore(ddb, settings.table_name, settings.shards, cursor_key=cursor_key(settings)),
            queue=SqsQueue(
                sqs, settings.queue_url, settings.dlq_url, visibility_client=s.client("sqs", config=HEARTBEAT_CONFIG)
            ),
            clock=clock_for(settings),
            config=settings.engine_config(),
            faults=CrashAfterCheckpoint() if settings.chaos else NoFaults(),
            services=services(settings, ddb),
        )
        _cache[settings] = built
        return built


def warm() -> None:
    """Build the engine at init. Lambda runs a handler module's top level before the first
    invocation and outside its timeout, so the clients and the workflow imports then cost the
    init phase, not the first batch's time (under load the chaos kit's 10 s worker spent seconds
    of its first invocation here, and timed out). Imported without the function's environment
    (by a test or a tool) there is nothing to build. Whatever fails here (a missing variable, a
    workflow module that does not import) is not raised at init: the first invocation builds
    again and reports it, as it did before warming existed."""
    try:
        engine()
    except Exception:
        return


def dead_letters(settings: Settings | None = None) -> SqsDeadLetters:
    """The DLQ reader behind the control plane's /dlq endpoints."""
    settings = settings or Settings.from_env()
    with _lock:
        cached = _dlq_cache.get(settings)
        if cached is None:
            cached = _dlq_cache[settings] = SqsDeadLetters(
                session().client("sqs", config=BOTO_CONFIG), settings.dlq_url
            )
        return cached


def reset() -> None:
    """Forget built engines (tests that change the environment)."""
    with _lock:
        _cache.clear()
        _dlq_cache.clear()
