"""The emulator's keep-alive handler (loom.local.emulator.moto_http): moto's answers, over one connection."""

from __future__ import annotations

import http.client
import io
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from loom.local.emulator import moto_http
from loom.local.emulator.moto_http import KeepAliveHandler, parse_headers, request_length

pytestmark = pytest.mark.integration

# What differs between two answers to the same request whatever serves it, and the framing we write.
VARYING = {"date", "server", "connection", "x-amzn-requestid", "x-amz-crc32", "content-length"}


@pytest.fixture
def servers() -> Iterator[dict[str, str]]:
    """moto's stock server and the keep-alive one, on one app (one moto state)."""
    app = DomainDispatcherApplication(create_backend_app)
    started = {}
    running = []
    for name, handler in (("stock", MotoRequestHandler), ("keepalive", KeepAliveHandler)):
        server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running.append(server)
        started[name] = f"http://127.0.0.1:{server.server_address[1]}"
    yield started
    for server in running:
        server.shutdown()
        server.server_close()


def client(service: str, url: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def answer(call: Any) -> tuple[Any, ...]:
    try:
        got = call()
    except ClientError as exc:
        meta = exc.response["ResponseMetadata"]
        return ("error", meta["HTTPStatusCode"], exc.response["Error"], _headers(meta))
    meta = got.pop("ResponseMetadata")
    return ("ok", meta["HTTPStatusCode"], got, _headers(meta))


def _headers(meta: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in meta["HTTPHeaders"].items() if k not in VARYING}


def test_answers_are_the_stock_server_s(servers: dict[str, str]) -> None:
    stock_db, ka_db = client("dynamodb", servers["stock"]), client("dynamodb", servers["keepalive"])
    stock_db.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    stock_db.put_item(TableName="t", Item={"PK": {"S": "a"}, "v": {"N": "1"}, "l": {"L": [{"S": "x"}]}})
    stock_sqs, ka_sqs = client("sqs", servers["stock"]), client("sqs", servers["keepalive"])
    url = stock_sqs.create_queue(QueueName="q")["QueueUrl"]

    def calls(db: Any, sqs: Any) -> list[Any]:
        return [
            lambda: db.get_item(TableName="t", Key={"PK": {"S": "a"}}),
            lambda: db.list_tables(),
            lambda: db.get_item(TableName="missing", Key={"PK": {"S": "a"}}),
            lambda: db.put_item(TableName="t", Item={"PK": {"S": "a"}}, ConditionExpression="attribute_not_exists(PK)"),
            lambda: db.update_item(TableName="t", Key={"PK": {"S": "a"}}, UpdateExpression="SET = :v"),
            lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]),
            lambda: sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0),
        ]

    expected = [answer(c) for c in calls(stock_db, stock_sqs)]
    assert {a[0] for a in expected} == {"ok", "error"}
    assert [answer(c) for c in calls(ka_db, ka_sqs)] == expected


def test_one_connection_carries_many_requests_and_an_unread_body_does_not_spill(servers: dict[str, str]) -> None:
    port = int(servers["keepalive"].rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sockets = set()
    for body in (b"", b"a body no handler reads", b"GET /spill HTTP/1.1\r\n\r\n", b""):
        conn.request("GET", "/moto-api/data.json", body=body, headers={"Host": "localhost"})
        resp = conn.getresponse()
        assert resp.read().startswith(b"{")  # moto's answer, never the body taken for the next request
        assert resp.status == 200
        assert resp.getheader("Connection") is None
        sockets.add(id(conn.sock))
    assert len(sockets) == 1, "every request went over the one connection"


def test_an_app_that_raises_gets_werkzeug_s_500_and_the_connection_closes(servers: dict[str, str]) -> None:
    port = int(servers["keepalive"].rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/unknown-path", body=b"x", headers={"Host": "localhost"})  # moto's routing raises on it
    resp = conn.getresponse()
    assert b"Internal Server Error" in resp.read()
    assert resp.status == 500
    assert resp.getheader("Connection") == "close"


def test_the_stock_server_closes_every_connection(servers: dict[str, str]) -> None:
    port = int(servers["stock"].rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/moto-api/data.json", headers={"Host": "localhost"})
    resp = conn.getresponse()
    resp.read()
    assert resp.getheader("Connection") == "close"  # why every AWS call used to pay a connect


@pytest.mark.parametrize(
    ("headers", "length"),
    [
        ({}, 0),
        ({"Content-Length": "12"}, 12),
        ({"Content-Length": "x"}, None),
        ({"Transfer-Encoding": "chunked"}, None),
    ],
)
def test_a_body_is_read_up_front_only_when_its_length_is_known(headers: dict[str, str], length: int | None) -> None:
    assert request_length(headers) == length


HEADER_BLOCKS = [
    b"Host: localhost:5230\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\nContent-Length: 12\r\n\r\n",
    b"Authorization: AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host;x, Signature=00\r\n\r\n",
    b"A:no-space\r\nB:   \t padded  \r\nB: repeated\r\nEmpty:\r\n\r\n",
    b"\r\n",
    # Each of these takes the email package: folded, bare LF, space before the colon, no colon, 8-bit, EOF.
    b"Folded: one\r\n two\r\n\r\n",
    b"Bare: lf\n\n",
    b"Name : spaced\r\nAfter: x\r\n\r\n",
    b"not a header\r\nAfter: x\r\n\r\n",
    b"Latin: caf\xe9\r\n\r\n",
    b"Cut: short\r\n",
]


def _state(msg: Any) -> dict[str, Any]:
    """A message's attributes; defects by kind (they are instances without equality)."""
    return {**vars(msg), "defects": [type(d) for d in msg.defects]}


@pytest.mark.parametrize("block", HEADER_BLOCKS)
def test_headers_parse_to_the_email_package_s_message(block: bytes) -> None:
    ours = parse_headers(io.BytesIO(block + b"body"))
    theirs = http.client.parse_headers(io.BytesIO(block + b"body"))
    assert _state(ours) == _state(theirs)
    assert ours.items() == theirs.items()


def test_plain_headers_skip_the_email_package(monkeypatch: pytest.MonkeyPatch) -> None:
    used = []
    monkeypatch.setattr(http.client, "_parse_header_lines", lambda lines, _class: used.append(lines) or _class())
    moto_http.parse_headers(io.BytesIO(HEADER_BLOCKS[0]))
    assert used == []
    moto_http.parse_headers(io.BytesIO(b"Folded: one\r\n two\r\n\r\n"))
    assert len(used) == 1
