"""The local stack's events and responses checked against references we did not write:
Powertools' parser models, the samples SAM CLI ships (``sam local generate-event``, offline)
and the response mapping cases in AWS's Function URL documentation.

The events are the ones the stack really emits: the SQS batch from the event source mapping
polling a queue (moto), the sweeper's scheduled event, and the Function URL request built by
the local server for a signed HTTP request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, LambdaFunctionUrlModel, SqsModel
from samcli.lib.generated_sample_events.events import Events

from loom.local.emulator.client import LocalApi, call
from loom.local.emulator.sigv4 import new_principal
from loom.local.lambdas.esm import EsmConfig, SqsEventSource
from loom.local.lambdas.events import function_url_response, scheduled_event
from loom.local.lambdas.http import FunctionUrlServer, UrlAuth
from loom.local.lambdas.pool import Invocation

pytestmark = pytest.mark.integration

REGION = "us-east-1"
EVENTS = Path(__file__).resolve().parents[2] / "events"
# The nulls AWS itself sends (documented); any other null is a key AWS would leave out.
AWS_NULLS = {"authentication", "cognitoIdentity", "principalOrgId"}


class RecordingPool:
    """Stands in for the function: records the events it is given, answers as told."""

    function = "Recorder"
    size = 1

    def __init__(self, answer: Any = None) -> None:
        self.events: list[Any] = []
        self.answer = answer

    def invoke(self, event: Any, **_: Any) -> Invocation:
        self.events.append(json.loads(json.dumps(event)))  # what crosses the process boundary
        return Invocation("Recorder", "r", 1, 0.0, 1.0, "ok", result=self.answer)


def sam_sample(service: str, kind: str) -> dict[str, Any]:
    return json.loads(Events().generate_event(service, kind, {}))


def nulls(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        found = [path + "." + k for k, v in value.items() if v is None and k not in AWS_NULLS]
        return found + [n for k, v in value.items() for n in nulls(v, path + "." + k)]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in nulls(v, f"{path}[{i}]")]
    return []


# ------------------------------------------------------------------ the events, as emitted


@pytest.fixture
def sqs_batch(aws: dict[str, Any]) -> dict[str, Any]:
    sqs = aws["sqs"]
    queue = aws["StepQueue"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.send_message(
        QueueUrl=queue,
        MessageBody='{"execution_id": "e1", "step": 0}',
        MessageAttributes={
            "trace": {"DataType": "String", "StringValue": "t-1"},
            "count": {"DataType": "Number", "StringValue": "3"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    sqs.send_message(QueueUrl=queue, MessageBody='{"execution_id": "e2", "step": 1}')
    pool = RecordingPool({"batchItemFailures": []})
    esm = SqsEventSource(sqs, pool, EsmConfig(queue_url=queue, queue_arn=arn, region=REGION))  # type: ignore[arg-type]
    esm.deliver(esm.gather())
    return pool.events[0]


@pytest.fixture
def url_request() -> dict[str, Any]:
    pool = RecordingPool({"statusCode": 200, "body": "{}"})
    principal = new_principal()
    server = FunctionUrlServer(pool, UrlAuth.iam(REGION, principal)).start()  # type: ignore[arg-type]
    try:
        api = LocalApi(server.url, principal.credentials(), REGION)
        assert call(api, "POST", "/executions?limit=5&tag=a&tag=b", {"workflow": "pipeline"})[0] == 200
    finally:
        server.stop()
    return pool.events[0]


SCHEDULED = scheduled_event("arn:aws:events:us-east-1:123456789012:rule/loom-dev-SweeperFunctionTick", REGION)


# ------------------------------------------------------------------ Powertools' models


def test_the_sqs_batch_parses_with_powertools(sqs_batch):
    model = parse(event=sqs_batch, model=SqsModel)
    assert [json.loads(r.body)["execution_id"] for r in model.Records] == ["e1", "e2"]
    first = model.Records[0]
    assert first.messageAttributes["trace"].stringValue == "t-1"
    assert first.messageAttributes["blob"].binaryValue == "AAE="
    assert first.attributes.ApproximateReceiveCount == "1"
    assert nulls(sqs_batch) == []  # no "binaryValue": null on a string attribute


def test_the_scheduled_event_parses_with_powertools():
    model = parse(event=SCHEDULED, model=EventBridgeModel)
    assert model.detail_type == "Scheduled Event" and model.source == "aws.events"
    assert nulls(SCHEDULED) == []


def test_the_function_url_request_parses_with_powertools(url_request):
    model = parse(event=url_request, model=LambdaFunctionUrlModel)
    iam = model.requestContext.authorizer.iam
    assert iam.accessKey.startswith("AKIA") and iam.userArn.endswith(":user/loom-local")
    assert model.requestContext.http.method == "POST"
    assert model.queryStringParameters == {"limit": "5", "tag": "a,b"}
    assert json.loads(model.body) == {"workflow": "pipeline"}
    assert nulls(url_request) == []


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("sqs_step_batch.json", SqsModel),
        ("schedule.json", EventBridgeModel),
        ("url_get_execution.json", LambdaFunctionUrlModel),
        ("url_list_executions.json", LambdaFunctionUrlModel),
        ("url_start_execution.json", LambdaFunctionUrlModel),
        ("url_start_execution_base64.json", LambdaFunctionUrlModel),
    ],
)
def test_the_shipped_sam_local_invoke_events_parse_with_powertools(name, model):
    event = json.loads((EVENTS / name).read_text())
    parse(event=event, model=model)
    assert nulls(event) == []
    if model is LambdaFunctionUrlModel:
        # What a Function URL sends: no API Gateway leftovers, the documented null.
        assert "pathParameters" not in event and "stageVariables" not in event
        assert event["requestContext"]["authentication"] is None


# ------------------------------------------------------------------ SAM CLI's samples


def test_the_sqs_batch_has_sam_clis_record_shape(sqs_batch):
    sample = sam_sample("sqs", "receive-message")["Records"][0]
    ours = sqs_batch["Records"][1]  # the message without attributes, like the sample
    assert set(ours) == set(sample)
    assert set(sample["attributes"]) <= set(ours["attributes"])
    for key, value in sample.items():
        assert type(ours[key]) is type(value), key


def test_the_scheduled_event_has_sam_clis_shape():
    sample = sam_sample("cloudwatch", "scheduled-event")
    # AWS adds "version": "0" (EventBridge's envelope); SAM's sample leaves it out.
    assert set(SCHEDULED) - set(sample) == {"version"}
    assert set(sample) <= set(SCHEDULED)
    for key, value in sample.items():
        assert type(SCHEDULED[key]) is type(value), key


def test_the_function_url_request_has_sam_clis_payload_2_shape(url_request):
    sample = sam_sample("apigateway", "http-api-proxy")
    # A Function URL sends no path parameters or stage variables (AWS: null or left out), and
    # cookies only when the request has some (this one has none).
    assert set(url_request) <= set(sample)
    assert set(sample) - set(url_request) <= {"pathParameters", "stageVariables", "cookies"}
    assert set(url_request["requestContext"]) == set(sample["requestContext"])
    assert set(url_request["requestContext"]["http"]) == set(sample["requestContext"]["http"])
    for key, value in sample["requestContext"].items():
        if value is not None and url_request["requestContext"][key] is not None:
            assert type(url_request["requestContext"][key]) is type(value), key


# ------------------------------------------------------------------ AWS's documented response cases
# https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-response-payload


def test_a_string_answer_is_a_json_200():
    resp = function_url_response("Hello, world!")
    assert (resp.status, resp.body) == (200, b'"Hello, world!"')
    assert ("content-type", "application/json") in resp.headers
    assert len(resp.body) == 15  # the documented content-length


def test_a_json_answer_without_status_code_is_its_body():
    resp = function_url_response({"message": "Hello, world!"})
    assert resp.status == 200 and json.loads(resp.body) == {"message": "Hello, world!"}
    assert ("content-type", "application/json") in resp.headers


def test_a_custom_answer_and_its_cookies():
    resp = function_url_response(
        {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json", "My-Custom-Header": "Custom Value"},
            "body": json.dumps({"message": "Hello, world!"}),
            "cookies": ["Cookie_1=Value1; Expires=21 Oct 2021 07:48 GMT", "Cookie_2=Value2; Max-Age=78000"],
            "isBase64Encoded": False,
        }
    )
    assert resp.status == 201
    assert ("My-Custom-Header", "Custom Value") in resp.headers
    assert [v for k, v in resp.headers if k == "set-cookie"] == [
        "Cookie_1=Value1; Expires=21 Oct 2021 07:48 GMT",
        "Cookie_2=Value2; Max-Age=78000",
    ]
    assert json.loads(resp.body) == {"message": "Hello, world!"}
    assert [k for k, _ in resp.headers if k.lower() == "content-type"] == ["Content-Type"]
