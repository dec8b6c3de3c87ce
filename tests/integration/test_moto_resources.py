"""loom.testing.moto_resources: the template's resources are built once, then handed out empty;
anything a test changed beyond items and messages makes the next use build them again."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from loom.testing.moto_resources import moto_kept, template_resources

pytestmark = pytest.mark.integration


def _dirty(session: boto3.Session, refs: dict) -> None:
    session.client("dynamodb").put_item(TableName=refs["Table"], Item={"PK": {"S": "x"}, "SK": {"S": "y"}})
    sqs = session.client("sqs")
    sqs.send_message(QueueUrl=refs["StepQueue"], MessageBody="now")
    sqs.send_message(QueueUrl=refs["StepQueue"], MessageBody="later", DelaySeconds=600)
    sqs.send_message(QueueUrl=refs["DeadLetterQueue"], MessageBody="parked")
    sqs.receive_message(QueueUrl=refs["StepQueue"], VisibilityTimeout=600)  # one in flight


def _empty(session: boto3.Session, refs: dict) -> bool:
    items = session.client("dynamodb").scan(TableName=refs["Table"])["Items"]
    attrs = [
        session.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for url in (refs["StepQueue"], refs["DeadLetterQueue"])
    ]
    names = (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    )
    return not items and all(a[n] == "0" for a in attrs for n in names)


def test_a_second_use_gets_the_same_resources_emptied_of_items_and_of_messages_in_every_state() -> None:
    session = boto3.Session(region_name="us-east-1")
    with moto_kept():
        refs = template_resources(session, only=True)
        _dirty(session, refs)
        assert not _empty(session, refs)
    with moto_kept():
        again = template_resources(session, only=True)
        assert again == refs and _empty(session, again)
        # a purge right after the emptying is not refused: the emptying is no PurgeQueue
        session.client("sqs").purge_queue(QueueUrl=again["StepQueue"])


def test_changed_queue_attributes_other_tables_and_a_reset_mock_each_mean_a_fresh_build() -> None:
    session = boto3.Session(region_name="us-east-1")
    with moto_kept():
        refs = template_resources(session, only=True)
        sqs = session.client("sqs")
        sqs.set_queue_attributes(QueueUrl=refs["StepQueue"], Attributes={"VisibilityTimeout": "1"})
        ddb = session.client("dynamodb")
        ddb.create_table(
            TableName="other",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        kept = template_resources(session)  # a caller's own table stays without ``only``
        assert "other" in ddb.list_tables()["TableNames"]
        visibility = sqs.get_queue_attributes(QueueUrl=kept["StepQueue"], AttributeNames=["VisibilityTimeout"])
        assert visibility["Attributes"]["VisibilityTimeout"] != "1", "the changed queue was built again"
        template_resources(session, only=True)
        assert ddb.list_tables()["TableNames"] == [refs["Table"]]
    with mock_aws():  # moto's own mock starts from nothing and deletes everything at its end
        pass
    with moto_kept():
        rebuilt = template_resources(session, only=True)
        assert rebuilt == refs and _empty(session, rebuilt)
