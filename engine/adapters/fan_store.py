"""The fan-out part of the DynamoDB store: the join record and the item records.

    join  PK=EXEC#<id>                   SK=FAN#<nnn>           n, shards, window, ok, failed, ends, declined, decided
    item  PK=FAN#<id>#<nnn>#<shard>      SK=ITEM#<idx:06d>      as a step's history record

``shard = idx % shards``: a 10,000-item map writes 32 partitions, never one hot key. An
item's final write and its count on the join record are one TransactWriteItems (two
items of at most 1 KB each: 4 WCU).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from botocore.exceptions import ClientError

from engine.adapters.aws_errors import error_code, mapped
from engine.adapters.paging import query_items
from engine.adapters.write_token import ALL_OLD, NOT_THIS_WRITE, TOKEN, carries, conditional, new_token, winner_of
from engine.errors import ConflictError, TransientError
from engine.join import JoinRecord, shard_of_item, shards_of_page
from engine.limits import check_item, history_item_size
from engine.state import Attempt, StepRecord, StepStatus, canonical_json

PK, SK = "PK", "SK"
NEW_RECORD = "attribute_not_exists(#s)"
MAY_COMMIT = (
    f"({NEW_RECORD} OR (#s <> :done AND NOT (#s = :failed AND last_attempt >= :a) "
    "AND (attribute_not_exists(last_attempt) OR last_attempt < :a)))"
)
MAY_RECORD_FAILURE = f"(attribute_not_exists(last_attempt) OR last_attempt < :a) AND ({NEW_RECORD} OR #s <> :done)"
# A declined item never runs: a late run of it (a message re-sent by a recovery) commits nothing.
NOT_DECLINED = f"({NEW_RECORD} OR #s <> :ns)"


def join_key(execution_id: str, step: int) -> dict[str, Any]:
    return {PK: {"S": f"EXEC#{execution_id}"}, SK: {"S": f"FAN#{step:03d}"}}


def item_key(execution_id: str, step: int, idx: int, shards: int) -> dict[str, Any]:
    pk = f"FAN#{execution_id}#{step:03d}#{shard_of_item(idx, shards)}"
    return {PK: {"S": pk}, SK: {"S": f"ITEM#{idx:06d}"}}


class _Table(Protocol):
    _db: Any
    _table: str

    def _capacity(self) -> dict[str, str]: ...


def _join(execution_id: str, step: int, item: dict[str, Any]) -> JoinRecord:
    return JoinRecord(
        execution_id=execution_id,
        step=step,
        n=int(item["n"]["N"]),
        shards=int(item["shards"]["N"]),
        window=int(item["window"]["N"]),
        ok=int(item.get("ok", {"N": "0"})["N"]),
        failed=int(item.get("failed", {"N": "0"})["N"]),
        decided=item["decided"]["S"] if "decided" in item else None,
        ends=int(item.get("ends", {"N": "0"})["N"]),
        declined=int(item.get("declined", {"N": "0"})["N"]),
    )


def step_record(execution_id: str, item: dict[str, Any]) -> StepRecord:
    """A step history record or a fan-out item record, from its DynamoDB item (one reader for both)."""
    attempts = tuple(Attempt.from_dict(json.loads(a["S"])) for a in item.get("attempts", {}).get("L", []))
    return StepRecord(
        execution_id=execution_id,
        index=int(item["idx"]["N"]),
        name=item["name"]["S"],
        status=StepStatus(item["status"]["S"]),
        attempts=attempts,
        result=_loads(item.get("result")),
        error=_loads(item.get("error")),
        started_at=None if "started_at" not in item else float(item["started_at"]["N"]),
        finished_at=None if "finished_at" not in item else float(item["finished_at"]["N"]),
        label=item["label"]["S"] if "label" in item else None,
    )


def _loads(attr: dict[str, str] | None) -> Any:
    return None if attr is None else json.loads(attr["S"])


def _n(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


class FanStore:
    """Mixed into ``DynamoStore``: the fan-out records (engine/ports.py, "fan-out")."""

    def open_join(self: _Table, join: JoinRecord) -> JoinRecord:
        item = {
            **join_key(join.execution_id, join.step),
            "n": _n(join.n),
            "shards": _n(join.shards),
            "window": _n(join.window),
            "ok": _n(0),
            "failed": _n(0),
        }
        token = new_token()
        try:
            with conditional(f"table {self._table}", token):
                self._db.put_item(
                    TableName=self._table,
                    Item={**item, TOKEN: {"S": token}},
                    ConditionExpression="attribute_not_exists(PK)",
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError as exc:
            old = winner_of(exc)
            if old is None:
                found = FanStore.get_join(self, join.execution_id, join.step)
                if found is None:
                    raise
                return found
            return _join(join.execution_id, join.step, old)
        return join

    def get_join(self: _Table, execution_id: str, step: int) -> JoinRecord | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table, Key=join_key(execution_id, step), ConsistentRead=True, **self._capacity()
            )
        item = answer.get("Item")
        return None if item is None else _join(execution_id, step, item)

    def decide_join(self: _Table, execution_id: str, step: int, decided: str) -> str:
        token = new_token()
        try:
            with conditional(f"table {self._table}", token):
                self._db.update_item(
                    TableName=self._table,
                    Key=join_key(execution_id, step),
                    UpdateExpression=f"SET decided = :d, {TOKEN} = :wt",
                    ConditionExpression="attribute_exists(PK) AND attribute_not_exists(decided)",
                    ExpressionAttributeValues={":d": {"S": decided}, ":wt": {"S": token}},
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError:
            found = FanStore.get_join(self, execution_id, step)
            if found is None or found.decided is None:
                raise
            return found.decided
        return decided

    def get_item(self: _Table, execution_id: str, step: int, idx: int, shards: int) -> StepRecord | None:
        with mapped(f"table {self._table}"):
            answer = self._db.get_item(
                TableName=self._table,
                Key=item_key(execution_id, step, idx, shards),
                ConsistentRead=True,
                **self._capacity(),
            )
        item = answer.get("Item")
        return None if item is None else step_record(execution_id, item)

    def commit_item(
        self: _Table,
        execution_id: str,
        step: int,
        name: str,
        idx: int,
        shards: int,
        attempt: Attempt,
        result: Any,
        *,
        chain_end: bool = False,
        label: str | None = None,
    ) -> None:
        result_json = canonical_json(result)
        check_item(history_item_size(result_json, attempt.attempt), f"item {idx} of step {name!r}")
        update = (
            "SET #s = :done, #r = :r, idx = :i, #n = :name, finished_at = :f, last_attempt = :a, "
            f"started_at = if_not_exists(started_at, :st), {TOKEN} = :wt, "
            "attempts = list_append(if_not_exists(attempts, :empty), :att) REMOVE #e"
        )
        values = {
            **_attempt_values(idx, name, attempt),
            ":r": {"S": result_json},
            ":f": _n(attempt.finished_at),
        }
        names = {"#s": "status", "#r": "result", "#n": "name", "#e": "error"}
        counter = "ok :one, ends" if chain_end else "ok"
        condition = f"{MAY_COMMIT} AND {NOT_DECLINED}"
        update = _with_label(update, names, values, label)
        _transact(self, execution_id, step, idx, shards, update, condition, names, values, counter)

    def fail_item(
        self: _Table,
        execution_id: str,
        step: int,
        name: str,
        idx: int,
        shards: int,
        attempt: Attempt,
        *,
        final: bool,
        chain_end: bool = False,
        label: str | None = None,
    ) -> bool:
        status = StepStatus.FAILED if final else StepStatus.RETRYING
        update = (
            "SET #s = :status, #e = :e, idx = :i, #n = :name, last_attempt = :a, "
            f"started_at = if_not_exists(started_at, :st), {TOKEN} = :wt, "
            "attempts = list_append(if_not_exists(attempts, :empty), :att)"
        )
        values = {
            **_attempt_values(idx, name, attempt),
            ":status": {"S": status.value},
            ":e": {"S": canonical_json(attempt.error)},
        }
        names = {"#s": "status", "#e": "error", "#n": "name"}
        update = _with_label(update, names, values, label)
        try:
            if final:
                update += ", finished_at = :f"
                values[":f"] = _n(attempt.finished_at)
                counter = "failed :one, ends" if chain_end else "failed"
                condition = f"{MAY_RECORD_FAILURE} AND {NOT_DECLINED}"
                _transact(self, execution_id, step, idx, shards, update, condition, names, values, counter)
                return True
            with conditional(f"table {self._table}", values[":wt"]["S"]):
                self._db.update_item(
                    TableName=self._table,
                    Key=item_key(execution_id, step, idx, shards),
                    UpdateExpression=update,
                    ConditionExpression=f"{MAY_RECORD_FAILURE} AND {NOT_DECLINED} AND {NOT_THIS_WRITE}",
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={k: v for k, v in values.items() if k != ":failed"},
                    **ALL_OLD,
                    **self._capacity(),
                )
        except ConflictError:
            return False
        return True

    def decline_item(self: _Table, execution_id: str, step: int, name: str, idx: int, shards: int) -> bool:
        """Item ``idx`` NOT_STARTED and the join's ``declined`` counted, in one transaction, only
        if the item has no record; False if it has one (it ran, or another runner declined it)."""
        values = {
            ":ns": {"S": StepStatus.NOT_STARTED.value},
            ":i": _n(idx),
            ":name": {"S": name},
            ":wt": {"S": new_token()},
        }
        update = f"SET #s = :ns, idx = :i, #n = :name, {TOKEN} = :wt"
        names = {"#s": "status", "#n": "name"}
        try:
            _transact(self, execution_id, step, idx, shards, update, NEW_RECORD, names, values, counter="declined")
        except ConflictError:
            return False
        return True

    def fan_items(self: _Table, execution_id: str, step: int, shards: int, start: int, count: int) -> list[StepRecord]:
        found: list[StepRecord] = []
        last = start + count - 1
        for shard in shards_of_page(start, count, shards):
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "PK = :pk AND SK BETWEEN :lo AND :hi",
                "ExpressionAttributeValues": {
                    ":pk": {"S": f"FAN#{execution_id}#{step:03d}#{shard}"},
                    ":lo": {"S": f"ITEM#{start:06d}"},
                    ":hi": {"S": f"ITEM#{last:06d}"},
                },
                "ConsistentRead": True,
                **self._capacity(),
            }
            items = query_items(self._db, f"table {self._table}", kwargs)
            found.extend(step_record(execution_id, item) for item in items)
        return sorted(found, key=lambda r: r.index)


def _with_label(update: str, names: dict[str, str], values: dict[str, Any], label: str | None) -> str:
    """The item's name rides on the write that records the item: no write of its own."""
    if label is None:
        return update
    names["#lb"] = "label"
    values[":label"] = {"S": label}
    set_part, sep, rest = update.partition(" REMOVE ")
    return f"{set_part}, #lb = :label{sep}{rest}"


def _attempt_values(idx: int, name: str, attempt: Attempt) -> dict[str, Any]:
    return {
        ":done": {"S": StepStatus.COMPLETED.value},
        ":failed": {"S": StepStatus.FAILED.value},
        ":ns": {"S": StepStatus.NOT_STARTED.value},
        ":i": _n(idx),
        ":name": {"S": name},
        ":a": _n(attempt.attempt),
        ":st": _n(attempt.started_at),
        ":empty": {"L": []},
        ":att": {"L": [{"S": canonical_json(attempt.to_dict())}]},
        ":wt": {"S": new_token()},
    }


def _transact(
    table: _Table,
    execution_id: str,
    step: int,
    idx: int,
    shards: int,
    update: str,
    condition: str,
    names: dict[str, str],
    values: dict[str, Any],
    counter: str,
) -> None:
    """The item's write and the join's count, both or neither. ``ClientRequestToken`` makes
    botocore's resend of a request whose answer was lost a no-op, so nothing counts twice;
    where a resend is evaluated again all the same, the item's write token says it landed."""
    condition = f"{condition} AND {NOT_THIS_WRITE}"
    used = {k: v for k, v in values.items() if k in update or k in condition}
    token = values[":wt"]["S"]
    item_update = {
        "TableName": table._table,
        "Key": item_key(execution_id, step, idx, shards),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": used,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    count = {
        "TableName": table._table,
        "Key": join_key(execution_id, step),
        "UpdateExpression": f"ADD {counter} :one",
        # Once the join is decided (or a compensation fenced it) no item becomes final any more:
        # the set of committed items the join read, or the compensation undoes, is the final one.
        "ConditionExpression": "attribute_exists(PK) AND attribute_not_exists(decided)",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }
    try:
        table._db.transact_write_items(
            TransactItems=[{"Update": item_update}, {"Update": count}],
            ClientRequestToken=token,
            **table._capacity(),
        )
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            with mapped(f"table {table._table}"):
                raise
        reasons = exc.response.get("CancellationReasons") or []
        codes = [str(r.get("Code", "")) for r in reasons]
        if "ConditionalCheckFailed" in codes or "ConditionalCheckFailed" in str(exc):
            old = reasons[0].get("Item") if reasons else None
            if carries(old, token):
                return  # our own earlier try landed, its count with it (one transaction)
            current = None if old is None else step_record(execution_id, dict(old))
            raise ConflictError(f"item {idx} of step {step} refused the write", current=current) from exc
        if any(c in ("ThrottlingError", "TransactionConflict", "ProvisionedThroughputExceeded") for c in codes):
            raise TransientError(f"item {idx} of step {step}: transaction cancelled ({codes})") from exc
        raise


__all__ = ["FanStore", "item_key", "join_key"]
