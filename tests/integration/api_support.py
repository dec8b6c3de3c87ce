"""Helpers for the handler, API and CLI tests: the functions' environment from template.yaml,
Function URL events, a local HTTP server in front of ``functions.api.handler``, and a
server answering with the local stack's SigV4 check (loom.local.emulator.sigv4)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from functions import api
from loom.local.emulator.sigv4 import Principal, amz_now, verify
from loom.local.lambdas.events import HttpRequest, function_url_event
from loom.template import Template, function_environment

EVENTS = Path(__file__).resolve().parents[2] / "events"


def sample_event(name: str) -> dict[str, Any]:
    with open(EVENTS / name, encoding="utf-8") as fh:
        return json.load(fh)


def environment(refs: dict[str, Any], logical_id: str) -> dict[str, str]:
    tpl = Template()
    env = function_environment(tpl.functions()[logical_id], refs, tpl)
    # The template's AWS_ENDPOINT_URL is empty outside local runs, which boto3 reads as unset;
    # here it would mask the endpoint a test points at its moto server.
    if not env.get("AWS_ENDPOINT_URL"):
        env.pop("AWS_ENDPOINT_URL", None)
    return env


def request_event(method: str, target: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The v2.0 event the local stack's HTTP server builds for this request."""
    path, _, query = target.partition("?")
    return function_url_event(HttpRequest(method, path, query, list(headers.items()), body))


def url_event(method: str, target: str, body: Any = None, *, raw: bytes | None = None) -> dict[str, Any]:
    """A Function URL v2.0 event shaped like events/url_*.json (IAM authorizer included)."""
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    event = dict(request_event(method, target, {"content-type": "application/json"}, data))
    template = sample_event("url_get_execution.json")
    event["requestContext"] = {**copy.deepcopy(template["requestContext"]), "http": event["requestContext"]["http"]}
    return event


def call(method: str, target: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
    answer = api.handler(url_event(method, target, body, raw=raw), None)
    return answer["statusCode"], json.loads(answer["body"]), answer["headers"]


class LambdaContext:
    """What the worker reads from Lambda's context object."""

    def __init__(self, seconds: float = 60.0) -> None:
        self._seconds = seconds
        self.function_name = "loom-test-worker"
        self.aws_request_id = "test-request"

    def get_remaining_time_in_millis(self) -> int:
        return int(self._seconds * 1000)


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The Lambda SQS event for messages received with ``MessageSystemAttributeNames=["All"]``."""
    template = sample_event("sqs_step_batch.json")["Records"][0]
    records = []
    for m in messages:
        record = copy.deepcopy(template)
        record.update(
            messageId=m["MessageId"],
            receiptHandle=m["ReceiptHandle"],
            body=m["Body"],
            md5OfBody=m["MD5OfBody"],
            eventSourceARN=queue_arn,
            attributes={k: v for k, v in m.get("Attributes", {}).items() if k in template["attributes"]},
        )
        records.append(record)
    return {"Records": records}


@contextmanager
def function_url_server(principal: Principal, region: str = "us-east-1") -> Iterator[str]:
    """``functions.api.handler`` behind http.server on a free port; yields its base URL.

    It answers like the local stack's AWS_IAM Function URL: the same SigV4 check
    (loom.local.emulator.sigv4), 403 with AWS's body unless signed by ``principal``.
    """

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            url = f"http://{headers.get('host')}{self.path}"
            verdict = verify(
                self.command,
                url,
                headers,
                body,
                principals={principal.access_key: principal},
                region=region,
                now=amz_now(),
            )
            if not verdict.allowed:
                status, pairs, data = verdict.answer()
                self._reply(status, dict(pairs), data)
                return
            event = dict(request_event(self.command, self.path, headers, body))
            answer = api.handler(event, None)
            self._reply(answer["statusCode"], answer.get("headers") or {}, answer.get("body", "").encode())

        def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="function-url", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Functions:
    """Invoke the three handlers in-process, each with its own environment from template.yaml."""

    def __init__(self, refs: dict[str, Any], monkeypatch: Any, **overrides: str) -> None:
        self.refs = refs
        self._monkeypatch = monkeypatch
        self._envs = {name: environment(refs, name) | overrides for name in Template().functions()}
        self.use("ControlPlaneFunction")

    def use(self, logical_id: str) -> None:
        for env in self._envs.values():
            for name in env:
                self._monkeypatch.delenv(name, raising=False)
        for name, value in self._envs[logical_id].items():
            self._monkeypatch.setenv(name, value)

    def api(self, method: str, target: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
        self.use("ControlPlaneFunction")
        status, answer, _ = call(method, target, body, raw=raw)
        return status, answer

    def worker(self, event: dict[str, Any], seconds: float = 60.0) -> dict[str, Any]:
        from functions import worker

        self.use("WorkerFunction")
        try:
            return worker.handler(event, LambdaContext(seconds))
        finally:
            self.use("ControlPlaneFunction")

    def sweeper(self, event: dict[str, Any]) -> dict[str, Any]:
        from functions import sweeper

        self.use("SweeperFunction")
        try:
            return sweeper.handler(event, LambdaContext())
        finally:
            self.use("ControlPlaneFunction")

    def receive(self, queue: str = "StepQueue", limit: int = 10) -> list[dict[str, Any]]:
        answer = self.refs["sqs"].receive_message(
            QueueUrl=self.refs[queue],
            MaxNumberOfMessages=limit,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
        )
        return answer.get("Messages", [])

    def discard(self) -> int:
        """Delete every message waiting in the step queue (as if lost); returns how many."""
        count = 0
        while messages := self.receive():
            for m in messages:
                self.refs["sqs"].delete_message(QueueUrl=self.refs["StepQueue"], ReceiptHandle=m["ReceiptHandle"])
            count += len(messages)
        return count

    def drain(self, rounds: int = 50) -> int:
        """Deliver the step queue to the worker until it is empty; returns the messages delivered."""
        delivered = 0
        for _ in range(rounds):
            messages = self.receive()
            if not messages:
                return delivered
            delivered += len(messages)
            answer = self.worker(sqs_event(messages, self.refs["StepQueue.Arn"]))
            failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
            for m in messages:
                if m["MessageId"] not in failed:
                    self.refs["sqs"].delete_message(QueueUrl=self.refs["StepQueue"], ReceiptHandle=m["ReceiptHandle"])
        raise AssertionError(f"the step queue was not empty after {rounds} rounds")

    def counts(self) -> dict[str, int]:
        """Items in the table and messages in both queues: what a rejected request must not change."""
        items = self.refs["dynamodb"].scan(TableName=self.refs["Table"], Select="COUNT")["Count"]
        out = {"items": items}
        for queue in ("StepQueue", "DeadLetterQueue"):
            attrs = self.refs["sqs"].get_queue_attributes(
                QueueUrl=self.refs[queue],
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            out[queue] = int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
        return out
