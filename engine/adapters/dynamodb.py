"""The execution store on one DynamoDB table (see DESIGN.md for the layout)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from engine.adapters import cursor as cursors
from engine.adapters.aws_errors import mapped
from engine.adapters.fan_store import FanStore, step_record
from engine.adapters.handle_store import HandleStore
from engine.adapters.paging import query_items
from engine.adapters.retention import EXPIRES, RetentionStore, ttl_value
from engine.adapters.schedule_store import ScheduleStore
from engine.adapters.write_token import ALL_OLD, NOT_THIS_WRITE, TOKEN, conditional, new_token
from engine.config import shard_of
from engine.errors import ConflictError, InvalidInput
from engine.limits import check_item, utf8_len
from engine.ports import Page
from engine.state import Attempt, Execution, Signal, Status, StepRecord, StepStatus, Wait, canonical_json

# The table's key schema; template.yaml must say the same (a test checks it).
PK, SK = "PK", "SK"
META_SK = "#META"
# An ended execution's expiry (``Execution.expires_at``), kept apart from the TTL attribute.
RETAIN_UNTIL = "retain_until"
GSI1, GSI1PK, GSI1SK = "GSI1", "GSI1PK", "GSI1SK"
GSI2, GSI2PK, GSI2SK = "GSI2", "GSI2PK", "GSI2SK"
LIST_PARTITION = "EXECUTIONS"
# The sweepers' one shared note: the dead-letter queue's count and when a sweep saw it change.
PARKED_KEY = {PK: {"S": "LOOM#SWEEPER"}, SK: {"S": "#PARKED"}}
KEY_ATTRIBUTES = {PK: "S", SK: "S", GSI1PK: "S", GSI1SK: "N", GSI2PK: "S", GSI2SK: "S"}
SUMMARY_ATTRIBUTES = [
    PK,
    "id",
    "workflow",
    "#s",
    "current_step",
    "version",
    "workflow_version",  # loom workflows counts each version's open executions from the list
    "fingerprint",
    "blocked",
    RETAIN_UNTIL,  # a listing hides executions past their retention (engine/retention.py)
    "created_at",
    "updated_at",
    "next_wake_at",
    "attempt",
    "attempt_base",
    "started_attempt",
    "attempt_started_at",
    "ready_at",
    "#e",
    "#w",  # wait and parent are reserved words in expressions
    "#p",
]

# What a cursor may carry: exactly the key attributes of the index it pages.
_EXECUTION_KEY = {PK: lambda v: v.startswith("EXEC#"), SK: lambda v: v == META_SK}
DUE_CURSOR = cursors.KeyShape(
    GSI1,
    {PK: "S", SK: "S", GSI1PK: "S", GSI1SK: "N"},
    {**_EXECUTION_KEY, GSI1PK: lambda v: v.startswith("DUE#") and v[4:].isdigit()},
)
LIST_CURSOR = cursors.KeyShape(
    GSI2,
    {PK: "S", SK: "S", GSI2PK: "S", GSI2SK: "S"},
    {**_EXECUTION_KEY, GSI2PK: lambda v: v == LIST_PARTITION},
)


# The step-history rules (engine/history_rules.py), as condition fragments.
# ``#s`` is the record's status, ``:a`` the attempt being written.
NEW_RECORD = "attribute_not_exists(#s)"
COMMIT_ONCE = "#s <> :done"
FAILED_IS_FINAL = "NOT (#s = :failed AND last_attempt >= :a)"
ONE_RECORD_PER_ATTEMPT = "(attribute_not_exists(last_attempt) OR last_attempt < :a)"
NO_FAILURE_AFTER_COMMIT = f"({NEW_RECORD} OR {COMMIT_ONCE})"
MAY_COMMIT = f"({NEW_RECORD} OR ({COMMIT_ONCE} AND {FAILED_IS_FINAL} AND {ONE_RECORD_PER_ATTEMPT}))"
MAY_RECORD_FAILURE = f"{ONE_RECORD_PER_ATTEMPT} AND {NO_FAILURE_AFTER_COMMIT}"


def exec_pk(execution_id: str) -> str:
    return f"EXEC#{execution_id}"


def step_sk(index: int, name: str) -> str:
    return f"STEP#{index:03d}#{name}"


def signal_sk(name: str, key: str = "") -> str:
    return f"SIGNAL#{name}#{key}"


def item_size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules (an upper bound for numbers)."""
    return sum(utf8_len(name) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, data),) = value.items()
    if kind == "S":
        return utf8_len(data)
    if kind == "N":
        return len(data) // 2 + 2  # at most 21 bytes; half a byte a digit, plus one
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(utf8_len(k) + 1 + _value_size(v) for k, v in data.items())
    return 1  # BOOL, NULL


def _n(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _num(attr: dict[str, str] | None) -> float | None:
    return None if attr is None else float(attr["N"])


def _json(attr: dict[str, str] | None) -> Any:
    return None if attr is None else json.loads(attr["S"])


class DynamoStore(FanStore, ScheduleStore, RetentionStore, HandleStore):
    """Implements ``engine.ports.Store`` with a low-level boto3 DynamoDB client."""

    def __init__(self, client: Any, table_name: str, shards: int, *, cursor_key: bytes | None = None) -> None:
        """``cursor_key`` signs the page cursors; without one, cursors are good only in this process
        (functions/wiring.py passes the stack's, so that every control-plane instance accepts them)."""
        self._db = client
        self._table = table_name
        self._shards = shards
        self._cursor_key = cursor_key or cursors.new_key()
        self.return_consumed_capacity = "NONE"  # benchmarks set TOTAL/INDEXES

    # ---------------------------------------------------------------- encoding

    def _item(self, ex: Execution) -> dict[str, Any]:
        item: dict[str, Any] = {
            PK: _s(exec_pk(ex.id)),
            SK: _s(META_SK),
            "id": _s(ex.id),
            "workflow": _s(ex.workflow),
            "status": _s(ex.status.value),
            "current_step": _n(ex.current_step),
            "version": _n(ex.version),
            "input": _s(canonical_json(ex.input)),
            "context": _s(canonical_json(ex.context)),
            "created_at": _n(ex.created_at),
            "updated_at": _n(ex.updated_at),
            "attempt": _n(ex.attempt),
            "attempt_base": _n(ex.attempt_base),
            "started_attempt": _n(ex.started_attempt),
            GSI2PK: _s(LIST_PARTITION),
            GSI2SK: _s(f"{ex.created_at:020.6f}#{ex.id}"),
        }
        if ex.next_wake_at is not None:
            # Sparse index: only executions with a wake time are in GSI1.
            item["next_wake_at"] = _n(ex.next_wake_at)
            item[GSI1PK] = _s(f"DUE#{shard_of(ex.id, self._shards)}")
            item[GSI1SK] = _n(ex.next_wake_at)
        if ex.ready_at is not None:
            item["ready_at"] = _n(ex.ready_at)
        if ex.attempt_started_at is not None:
            item["attempt_started_at"] = _n(ex.attempt_started_at)
        if ex.error is not None:
            item["error"] = _s(canonical_json(ex.error))
        if ex.wait is not None:
            item["wait"] = _s(canonical_json(ex.wait.to_dict()))
        if ex.parent is not None:
            item["parent"] = _s(canonical_json(ex.parent))
        if ex.catching is not None:
            item["catching"] = _s(canonical_json(ex.catching))
        if ex.fingerprint is not None:
            item["fingerprint"] = _s(ex.fingerprint)
        if ex.workflow_version is not None:
            item["workflow_version"] = _n(ex.workflow_version)
        if ex.blocked is not None:
            item["blocked"] = _s(canonical_json(ex.blocked))
        if ex.expires_at is not None:
            item[RETAIN_UNTIL] = _n(ex.expires_at)
            if ex.next_wake_at is None:
                # The table's TTL attribute (template.yaml), in whole epoch seconds, only once the
                # sweeper has stamped every other item and un-indexed it: the execution item is
                # stamped last, so TTL can never delete it and leave unstamped items behind.
                item[EXPIRES] = _n(ttl_value(ex.expires_at))
        # The engine's estimates leave room; this is the item as it will really be sent.
        check_item(item_size(item), f"execution {ex.id!r}")
        return item

    @staticmethod
    def _execution(item: dict[str, Any]) -> Execution:
        return Execution(
            id=item["id"]["S"],
            workflow=item["workflow"]["S"],
            status=Status(item["status"]["S"]),
            current_step=int(item["current_step"]["N"]),
            version=int(item["version"]["N"]),
            input=_json(item.get("input")) or {},
            context=_json(item.get("context")) or {},
            created_at=float(item["created_at"]["N"]),
            updated_at=float(item["updated_at"]["N"]),
            next_wake_at=_num(item.get("next_wake_at")),
            attempt=int(item.get("attempt", {"N": "1"})["N"]),
            attempt_base=int(item.get("attempt_base", {"N": "0"})["N"]),
            started_attempt=int(item.get("started_attempt", {"N": "0"})["N"]),
            ready_at=_num(item.get("ready_at")),
            attempt_started_at=_num(item.get("attempt_started_at")),
            error=_json(item.get("error")),
            wait=None if item.get("wait") is None else Wait.from_dict(_json(item["wait"])),
            parent=_json(item.get("parent")),
            catching=_json(item.get("catching")),
            fingerprint=item["fingerprint"]["S"] if "fingerprint" in item else None,
            workflow_version=int(item["workflow_version"]["N"]) if "workflow_version" in item else None,
            blocked=_json(item.get("blocked")),
            expires_at=_num(item.get(RETAIN_UNTIL) or item.get(EXPIRES)),
        )

    @staticmethod
    def _record(execution_id: str, item: dict[str, Any]) -> StepRecord:
        return step_record(execution_id, item)

    def _capacity(self) -> dict[str, str]:
        return {"ReturnConsumedCapacity": self.return_consumed_capacity}

    def _conditional(self, token: str, decode: Callable[[dict[str, Any]], object] | None = None) -> Any:
        """Around one conditional write on the table (engine/adapters/write_token.py)."""
        return conditional(f"table {self._table}", token, decode)

    def _step_decoder(self, execution_id: str) -> Callable[[dict[str, Any]], object]:
        return lambda item: self._record(execution_id, item)

    # ------------------------------------------------------------- executions

    def create_execution(self, execution: Execution) -> None:
        token = new_token()
        with self._conditional(token, self._execution):
            self._db.put_item(
                TableName=self._table,
                Item={**self._item(execution), TOKEN: _s(token)},
                ConditionExpression="attribute_not_exists(PK)",
                **ALL_OLD,
                **self._capacity(),
            )

    def get_execution(self, execution_id: str) -> Execution | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table,
                Key={PK: _s(exec_pk(execution_id)), SK: _s(META_SK)},
                ConsistentRead=True,
                **self._capacity(),
            )
        item = answer.get("Item")
        return None if item is None else self._execution(item)

    def get_executions(self, execution_ids: Sequence[str]) -> list[Execution]:
        """Several executions in one BatchGetItem a hundred (observers: the chaos kit's watcher);
        the ones that do not exist are left out."""
        found: list[Execution] = []
        for start in range(0, len(execution_ids), 100):
            keys = [{PK: _s(exec_pk(e)), SK: _s(META_SK)} for e in execution_ids[start : start + 100]]
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            while request:
                with mapped(f"table {self._table}"):
                    answer = self._db.batch_get_item(RequestItems=request)
                found += [self._execution(item) for item in answer.get("Responses", {}).get(self._table, [])]
                request = answer.get("UnprocessedKeys") or {}
        return found

    def put_execution(self, execution: Execution, *, expected_version: int, expected_step: int) -> None:
        token = new_token()
        with self._conditional(token, self._execution):
            self._db.put_item(
                TableName=self._table,
                Item={**self._item(execution), TOKEN: _s(token)},
                ConditionExpression="version = :v AND current_step = :s",
                ExpressionAttributeValues={":v": _n(expected_version), ":s": _n(expected_step)},
                **ALL_OLD,
                **self._capacity(),
            )

    # ----------------------------------------------------------------- history

    def commit_step(
        self, execution_id: str, index: int, name: str, attempt: Attempt, result: dict[str, Any] | None
    ) -> None:
        token = new_token()
        with self._conditional(token, self._step_decoder(execution_id)):
            self._db.update_item(
                TableName=self._table,
                Key={PK: _s(exec_pk(execution_id)), SK: _s(step_sk(index, name))},
                UpdateExpression=(
                    "SET #s = :done, #r = :r, idx = :i, #n = :name, finished_at = :f, last_attempt = :a, "
                    f"started_at = if_not_exists(started_at, :st), {TOKEN} = :wt, "
                    "attempts = list_append(if_not_exists(attempts, :empty), :att) REMOVE #e"
                ),
                ConditionExpression=f"{MAY_COMMIT} AND {NOT_THIS_WRITE}",
                ExpressionAttributeNames={"#s": "status", "#r": "result", "#n": "name", "#e": "error"},
                ExpressionAttributeValues={
                    ":done": _s(StepStatus.COMPLETED.value),
                    ":failed": _s(StepStatus.FAILED.value),
                    ":r": _s(canonical_json(result)),
                    ":i": _n(index),
                    ":name": _s(name),
                    ":f": _n(attempt.finished_at),
                    ":st": _n(attempt.started_at),
                    ":a": _n(attempt.attempt),
                    ":empty": {"L": []},
                    ":att": {"L": [_s(canonical_json(attempt.to_dict()))]},
                    ":wt": _s(token),
                },
                **ALL_OLD,
                **self._capacity(),
            )

    def record_failure(self, execution_id: str, index: int, name: str, attempt: Attempt, *, final: bool) -> bool:
        status = StepStatus.FAILED if final else StepStatus.RETRYING
        token = new_token()
        values = {
            ":wt": _s(token),
            ":status": _s(status.value),
            ":done": _s(StepStatus.COMPLETED.value),
            ":e": _s(canonical_json(attempt.error)),
            ":i": _n(index),
            ":name": _s(name),
            ":a": _n(attempt.attempt),
            ":st": _n(attempt.started_at),
            ":empty": {"L": []},
            ":att": {"L": [_s(canonical_json(attempt.to_dict()))]},
        }
        update = (
            "SET #s = :status, #e = :e, idx = :i, #n = :name, last_attempt = :a, "
            f"started_at = if_not_exists(started_at, :st), {TOKEN} = :wt, "
            "attempts = list_append(if_not_exists(attempts, :empty), :att)"
        )
        if final:
            update += ", finished_at = :f"
            values[":f"] = _n(attempt.finished_at)
        try:
            with self._conditional(token, self._step_decoder(execution_id)):
                self._db.update_item(
                    TableName=self._table,
                    Key={PK: _s(exec_pk(execution_id)), SK: _s(step_sk(index, name))},
                    UpdateExpression=update,
                    ConditionExpression=f"{MAY_RECORD_FAILURE} AND {NOT_THIS_WRITE}",
                    ExpressionAttributeNames={"#s": "status", "#e": "error", "#n": "name"},
                    ExpressionAttributeValues=values,
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError:
            return False
        return True

    def get_step(self, execution_id: str, index: int, name: str) -> StepRecord | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table,
                Key={PK: _s(exec_pk(execution_id)), SK: _s(step_sk(index, name))},
                ConsistentRead=True,
                **self._capacity(),
            )
        item = answer.get("Item")
        return None if item is None else self._record(execution_id, item)

    def history(self, execution_id: str) -> list[StepRecord]:
        return [self._record(execution_id, item) for item in self._items(execution_id, "STEP#")]

    def _items(self, execution_id: str, prefix: str, **extra: Any) -> Iterator[dict[str, Any]]:
        """The execution's items whose SK starts with ``prefix``, in SK order, a page at a time
        (strongly consistent): a caller that stops early reads no further page."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :prefix)",
            "ExpressionAttributeValues": {":pk": _s(exec_pk(execution_id)), ":prefix": _s(prefix)},
            "ConsistentRead": True,
            **extra,
            **self._capacity(),
        }
        return query_items(self._db, f"table {self._table}", kwargs)

    # ----------------------------------------------------------------- signals

    def put_signal(self, signal: Signal) -> None:
        item = {
            PK: _s(exec_pk(signal.execution_id)),
            SK: _s(signal_sk(signal.name, signal.key)),
            "name": _s(signal.name),
            "payload": _s(canonical_json(signal.payload)),
            "received_at": _n(signal.received_at),
        }
        check_item(item_size(item), f"signal {signal.name!r}")
        token = new_token()
        with self._conditional(token, lambda old: self._signal(signal.execution_id, old)):
            self._db.put_item(
                TableName=self._table,
                Item={**item, TOKEN: _s(token)},
                ConditionExpression="attribute_not_exists(PK)",
                **ALL_OLD,
                **self._capacity(),
            )

    def next_signal(self, execution_id: str, name: str) -> Signal | None:
        unconsumed = self._items(execution_id, signal_sk(name), FilterExpression="attribute_not_exists(consumed_by)")
        item = next(unconsumed, None)
        return None if item is None else self._signal(execution_id, item)

    def signals(self, execution_id: str) -> list[Signal]:
        """Every signal kept for the execution, consumed or not, by name then arrival."""
        return [self._signal(execution_id, item) for item in self._items(execution_id, "SIGNAL#")]

    def get_signal(self, execution_id: str, name: str, key: str) -> Signal | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table,
                Key={PK: _s(exec_pk(execution_id)), SK: _s(signal_sk(name, key))},
                ConsistentRead=True,
                **self._capacity(),
            )
        item = answer.get("Item")
        return None if item is None else self._signal(execution_id, item)

    def consume_signal(self, execution_id: str, name: str, key: str, by: str) -> None:
        """Mark the signal consumed by wait ``by``; ``ConflictError`` if another wait took it."""
        token = new_token()
        with self._conditional(token, lambda old: self._signal(execution_id, old)):
            self._db.update_item(
                TableName=self._table,
                Key={PK: _s(exec_pk(execution_id)), SK: _s(signal_sk(name, key))},
                UpdateExpression=f"SET consumed_by = :by, {TOKEN} = :wt",
                ConditionExpression="attribute_exists(PK) AND (attribute_not_exists(consumed_by) OR consumed_by = :by)",
                ExpressionAttributeValues={":by": _s(by), ":wt": _s(token)},
                **ALL_OLD,
                **self._capacity(),
            )

    @staticmethod
    def _signal(execution_id: str, item: dict[str, Any]) -> Signal:
        consumed = item.get("consumed_by")
        return Signal(
            execution_id=execution_id,
            name=item["name"]["S"],
            key=item[SK]["S"].split("#", 2)[2],
            payload=_json(item["payload"]) or {},
            received_at=float(item["received_at"]["N"]),
            consumed_by=None if consumed is None else consumed["S"],
        )

    # ------------------------------------------------------------------ queries

    def due(self, shard: int, now: float, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": GSI1,
            "KeyConditionExpression": "GSI1PK = :p AND GSI1SK <= :now",
            "ExpressionAttributeValues": {":p": _s(f"DUE#{shard}"), ":now": _n(now)},
            "Limit": limit,
        }
        if cursor:
            start = cursors.decode(self._cursor_key, DUE_CURSOR, cursor)
            if start[GSI1PK]["S"] != f"DUE#{shard}":
                raise InvalidInput(cursors.NOT_OURS)
            kwargs["ExclusiveStartKey"] = start
        with mapped(f"table {self._table} index {GSI1}"):
            answer = self._db.query(**kwargs, **self._capacity())
        ids = [item[PK]["S"].removeprefix("EXEC#") for item in answer.get("Items", [])]
        last = answer.get("LastEvaluatedKey")
        return ids, (cursors.encode(self._cursor_key, DUE_CURSOR, last) if last else None)

    def note_parked(self, count: int, now: float) -> float:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(TableName=self._table, Key=PARKED_KEY, ConsistentRead=True, **self._capacity())
        old = answer.get("Item")
        if old is not None and int(old["count"]["N"]) == count:
            return float(old["changed_at"]["N"])
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(PK)"}
            if old is None
            else {
                "ConditionExpression": "#c = :old",
                "ExpressionAttributeNames": {"#c": "count"},
                "ExpressionAttributeValues": {":old": old["count"]},
            }
        )
        token = new_token()
        try:
            with self._conditional(token):
                self._db.put_item(
                    TableName=self._table,
                    Item={**PARKED_KEY, "count": _n(count), "changed_at": _n(now), TOKEN: _s(token)},
                    **condition,
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError:
            pass  # another sweep noted a change at about the same time: ``now`` is as good
        return now

    def list_executions(self, *, status: str | None, workflow: str | None, limit: int, cursor: str | None) -> Page:
        """Newest first from GSI2 (keys only: it is written once per execution),
        then the summaries fetched by key and filtered."""
        found: list[Execution] = []
        start = cursors.decode(self._cursor_key, LIST_CURSOR, cursor) if cursor else None
        next_cursor: str | None = None
        for _ in range(20):  # bounded work per call; the cursor resumes it
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": GSI2,
                "KeyConditionExpression": "GSI2PK = :p",
                "ExpressionAttributeValues": {":p": _s(LIST_PARTITION)},
                "ScanIndexForward": False,
                "Limit": min(100, max(limit, 10)),
            }
            if start:
                kwargs["ExclusiveStartKey"] = start
            with mapped(f"table {self._table} index {GSI2}"):
                answer = self._db.query(**kwargs, **self._capacity())
            keys = answer.get("Items", [])
            summaries = self._summaries(keys)
            for key in keys:
                ex = summaries.get(key[PK]["S"])
                if ex is None:
                    continue
                if (status is None or ex.status.value == status) and (workflow is None or ex.workflow == workflow):
                    found.append(ex)
                if len(found) >= limit:
                    next_cursor = self._list_cursor(key)
                    return Page(found, next_cursor)
            last = answer.get("LastEvaluatedKey")
            if not last:
                return Page(found, None)
            start = last
        return Page(found, self._list_cursor(start) if start else None)

    def _list_cursor(self, key: dict[str, Any]) -> str:
        return cursors.encode(self._cursor_key, LIST_CURSOR, {k: key[k] for k in LIST_CURSOR.types})

    def _summaries(self, keys: Iterable[dict[str, Any]]) -> dict[str, Execution]:
        wanted = [{PK: k[PK], SK: k[SK]} for k in keys]
        out: dict[str, Execution] = {}
        while wanted:
            chunk, wanted = wanted[:100], wanted[100:]
            request = {
                self._table: {
                    "Keys": chunk,
                    "ProjectionExpression": ", ".join(SUMMARY_ATTRIBUTES),
                    "ExpressionAttributeNames": {"#s": "status", "#e": "error", "#w": "wait", "#p": "parent"},
                    "ConsistentRead": True,
                }
            }
            while request:
                with mapped(f"table {self._table}"):
                    answer = self._db.batch_get_item(RequestItems=request)
                for item in answer.get("Responses", {}).get(self._table, []):
                    out[item[PK]["S"]] = self._execution(item)
                request = answer.get("UnprocessedKeys") or {}
        return out
