#!/usr/bin/env python3
"""What a save of the embedded emulator's data costs: capture (DynamoDB lock held) and write.

.venv/bin/python scripts/snapshot_cost.py 1000 10000
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
from moto import mock_aws

from loom.local.emulator import snapshot
from loom.template import create_resources


def measure(n: int, directory: Path) -> str:
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        refs = create_resources(session, parameters={"Stage": f"cost{n}"})
        ddb = session.client("dynamodb")
        for i in range(n):
            item = {"PK": {"S": f"EXEC#{i}"}, "SK": {"S": "META"}, "data": {"S": "x" * 1000}}
            ddb.put_item(TableName=refs["Table"], Item=item)
        t0 = time.perf_counter()
        data = snapshot.capture(threading.Lock())
        t1 = time.perf_counter()
        target = directory / f"{n}.json"
        snapshot.write(target, data)
        t2 = time.perf_counter()
    size = target.stat().st_size / 1e6
    capture, write = 1000 * (t1 - t0), 1000 * (t2 - t1)
    return f"{n} items of ~1 KB: capture {capture:.0f} ms (lock held), write {write:.0f} ms, {size:.1f} MB"


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for arg in sys.argv[1:] or ["1000"]:
            print(measure(int(arg), Path(tmp)))
