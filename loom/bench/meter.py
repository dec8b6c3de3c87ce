"""Counting what the code under test asks of AWS, with botocore's event hooks.

Every client the benchmark hands out comes from a session carrying two hooks:
``before-call`` notes the request (service, operation, the parameters that
decide its cost) and ``after-call`` its outcome (ok or the error code, the items
a read returned, moto's ConsumedCapacity). Each call is tagged with a *role*:
the client's own (``esm`` for the event source's polling, ``floor``) unless the
code runs inside :meth:`Meter.role` (``worker``, ``sweeper``, ``client``);
DynamoDB calls on the example ledger's items (``LEDGER#`` keys) are tagged
``ledger`` whoever makes them, so the engine's own cost stays apart.

Capacity units are computed afterwards (:meth:`Meter.capacity`) from item sizes
with DynamoDB's rules (``loom.bench.capacity``): puts carry the whole item, so
their before/after sizes are exact; an UpdateItem's item is read back once at
the end with an uncounted client (its final size, an upper bound when one item
is updated more than once).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3

from loom.bench import capacity as cap

_role: contextvars.ContextVar[str | None] = contextvars.ContextVar("bench_role", default=None)

GSI_KEYS = {"GSI1": ("GSI1PK", "GSI1SK"), "GSI2": ("GSI2PK", "GSI2SK")}
WRITES = ("PutItem", "UpdateItem", "DeleteItem")


@dataclass
class Call:
    phase: str
    role: str
    service: str
    operation: str
    started: float
    table: str | None = None
    index: str | None = None
    key: tuple[str, str] | None = None
    item: dict[str, Any] | None = None  # PutItem's full item
    # TransactWriteItems: the (table, key) of each item it writes (billed at twice a plain write)
    transact: list[tuple[str, tuple[str, str]]] = field(default_factory=list)
    consistent: bool = False
    ok: bool = True
    error: str | None = None
    returned_bytes: int = 0
    returned_items: int = 0
    moto_units: float | None = None
    seconds: float = 0.0


def _key(params: dict[str, Any]) -> tuple[str, str] | None:
    source = params.get("Key") or params.get("Item")
    if not source or "PK" not in source:
        return None
    return source["PK"].get("S", ""), source.get("SK", {}).get("S", "")


@dataclass
class Meter:
    region: str
    endpoint_url: str
    credentials: dict[str, str]
    calls: list[Call] = field(default_factory=list)
    phase: str = "setup"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---------------------------------------------------------------- sessions

    def session(self, default_role: str) -> boto3.session.Session:
        """A session whose clients are counted; ``default_role`` unless :meth:`role` says otherwise."""
        s = self._plain_session()
        s.events.register("before-parameter-build.*.*", lambda **kw: self._before(default_role, **kw))
        s.events.register("after-call.*.*", lambda **kw: self._after(**kw))
        s.events.register("after-call-error.*.*", lambda **kw: self._failed(**kw))
        return s

    def client(self, service: str, role: str) -> Any:
        # boto3's stubs type client() per literal service name; the benchmark's is chosen at run time.
        return self.session(role).client(service, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]

    def uncounted(self, service: str) -> Any:
        """For the benchmark's own bookkeeping (seeding, reading results back)."""
        return self._plain_session().client(service, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]

    def _plain_session(self) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=self.credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=self.credentials.get("AWS_SESSION_TOKEN"),
            region_name=self.region,
        )

    @contextlib.contextmanager
    def role(self, name: str) -> Iterator[None]:
        token = _role.set(name)
        try:
            yield
        finally:
            _role.reset(token)

    @contextlib.contextmanager
    def measuring(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    # ------------------------------------------------------------------- hooks

    def _before(
        self, default_role: str, *, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        service = model.service_model.service_name
        role = _role.get() or default_role
        call = Call(phase=self.phase, role=role, service=service, operation=model.name, started=time.perf_counter())
        if service == "dynamodb":
            call.table = params.get("TableName")
            call.index = params.get("IndexName")
            call.key = _key(params)
            call.consistent = bool(params.get("ConsistentRead"))
            if call.key and call.key[0].startswith("LEDGER#"):
                call.role = "ledger"
            if model.name == "PutItem":
                call.item = params.get("Item")
            if model.name == "TransactWriteItems":
                for entry in params.get("TransactItems") or []:
                    ((_, op),) = entry.items()
                    key = _key(op)
                    if key is not None:
                        call.transact.append((op.get("TableName", ""), key))
        context["loom_bench_call"] = call

    def _failed(self, *, exception: BaseException, context: dict[str, Any], **_: Any) -> None:
        call = context.pop("loom_bench_call", None)
        if call is not None:
            call.ok, call.error = False, type(exception).__name__
            call.seconds = time.perf_counter() - call.started
            with self._lock:
                self.calls.append(call)

    def _after(self, *, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        call = context.pop("loom_bench_call", None)
        if call is None:
            return
        call.seconds = time.perf_counter() - call.started
        error = (parsed or {}).get("Error")
        if error:
            call.ok, call.error = False, error.get("Code")
        if call.service == "dynamodb" and not error:
            items = []
            if "Item" in parsed:
                items = [parsed["Item"]]
            elif "Items" in parsed:
                items = parsed["Items"]
            elif "Responses" in parsed:
                items = [i for rows in parsed["Responses"].values() for i in rows]
            call.returned_items = len(items)
            call.returned_bytes = sum(cap.item_size(i) for i in items)
            consumed = parsed.get("ConsumedCapacity")
            if isinstance(consumed, dict):
                call.moto_units = float(consumed.get("CapacityUnits", 0.0))
            elif isinstance(consumed, list):
                call.moto_units = sum(float(c.get("CapacityUnits", 0.0)) for c in consumed)
        if call.service == "sqs" and call.operation == "ReceiveMessage" and not error:
            call.returned_items = len(parsed.get("Messages") or [])
        with self._lock:
            self.calls.append(call)

    # ---------------------------------------------------------------- queries

    def of(self, phase: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.phase == phase]

    @staticmethod
    def requests(calls: list[Call]) -> Counter[tuple[str, str, str]]:
        return Counter((c.role, c.service, c.operation) for c in calls)

    def capacity(self, calls: list[Call]) -> dict[str, dict[str, float]]:
        """Computed WCU/RCU by role and by target (table, GSI1, GSI2), plus moto's own figure."""
        updated = {(c.table, c.key) for c in calls if c.operation == "UpdateItem" and c.key and c.table}
        updated |= {where for c in calls for where in c.transact}
        final = self._final_sizes(updated)
        # Items written with PutItem before this phase started: their last known state.
        shadow: dict[tuple[str | None, tuple[str, str] | None], dict[str, Any] | None] = {}
        with self._lock:
            ordered = sorted(self.calls, key=lambda c: c.started)
        phase_ids = {id(c) for c in calls}
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for c in ordered:
            if c.service != "dynamodb":
                continue
            where = (c.table, c.key)
            mine = id(c) in phase_ids
            tally = out[c.role]
            if c.operation == "PutItem":
                before = shadow.get(where)
                if mine:
                    if c.ok:
                        tally["wcu_table"] += cap.write_units(cap.item_size(before), cap.item_size(c.item))
                        for index, keys in GSI_KEYS.items():
                            tally[f"wcu_{index}"] += cap.index_writes(before, c.item, keys)
                    else:
                        tally["wcu_table"] += cap.failed_write_units(cap.item_size(before))
                    tally["wcu_moto"] += c.moto_units or 0.0
                if c.ok:
                    shadow[where] = c.item
            elif c.operation == "UpdateItem" and mine:
                size = final.get(where, 0)
                tally["wcu_table"] += cap.write_units(size, size) if c.ok else cap.failed_write_units(size)
                tally["wcu_moto"] += c.moto_units or 0.0
            elif c.operation == "TransactWriteItems" and mine:
                # DynamoDB bills a transactional write twice: 2 WCU per started KB of each item.
                for where_t in c.transact:
                    size = final.get(where_t, 0)
                    units = cap.write_units(size, size) if c.ok else cap.failed_write_units(size)
                    tally["wcu_table"] += 2 * units
                tally["wcu_moto"] += c.moto_units or 0.0
            elif mine and c.operation in ("GetItem", "Query", "BatchGetItem") and c.ok:
                target = f"rcu_{c.index}" if c.index else "rcu_table"
                tally[target] += cap.read_units(c.returned_bytes, consistent=c.consistent)
                tally["rcu_moto"] += c.moto_units or 0.0
        return {role: dict(v) for role, v in out.items()}

    def _final_sizes(self, keys: set[tuple[Any, Any]]) -> dict[tuple[Any, Any], int]:
        db = self.uncounted("dynamodb")
        sizes: dict[tuple[Any, Any], int] = {}
        by_table: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for table, key in keys:
            by_table[table].append(key)
        for table, wanted in by_table.items():
            for i in range(0, len(wanted), 100):
                request: dict[str, Any] = {
                    table: {"Keys": [{"PK": {"S": pk}, "SK": {"S": sk}} for pk, sk in wanted[i : i + 100]]}
                }
                while request:
                    answer = db.batch_get_item(RequestItems=request)
                    for item in answer.get("Responses", {}).get(table, []):
                        sizes[(table, (item["PK"]["S"], item["SK"]["S"]))] = cap.item_size(item)
                    request = answer.get("UnprocessedKeys") or {}
        return sizes

    def meta_sizes(self, calls: list[Call]) -> dict[int, list[int]]:
        """Execution item sizes as written, by the step the execution had reached."""
        sizes: dict[int, list[int]] = defaultdict(list)
        for c in calls:
            if c.operation == "PutItem" and c.ok and c.item and c.key and c.key[1] == "#META" and c.role != "floor":
                sizes[int(c.item["current_step"]["N"])].append(cap.item_size(c.item))
        return dict(sizes)
