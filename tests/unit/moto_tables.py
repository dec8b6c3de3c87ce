"""The table the moto equivalence tests write to: "t", string keys PK and SK, on demand."""

from __future__ import annotations

from typing import Any

import boto3


def pk_sk_table() -> Any:
    """Make "t" in the running mock_aws and return a DynamoDB client for it."""
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
    return db
