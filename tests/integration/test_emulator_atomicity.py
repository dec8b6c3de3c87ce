"""The embedded emulator keeps DynamoDB's promise: a conditional write is atomic.

moto alone checks the condition and writes in separate steps, so two racing
writers could both win (about one race in six without the lock in
loom/local/emulator/moto_server.py). Loom's one-commit-per-step rests on one winner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import boto3
import pytest

from loom.local.emulator.backends import EmbeddedEmulator

pytestmark = [pytest.mark.integration, pytest.mark.server, pytest.mark.timeout(120)]

# The engine's step commit (engine/adapters/dynamodb.py), the write that must have one winner.
COMMIT = {
    "UpdateExpression": (
        "SET #s = :done, #r = :r, idx = :i, #n = :name, finished_at = :f, last_attempt = :a, "
        "started_at = if_not_exists(started_at, :st), "
        "attempts = list_append(if_not_exists(attempts, :empty), :att) REMOVE #e"
    ),
    "ConditionExpression": "attribute_not_exists(#s) OR (#s <> :done AND NOT (#s = :failed AND last_attempt >= :a))",
    "ExpressionAttributeNames": {"#s": "status", "#r": "result", "#n": "name", "#e": "error"},
    "ExpressionAttributeValues": {
        ":done": {"S": "COMPLETED"},
        ":failed": {"S": "FAILED"},
        ":r": {"S": "null"},
        ":i": {"N": "1"},
        ":name": {"S": "s1"},
        ":f": {"N": "2"},
        ":st": {"N": "1"},
        ":a": {"N": "1"},
        ":empty": {"L": []},
        ":att": {"L": [{"S": "{}"}]},
    },
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmbeddedEmulator]:
    emulator = EmbeddedEmulator().start()
    try:
        yield emulator
    finally:
        emulator.stop()


def key(trial: int) -> dict[str, dict[str, str]]:
    return {"PK": {"S": f"EXEC#race-{trial}"}, "SK": {"S": "STEP#001#s1"}}


def test_racing_conditional_writes_have_exactly_one_winner(emulator: EmbeddedEmulator) -> None:
    assert emulator.keys is not None
    creds, endpoint = emulator.keys.env("us-east-1"), emulator.endpoint_url

    def client() -> object:
        return boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        )

    admin = client()
    admin.create_table(  # type: ignore[attr-defined]
        TableName="race",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    racers = [client() for _ in range(2)]
    doubles = []
    for trial in range(150):
        wins: list[int] = []
        barrier = threading.Barrier(len(racers))

        def race(db: object, trial: int = trial, wins: list[int] = wins, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                db.update_item(TableName="race", Key=key(trial), **COMMIT)  # type: ignore[attr-defined]
                wins.append(1)
            except db.exceptions.ConditionalCheckFailedException:  # type: ignore[attr-defined]
                pass

        threads = [threading.Thread(target=race, args=(db,)) for db in racers]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        item = admin.get_item(TableName="race", Key=key(trial))["Item"]  # type: ignore[attr-defined]
        if len(wins) != 1 or len(item["attempts"]["L"]) != 1:
            doubles.append((trial, len(wins), len(item["attempts"]["L"])))
    assert doubles == [], f"conditional writes that both won (trial, winners, records): {doubles[:5]}"


def test_the_emulator_applies_a_resent_transaction_once(emulator: EmbeddedEmulator) -> None:
    """ClientRequestToken (loom/local/emulator/moto_tokens.py): botocore's resend of a transaction whose
    answer was lost writes nothing again, as in DynamoDB."""
    assert emulator.keys is not None
    db = emulator.keys.session("us-east-1").client("dynamodb", endpoint_url=emulator.endpoint_url)
    db.create_table(
        TableName="tokens",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    count = {"TableName": "tokens", "Key": {"PK": {"S": "c"}}, "UpdateExpression": "ADD n :one"}
    count["ExpressionAttributeValues"] = {":one": {"N": "1"}}
    for _ in range(2):
        db.transact_write_items(TransactItems=[{"Update": count}], ClientRequestToken="same-token")
    assert db.get_item(TableName="tokens", Key={"PK": {"S": "c"}})["Item"]["n"] == {"N": "1"}
