"""The emulator's SQS fixes answer as moto does, without a pass over the queue per message."""

from __future__ import annotations

import base64
import json

import boto3
import botocore.session
import pytest
from moto import mock_aws
from moto.core import parse as moto_parse
from moto.sqs import models

from loom.local.emulator import moto_speed
from tests.unit.moto_tables import pk_sk_table

pytestmark = pytest.mark.unit


class Counted:
    """Counts how often moto builds a queue's attribute dict (three passes over its messages)."""

    def __init__(self) -> None:
        self.builds = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    counter = Counted()
    original = models.Queue.attributes

    def attributes(self: models.Queue) -> dict:
        counter.builds += 1
        return original.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(models.Queue, "attributes", property(attributes))
    return counter


def make_queue(messages: int) -> tuple[object, str]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    for _ in range(0, messages, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(10)])
    return sqs, url


def answers(sqs: object, url: str) -> list[dict]:
    names = [["All"], ["ApproximateNumberOfMessages"], ["VisibilityTimeout", "FifoQueue", "RedrivePolicy"]]
    return [sqs.get_queue_attributes(QueueUrl=url, AttributeNames=n).get("Attributes", {}) for n in names]  # type: ignore[attr-defined]


def test_a_receive_builds_no_attribute_dict_and_the_answers_are_moto_s(counted, monkeypatch) -> None:
    with mock_aws():
        sqs, url = make_queue(50)
        before = answers(sqs, url)
        counted.builds = 0
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)  # type: ignore[attr-defined]
        assert counted.builds >= 10, "moto's own receive builds the dict once per message handed out"
        monkeypatch.setattr(
            models.SQSBackend,
            "is_message_valid_based_on_retention_period",
            moto_speed.is_message_valid_based_on_retention_period,
        )
        monkeypatch.setattr(models.SQSBackend, "get_queue_attributes", moto_speed.get_queue_attributes)
        counted.builds = 0
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]  # type: ignore[attr-defined]
        assert len(got) == 10 and counted.builds == 0
        after = answers(sqs, url)
        assert counted.builds == 3, "one build per GetQueueAttributes, not three per name"
        assert after[1:] == [{"ApproximateNumberOfMessages": "30"}, before[2]]
        assert after[0].keys() == before[0].keys()


def test_a_message_past_its_retention_period_is_still_not_received(monkeypatch) -> None:
    monkeypatch.setattr(
        models.SQSBackend,
        "is_message_valid_based_on_retention_period",
        moto_speed.is_message_valid_based_on_retention_period,
    )
    with mock_aws():
        make_queue(10)
        backend = models.sqs_backends["123456789012"]["us-east-1"]
        (message, *_) = backend.get_queue("q")._messages
        assert backend.is_message_valid_based_on_retention_period("q", message)
        message.sent_timestamp -= 61_000
        assert not backend.is_message_valid_based_on_retention_period("q", message)


def test_the_queue_scans_read_the_clock_once_and_count_as_moto_does(monkeypatch) -> None:
    with mock_aws():
        sqs, url = make_queue(30)
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)  # type: ignore[attr-defined]
        sqs.send_message_batch(  # type: ignore[attr-defined]
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "late", "DelaySeconds": 60} for i in range(5)]
        )
        queue = models.sqs_backends["123456789012"]["us-east-1"].get_queue("q")
        reads = {"n": 0}
        clock = models.unix_time_millis

        def counted_clock(*args: object) -> float:
            reads["n"] += 1
            return clock(*args)  # type: ignore[arg-type]

        def scans() -> tuple[list[str], int, int, int]:
            return (
                [m.id for m in queue.messages],
                queue.approximate_number_of_messages,
                queue.approximate_number_of_messages_not_visible,
                queue.approximate_number_of_messages_delayed,
            )

        monkeypatch.setattr(models, "unix_time_millis", counted_clock)
        moto_s = scans()
        assert reads["n"] > 100, "moto reads the clock per message in each scan"
        assert moto_s[1:] == (20, 10, 5), "10 taken for 60 s; 5 delayed (moto counts them as visible)"
        for name, fn in (
            ("messages", moto_speed.visible_messages),
            ("approximate_number_of_messages_not_visible", moto_speed.count_not_visible),
            ("approximate_number_of_messages_delayed", moto_speed.count_delayed),
        ):
            monkeypatch.setattr(models.Queue, name, property(fn))
        monkeypatch.setattr(moto_speed, "unix_time_millis", counted_clock)
        reads["n"] = 0
        assert scans() == moto_s
        assert reads["n"] == 4, "one clock read per scan, four scans"


ITEM = {
    "PK": {"S": "EXEC#1"},
    "SK": {"S": "#META"},
    "n": {"N": "12.5"},
    "ok": {"BOOL": True},
    "none": {"NULL": True},
    "tags": {"SS": ["a", "b"]},
    "nums": {"NS": ["1", "2"]},
    "ctx": {"M": {"list": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"BOOL": False}}}]}, "s": {"S": ""}}},
    "blob": {"B": b"\x00\xffraw"},
    "blobs": {"BS": [b"\x01", b"\x02"]},
    "mixed": {"L": [{"S": "y"}, {"B": b"\x03"}]},
}


def dynamo_answers() -> list[dict]:
    ddb = pk_sk_table()
    ddb.put_item(TableName="t", Item=ITEM)
    key = {"PK": ITEM["PK"], "SK": ITEM["SK"]}
    answers = [
        ddb.get_item(TableName="t", Key=key),
        ddb.query(TableName="t", KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": ITEM["PK"]}),
        ddb.scan(TableName="t"),
        ddb.batch_get_item(RequestItems={"t": {"Keys": [key]}}),
        ddb.transact_get_items(TransactItems=[{"Get": {"TableName": "t", "Key": key}}]),
        ddb.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": {"N": "13"}},
            ReturnValues="ALL_OLD",
        ),
    ]
    try:
        ddb.put_item(
            TableName="t",
            Item=ITEM,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ddb.exceptions.ConditionalCheckFailedException as exc:
        answers.append(exc.response)
    for answer in answers:
        answer.pop("ResponseMetadata", None)
        answer.get("Error", {}).pop("Message", None)
    return answers


def test_dynamodb_answers_are_moto_s_and_wire_form_values_skip_the_shape_walk(monkeypatch) -> None:
    with mock_aws():
        moto_s = dynamo_answers()
    assert moto_s[0]["Item"] == ITEM and moto_s[-1]["Item"]["blob"] == {"B": b"\x00\xffraw"}
    copied = {"n": 0}
    real = moto_speed.is_wire_value

    def counted(value: object) -> bool:
        wire = real(value)
        copied["n"] += wire
        return wire

    monkeypatch.setattr(
        moto_speed.serialize.BaseJSONSerializer, "_serialize_type_structure", moto_speed.serialize_structure
    )
    monkeypatch.setattr(moto_speed, "is_wire_value", counted)
    with mock_aws():
        assert dynamo_answers() == moto_s
    assert copied["n"] >= 7 * 8, "each answer's S/N/BOOL/NULL/SS/NS/M attributes were copied, not walked"


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        ({"S": "x"}, True),
        ({"N": "1"}, True),
        ({"M": {"a": {"L": [{"NULL": True}, {"SS": ["q"]}]}}}, True),
        ({"B": b"x"}, False),
        ({"L": [{"S": "x"}, {"BS": [b"x"]}]}, False),
        ({"S": "x", "N": "1"}, False),
        ({"N": 1}, False),
        ({"M": {"a": {"B": b"x"}}}, False),
        ("S", False),
    ],
)
def test_only_values_the_serializer_would_copy_unchanged_are_wire_values(value: object, wire: bool) -> None:
    assert moto_speed.is_wire_value(value) is wire


def query_answers() -> tuple[list[dict], int]:
    """Queries of every shape the engine makes (and some it does not), over several partitions."""
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    ddb.create_table(
        TableName="q",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI2PK", "GSI2SK")],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "GSI2",
                "KeySchema": [
                    {"AttributeName": "GSI2PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI2SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for e in range(30):
        ddb.put_item(
            TableName="q",
            Item={"PK": {"S": f"EXEC#{e}"}, "SK": {"S": "#META"}, "GSI2PK": {"S": "ALL"}, "GSI2SK": {"S": f"{e:03d}"}},
        )
        for s in range(6):
            ddb.put_item(
                TableName="q", Item={"PK": {"S": f"EXEC#{e}"}, "SK": {"S": f"STEP#{s:03d}"}, "n": {"N": str(s)}}
            )
    key = {":p": {"S": "EXEC#7"}}
    asks = [
        {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": key},
        {
            "KeyConditionExpression": "PK = :p AND begins_with(SK, :s)",
            "ExpressionAttributeValues": {**key, ":s": {"S": "STEP#"}},
        },
        {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": key, "ScanIndexForward": False, "Limit": 4},
        {
            "KeyConditionExpression": "PK = :p AND SK > :s",
            "FilterExpression": "n < :m",
            "ExpressionAttributeValues": {**key, ":s": {"S": "STEP#002"}, ":m": {"N": "5"}},
        },
        {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": {":p": {"S": "EXEC#none"}}},
        {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": key, "ProjectionExpression": "SK"},
        {
            "IndexName": "GSI2",
            "KeyConditionExpression": "GSI2PK = :a",
            "ExpressionAttributeValues": {":a": {"S": "ALL"}},
            "Limit": 7,
        },
    ]
    answers = []
    for ask in asks:
        answer = ddb.query(TableName="q", **ask)
        answer.pop("ResponseMetadata")
        answers.append(answer)
    page = ddb.query(TableName="q", KeyConditionExpression="PK = :p", ExpressionAttributeValues=key, Limit=3)
    pages = 1
    while "LastEvaluatedKey" in page:  # paging through a partition with its own cursor
        page = ddb.query(
            TableName="q",
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues=key,
            Limit=3,
            ExclusiveStartKey=page["LastEvaluatedKey"],
        )
        pages += 1
    return answers, pages


def test_a_table_query_reads_one_partition_and_answers_as_moto_does(monkeypatch) -> None:
    with mock_aws():
        moto_s = query_answers()
    assert [len(a["Items"]) for a in moto_s[0]] == [7, 6, 4, 2, 0, 7, 7] and moto_s[1] == 3
    from moto.dynamodb.models.table import Table

    seen = {"partitions": 0}
    real = moto_speed._Partition.__init__

    def counted(self, table, hash_key) -> None:
        seen["partitions"] += 1
        real(self, table, hash_key)

    monkeypatch.setattr(moto_speed._Partition, "__init__", counted)
    monkeypatch.setattr(Table, "query", moto_speed.query_partition)
    with mock_aws():
        assert query_answers() == moto_s
    assert seen["partitions"] == 6 + 3, "every table query (not the index's) read one partition"


def create_gsi_table(ddb) -> None:
    """Table ``g`` (PK, SK) with a sparse GSI1 (GSI1PK, GSI1SK), as the engine's due index."""
    attrs = ["PK", "SK", "GSI1PK", "GSI1SK"]
    ddb.create_table(
        TableName="g",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in attrs],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "GSI1",
                "KeySchema": [
                    {"AttributeName": "GSI1PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def index_query_answers() -> list[dict]:
    """Index queries over a sparse GSI (items without its keys, or with only its hash key), paged to the end."""
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    create_gsi_table(ddb)
    for e in range(40):
        item = {"PK": {"S": f"EXEC#{e:02d}"}, "SK": {"S": "#META"}, "n": {"N": str(e)}}
        if e % 5:
            item["GSI1PK"] = {"S": f"SHARD#{e % 3}"}
            if e % 7:
                item["GSI1SK"] = {"S": f"{(e * 37) % 100:03d}#{e}"}  # not in PK order
        ddb.put_item(TableName="g", Item=item)
        ddb.put_item(TableName="g", Item={"PK": {"S": f"EXEC#{e:02d}"}, "SK": {"S": "STEP#000"}})
    asks: list[dict] = []
    for shard in range(4):
        values = {":s": {"S": f"SHARD#{shard}"}}
        asks += [
            {"KeyConditionExpression": "GSI1PK = :s", "ExpressionAttributeValues": values},
            {"KeyConditionExpression": "GSI1PK = :s", "ExpressionAttributeValues": values, "ScanIndexForward": False},
            {
                "KeyConditionExpression": "GSI1PK = :s AND GSI1SK < :t",
                "FilterExpression": "n > :m",
                "ExpressionAttributeValues": {**values, ":t": {"S": "050"}, ":m": {"N": "3"}},
            },
            {"KeyConditionExpression": "GSI1PK = :s", "ExpressionAttributeValues": values, "Limit": 3},
        ]
    answers = []
    for ask in asks:
        page = ddb.query(TableName="g", IndexName="GSI1", **ask)
        page.pop("ResponseMetadata")
        answers.append(page)
        while "LastEvaluatedKey" in page and "Limit" in ask:  # the index's own cursor, to the last page
            page = ddb.query(TableName="g", IndexName="GSI1", ExclusiveStartKey=page["LastEvaluatedKey"], **ask)
            page.pop("ResponseMetadata")
            answers.append(page)
    return answers


def test_an_index_query_reads_only_items_with_its_hash_key_and_answers_as_moto_does(monkeypatch) -> None:
    with mock_aws():
        moto_s = index_query_answers()
    assert sum(len(a["Items"]) for a in moto_s[:4]) > 0 and len(moto_s) > 16, "the asks must find items and page"
    from moto.dynamodb.models.table import Table

    held: list[int] = []
    real = moto_speed._Matching.__init__

    def counted(self, table, conditions) -> None:
        real(self, table, conditions)
        held.append(sum(len(v) for v in self.items.values()))

    monkeypatch.setattr(moto_speed._Matching, "__init__", counted)
    monkeypatch.setattr(Table, "query", moto_speed.query_partition)
    with mock_aws():
        assert index_query_answers() == moto_s
    assert held and max(held) < 20, "each index query's view held one shard's items, not the table's 80"


BLOB = base64.b64encode(b"\x00\xffraw").decode()
KEY_P = {"PK": {"S": "p"}}
WIRE_ITEM = {k: v for k, v in ITEM.items() if k not in ("blob", "blobs", "mixed")}  # no binary: all in wire form
# Request bodies as botocore sends them: every attribute type, binary (base64 on the wire) deep
# inside maps and lists, and values moto must parse its own way (null, two types, a number as a number).
REQUESTS: list[tuple[str, dict]] = [
    ("PutItem", {"TableName": "t", "Item": WIRE_ITEM, "ConditionExpression": "attribute_not_exists(PK)"}),
    ("PutItem", {"TableName": "t", "Item": {**WIRE_ITEM, "blob": {"B": BLOB}, "blobs": {"BS": [BLOB]}}}),
    ("PutItem", {"TableName": "t", "Item": {"PK": {"S": "p"}, "m": {"M": {"deep": {"L": [{"B": BLOB}]}}}}}),
    ("PutItem", {"TableName": "t", "Item": {"PK": {"S": None}, "two": {"S": "x", "N": "1"}, "num": {"N": 1}}}),
    (
        "UpdateItem",
        {
            "TableName": "t",
            "Key": {"PK": {"S": "p"}, "SK": {"S": "s"}},
            "UpdateExpression": "SET a = :a, b = :b",
            "ExpressionAttributeValues": {":a": {"L": [{"M": {"x": {"NULL": True}}}]}, ":b": {"BOOL": False}},
            "ReturnValues": "ALL_NEW",
        },
    ),
    (
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Put": {"TableName": "t", "Item": WIRE_ITEM}},
                {
                    "ConditionCheck": {
                        "TableName": "t",
                        "Key": {"PK": {"S": "p"}, "SK": {"B": BLOB}},
                        "ConditionExpression": "x",
                    }
                },
            ]
        },
    ),
    ("Query", {"TableName": "t", "ExclusiveStartKey": {**KEY_P, "SK": {"NS": ["1", "2"]}}}),
    (
        "BatchWriteItem",
        {"RequestItems": {"t": [{"PutRequest": {"Item": WIRE_ITEM}}, {"DeleteRequest": {"Key": KEY_P}}]}},
    ),
]


def parsed_requests() -> list[dict]:
    model = botocore.session.get_session().get_service_model("dynamodb")
    out = []
    for operation, body in REQUESTS:
        parser = moto_parse.JSONParser(model.operation_model(operation), map_type=dict)
        request = {"method": "POST", "values": {}, "headers": {}, "body": json.dumps(body).encode(), "url_path": "/"}
        out.append(parser.parse({**request, "url_params": {}}))
    return out


def test_dynamodb_requests_parse_as_moto_s_and_wire_form_values_skip_the_shape_walk(monkeypatch) -> None:
    expected = parsed_requests()
    assert expected[1]["Item"]["blob"] == {"B": b"\x00\xffraw"}, "moto decodes binary"
    walked = {"n": 0}
    moto_structure = moto_speed._moto_parse_structure

    def counted(self: object, shape, value):
        walked["n"] += shape.name == "AttributeValue"
        return moto_structure(self, shape, value)

    monkeypatch.setattr(moto_speed, "_moto_parse_structure", counted)
    monkeypatch.setattr(moto_parse.BaseJSONParser, "_parse_structure", moto_speed.parse_structure)
    assert parsed_requests() == expected
    # Walked: the six values holding binary or inside one holding it (blob, blobs; m, its list, its
    # blob; the condition check's key), and the three moto must judge itself. Nothing else.
    assert walked["n"] == 9, "values in wire form are taken as they came"
