#!/usr/bin/env python3
"""A GetItem round trip on moto's stock server (no authentication) and on the embedded emulator
(SigV4 and IAM checked on every request): median and p95 over N calls after 50 warm-ups.

.venv/bin/python scripts/emulator_auth_cost.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from loom.local.emulator.backends import EmbeddedEmulator

KEY = {"PK": {"S": "a"}}


def round_trips(ddb: Any, n: int) -> tuple[float, float]:
    ddb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName="t", Item={**KEY, "v": {"S": "x" * 200}})
    for _ in range(50):
        ddb.get_item(TableName="t", Key=KEY)
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        ddb.get_item(TableName="t", Key=KEY)
        took.append(time.perf_counter() - t0)
    took.sort()
    return statistics.median(took) * 1000, took[int(n * 0.95)] * 1000


def main(n: int) -> None:
    stock = ThreadedMotoServer(port=0, verbose=False)
    stock.start()
    host, port = stock.get_host_and_port()
    plain = boto3.client(
        "dynamodb",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        median, p95 = round_trips(plain, n)
        print(f"moto's stock server, no authentication: median {median:.2f} ms, p95 {p95:.2f} ms")
    finally:
        stock.stop()
    emulator = EmbeddedEmulator().start()
    try:
        signed = emulator.session("us-east-1").client("dynamodb", endpoint_url=emulator.endpoint_url)
        median, p95 = round_trips(signed, n)
        print(f"embedded emulator, SigV4 + IAM checked: median {median:.2f} ms, p95 {p95:.2f} ms")
    finally:
        emulator.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
