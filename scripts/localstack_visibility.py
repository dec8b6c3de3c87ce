"""How late a received message becomes visible again after its VisibilityTimeout: host-mode LocalStack vs moto.

    .venv/bin/python scripts/localstack_visibility.py [--samples 8] [--timeout 2] [--port 4599]

Needs `loom localstack install`. Starts LocalStack on --port (SQS only) and the embedded emulator,
stops both. The figure goes to DESIGN.md's "Local fidelity" (the visibility-timeout row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import boto3

from loom.local.emulator import localstack_host
from loom.local.emulator.backends import EmbeddedEmulator, fake_credentials


def measure(url: str, samples: int, timeout: int) -> list[float]:
    creds = fake_credentials("us-east-1")
    sqs = boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
    )
    queue = sqs.create_queue(QueueName="visibility-probe")["QueueUrl"]
    out = []
    for i in range(samples):
        sqs.send_message(QueueUrl=queue, MessageBody=str(i))
        sqs.receive_message(QueueUrl=queue, VisibilityTimeout=timeout, WaitTimeSeconds=1)["Messages"]
        t0 = time.monotonic()
        while not (got := sqs.receive_message(QueueUrl=queue, VisibilityTimeout=60).get("Messages")):
            time.sleep(0.02)
        out.append(time.monotonic() - t0)
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=got[0]["ReceiptHandle"])
        time.sleep((i % 4) * 0.25)  # the next receive at another phase of any tick
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=2, help="the VisibilityTimeout of each receive (seconds)")
    parser.add_argument("--port", type=int, default=4599, help="host-mode LocalStack's port for the run")
    args = parser.parse_args()
    home = localstack_host.localstack_home()
    installation = localstack_host.installed(home)
    if installation is None:
        print(localstack_host.not_installed_message(home), file=sys.stderr)
        return 2
    results = {}
    data = localstack_host.data_dir(home, args.port)
    host = localstack_host.HostLocalStack(installation, data, args.port, ["sqs"], home / "visibility.log")
    host.start()
    try:
        results[f"LocalStack {localstack_host.LOCALSTACK_VERSION} (host mode)"] = measure(
            host.endpoint_url, args.samples, args.timeout
        )
    finally:
        host.stop()
    embedded = EmbeddedEmulator(port=0).start()
    try:
        results["embedded emulator (moto)"] = measure(embedded.endpoint_url, args.samples, args.timeout)
    finally:
        embedded.stop()
    for name, xs in results.items():
        print(
            f"{name}: VisibilityTimeout={args.timeout} -> visible again after min {min(xs):.2f} s, "
            f"median {statistics.median(xs):.2f} s, max {max(xs):.2f} s (n={len(xs)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
