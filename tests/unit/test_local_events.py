"""The local stack's AWS event shapes: SQS batches, scheduled events, Function URL v2.0."""

from __future__ import annotations

import base64
import json

import pytest

from loom.local.emulator.clock import format_duration, parse_duration
from loom.local.lambdas.events import (
    HttpRequest,
    batch_failures,
    function_error_response,
    function_url_event,
    function_url_response,
    ignored_response_fields,
    schedule_seconds,
    scheduled_event,
    sqs_event,
)
from loom.local.lambdas.http import FramingError, body_length

pytestmark = pytest.mark.unit

ARN = "arn:aws:sqs:us-east-1:123456789012:loom-dev-steps"


def _message(n: int, **extra):
    return {
        "MessageId": f"m-{n}",
        "ReceiptHandle": f"rh-{n}",
        "MD5OfBody": "abc",
        "Body": json.dumps({"execution_id": "e1", "step": n}),
        "Attributes": {
            "ApproximateReceiveCount": "2",
            "SentTimestamp": "1700000000000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1700000000100",
        },
        **extra,
    }


def test_sqs_event_has_lambda_record_shape():
    event = sqs_event([_message(1), _message(2)], ARN, "us-east-1")
    assert [r["messageId"] for r in event["Records"]] == ["m-1", "m-2"]
    record = event["Records"][0]
    assert record["receiptHandle"] == "rh-1"
    assert json.loads(record["body"]) == {"execution_id": "e1", "step": 1}
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["attributes"]["SentTimestamp"] == "1700000000000"
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == ARN
    assert record["awsRegion"] == "us-east-1"
    assert record["md5OfBody"] == "abc"
    assert record["messageAttributes"] == {}
    json.dumps(event)  # what crosses the process boundary must be JSON


def test_sqs_message_attributes_are_camel_cased_and_binary_is_base64():
    msg = _message(
        1,
        MessageAttributes={
            "trace": {"StringValue": "t-1", "DataType": "String"},
            "blob": {"BinaryValue": b"\x00\x01", "DataType": "Binary"},
        },
        MD5OfMessageAttributes="def",
    )
    record = sqs_event([msg], ARN, "us-east-1")["Records"][0]
    # AWS's shape: the value the type lacks is left out (never null), both lists always there.
    assert record["messageAttributes"]["trace"] == {
        "stringValue": "t-1",
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }
    blob = record["messageAttributes"]["blob"]
    assert set(blob) == {"binaryValue", "stringListValues", "binaryListValues", "dataType"}
    assert base64.b64decode(blob["binaryValue"]) == b"\x00\x01"
    assert record["md5OfMessageAttributes"] == "def"


@pytest.mark.parametrize(
    ("answer", "keep"),
    [
        ({"batchItemFailures": []}, set()),
        (None, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m-2"}]}, {"m-2"}),
        # Lambda fails the whole batch for an identifier it cannot match, or an empty one.
        ({"batchItemFailures": [{"itemIdentifier": "nope"}]}, None),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, None),
        ({"batchItemFailures": "m-1"}, None),
    ],
)
def test_batch_failures_read_as_lambda_reads_them(answer, keep):
    assert batch_failures(answer, ["m-1", "m-2"]) == keep


def test_scheduled_event_shape():
    rule = "arn:aws:events:us-east-1:123456789012:rule/loom-dev-SweeperFunctionTick"
    event = scheduled_event(rule, "us-east-1", now=1_700_000_000)
    assert event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events"
    assert event["resources"] == [rule]
    assert event["time"] == "2023-11-14T22:13:20Z"
    assert event["detail"] == {}
    assert event["region"] == "us-east-1"


@pytest.mark.parametrize(
    ("expr", "seconds"), [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(2 hours)", 7200)]
)
def test_schedule_rates(expr, seconds):
    assert schedule_seconds(expr) == seconds


def test_cron_schedules_are_refused_with_advice():
    with pytest.raises(ValueError, match="--tick"):
        schedule_seconds("cron(0 12 * * ? *)")


def test_http_request_becomes_function_url_v2_event():
    req = HttpRequest(
        method="post",
        path="/executions",
        query="status=RUNNING&limit=5&tag=a&tag=b",
        headers=[
            ("Content-Type", "application/json"),
            ("X-Multi", "1"),
            ("X-Multi", "2"),
            ("Cookie", "a=1; b=2"),
            ("User-Agent", "curl/8"),
        ],
        body=b'{"workflow": "pipeline"}',
        host="127.0.0.1:5231",
    )
    iam = {"accessKey": "AKIAEXAMPLE", "accountId": "123456789012", "callerId": "AIDAEXAMPLE"}
    event = function_url_event(req, now=1_700_000_000.5, iam=iam, trace_id="Root=1-65540000-abc")
    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/executions"
    assert event["rawQueryString"] == "status=RUNNING&limit=5&tag=a&tag=b"
    assert event["queryStringParameters"] == {"status": "RUNNING", "limit": "5", "tag": "a,b"}
    assert event["headers"]["content-type"] == "application/json"
    assert event["headers"]["x-multi"] == "1,2"
    assert "cookie" not in event["headers"]
    assert event["cookies"] == ["a=1", "b=2"]
    assert event["body"] == '{"workflow": "pipeline"}'
    assert event["isBase64Encoded"] is False
    ctx = event["requestContext"]
    assert ctx["http"] == {
        "method": "POST",
        "path": "/executions",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "curl/8",
    }
    assert ctx["timeEpoch"] == 1_700_000_000_500
    assert ctx["time"] == "14/Nov/2023:22:13:20 +0000"
    assert ctx["domainName"] == "127.0.0.1:5231"
    assert ctx["stage"] == "$default"
    assert ctx["requestId"]
    assert ctx["authorizer"] == {"iam": iam}
    assert ctx["authentication"] is None
    # What the Function URL's front end adds to every request.
    assert event["headers"]["x-amzn-trace-id"] == "Root=1-65540000-abc"
    assert event["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert event["headers"]["x-forwarded-proto"] == "http"
    assert event["headers"]["x-forwarded-port"] == "80"


def test_auth_type_none_sends_no_authorizer_and_a_fresh_trace_id():
    event = function_url_event(HttpRequest("GET", "/workflows", "", [], b"", port=5231), now=1_700_000_000)
    assert event["requestContext"]["authorizer"] is None
    assert event["headers"]["x-forwarded-port"] == "5231"
    assert event["headers"]["x-amzn-trace-id"].startswith("Root=1-6553f100-")


def test_get_without_body_or_query_has_neither_key():
    event = function_url_event(HttpRequest("GET", "/workflows", "", [], b""))
    assert "body" not in event
    assert "queryStringParameters" not in event
    assert "cookies" not in event


def test_binary_body_is_base64_encoded():
    data = bytes(range(256))
    event = function_url_event(HttpRequest("PUT", "/x", "", [("Content-Type", "application/octet-stream")], data))
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == data


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/json"])
def test_a_body_that_is_not_utf8_is_passed_base64_encoded(content_type):
    data = b"caf\xe9 \xff\xfe"  # latin-1, not UTF-8
    headers = [("Content-Type", content_type)] if content_type else []
    event = function_url_event(HttpRequest("POST", "/x", "", headers, data))
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == data


def test_a_utf8_body_without_content_type_stays_text():
    event = function_url_event(HttpRequest("POST", "/x", "", [], "café".encode()))
    assert (event["body"], event["isBase64Encoded"]) == ("café", False)


def test_multi_value_headers_are_dropped_as_function_urls_do():
    result = {"statusCode": 200, "headers": {"x-a": "1"}, "multiValueHeaders": {"x-b": ["1", "2"]}, "body": "ok"}
    resp = function_url_response(result)
    assert [k for k, _ in resp.headers if k.lower() == "x-b"] == []
    assert ("x-a", "1") in resp.headers
    assert ignored_response_fields(result) == ["multiValueHeaders"]
    assert ignored_response_fields({"statusCode": 200}) == []


def test_full_response_translates_status_headers_cookies_and_body():
    resp = function_url_response(
        {
            "statusCode": 201,
            "headers": {"content-type": "application/json", "x-loom": "1"},
            "cookies": ["s=1; Path=/"],
            "body": '{"id": "e1"}',
        }
    )
    assert resp.status == 201
    assert ("x-loom", "1") in resp.headers
    assert ("set-cookie", "s=1; Path=/") in resp.headers
    assert json.loads(resp.body) == {"id": "e1"}


def test_base64_response_body_is_decoded():
    resp = function_url_response(
        {"statusCode": 200, "body": base64.b64encode(b"\xff\x00").decode(), "isBase64Encoded": True}
    )
    assert resp.body == b"\xff\x00"


def test_answer_without_status_code_is_a_json_200():
    resp = function_url_response({"hello": "world"})
    assert resp.status == 200
    assert ("content-type", "application/json") in resp.headers
    assert json.loads(resp.body) == {"hello": "world"}


def test_function_error_is_a_502_with_a_fixed_body():
    resp = function_error_response()
    assert (resp.status, resp.body) == (502, b"Internal Server Error")


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("45", 45)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "-5m", "2h junk"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(86401) == "1d1s"


@pytest.mark.parametrize(
    ("method", "headers", "expected"),
    [
        ("GET", {}, 0),
        ("DELETE", {}, 0),
        ("POST", {"content-length": "0"}, 0),
        ("POST", {"content-length": "12"}, 12),
        ("PUT", {"content-length": "12, 12"}, 12),  # a repeated, identical header is one length
        ("POST", {"content-length": str(6 * 1024 * 1024)}, 6 * 1024 * 1024),
        ("POST", {}, 411),
        ("PATCH", {}, 411),
        ("POST", {"transfer-encoding": "chunked"}, 411),
        ("POST", {"content-length": "twelve"}, 400),
        ("POST", {"content-length": "-1"}, 400),
        ("POST", {"content-length": "12, 13"}, 400),
        ("POST", {"content-length": str(6 * 1024 * 1024 + 1)}, 413),
    ],
)
def test_the_body_length_is_decided_from_the_headers(method, headers, expected):
    if expected in (400, 411, 413):
        with pytest.raises(FramingError) as refused:
            body_length(method, headers)
        assert refused.value.status == expected
    else:
        assert body_length(method, headers) == expected
