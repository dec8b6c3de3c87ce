"""How much loom/local/emulator/moto_speed.py saves the embedded emulator, call by call (DESIGN.md,
"Soak at 1,000 executions"): moto in-process, once as moto ships and once with the fixes.

    .venv/bin/python scripts/moto_speed_bench.py
"""

from __future__ import annotations

import time
from typing import Any

import boto3
from moto import mock_aws

from loom.local.emulator import moto_speed

EXECUTION = {
    "status": {"S": "RUNNING"},
    "current_step": {"N": "3"},
    "version": {"N": "7"},
    "context": {"M": {f"step{i}": {"M": {"value": {"N": str(i)}, "note": {"S": "x" * 20}}} for i in range(8)}},
    "input": {"M": {"order_id": {"S": "o-1"}}},
    "updated_at": {"N": "1796000000.5"},
}


def timed(call: Any, repeat: int) -> float:
    began = time.perf_counter()
    for _ in range(repeat):
        call()
    return (time.perf_counter() - began) / repeat * 1000


def measure() -> dict[str, float]:
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for i in range(100):
            ddb.put_item(TableName="t", Item={"PK": {"S": f"EXEC#{i}"}, **EXECUTION})
        keys = [{"PK": {"S": f"EXEC#{i}"}} for i in range(100)]
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="steps")["QueueUrl"]
        for _ in range(100):  # a backlog of 1,000 messages
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "m"} for i in range(10)])
        return {
            "BatchGetItem of 100 executions (ms)": timed(
                lambda: ddb.batch_get_item(RequestItems={"t": {"Keys": keys}}), 10
            ),
            "GetItem of one execution (ms)": timed(lambda: ddb.get_item(TableName="t", Key=keys[0]), 50),
            "SendMessage behind 1,000 messages (ms)": timed(
                lambda: sqs.send_message(QueueUrl=url, MessageBody="."), 50
            ),
        }


def main() -> None:
    before = measure()
    moto_speed.apply()
    after = measure()
    for name, ms in before.items():
        print(f"{name:42} moto {ms:8.1f}   with moto_speed {after[name]:8.1f}")


if __name__ == "__main__":
    main()
