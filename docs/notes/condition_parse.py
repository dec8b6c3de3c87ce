"""Milliseconds of the engine's step commit (one UpdateItem) in moto, with the emulator's
replacements, with and without the kept condition parse (moto_speed.parse_condition).

moto in-process, the two alternated round by round so that the machine's drift hits both. Used by
docs/notes/2026-12-07-fork-server.md:

    PYTHONPATH=$PWD .venv/bin/python docs/notes/condition_parse.py
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import boto3
from moto import mock_aws

from engine.adapters.dynamodb import MAY_COMMIT
from engine.adapters.write_token import NOT_THIS_WRITE, TOKEN
from loom.local.emulator import moto_speed

ROUNDS = 8
CALLS = 200
COMMIT = (
    "SET #s = :done, #r = :r, idx = :i, #n = :name, finished_at = :f, last_attempt = :a, "
    f"started_at = if_not_exists(started_at, :st), {TOKEN} = :wt, "
    "attempts = list_append(if_not_exists(attempts, :empty), :att) REMOVE #e"
)


def commit(db: Any, execution: str, index: int) -> None:
    db.update_item(
        TableName="t",
        Key={"PK": {"S": f"EXEC#{execution}"}, "SK": {"S": f"STEP#{index:03d}#s"}},
        UpdateExpression=COMMIT,
        ConditionExpression=f"{MAY_COMMIT} AND {NOT_THIS_WRITE}",
        ExpressionAttributeNames={"#s": "status", "#r": "result", "#n": "name", "#e": "error"},
        ExpressionAttributeValues={
            ":done": {"S": "COMPLETED"},
            ":failed": {"S": "FAILED"},
            ":r": {"S": '{"ok":true}'},
            ":i": {"N": str(index)},
            ":name": {"S": "s"},
            ":f": {"N": "1796660000.5"},
            ":st": {"N": "1796660000.1"},
            ":a": {"N": "1"},
            ":empty": {"L": []},
            ":att": {"L": [{"S": '{"attempt":1}'}]},
            ":wt": {"S": uuid.uuid4().hex},
        },
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )


def timed(db: Any) -> float:
    execution = uuid.uuid4().hex
    began = time.perf_counter()
    for index in range(CALLS):
        commit(db, execution, index)
    return (time.perf_counter() - began) / CALLS * 1000


def main() -> None:
    parser = moto_speed.ConditionExpressionParser
    for owner, name, value in moto_speed.expression_replacements():
        setattr(owner, name, value)
    kept, moto = [], []
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for _ in range(ROUNDS):
            parser.parse = moto_speed.parse_condition
            kept.append(timed(db))
            parser.parse = moto_speed._moto_condition_parse
            moto.append(timed(db))
    print(f"commit UpdateItem, moto in-process with the emulator's replacements, median of {ROUNDS} x {CALLS}:")
    print(f"  condition parsed every call: {statistics.median(moto):.3f} ms")
    print(f"  condition parse kept:        {statistics.median(kept):.3f} ms")


if __name__ == "__main__":
    main()
