"""The local Function URL in front of a real function process, as AWS's behaves: AWS_IAM
checked before anything runs, the request framing checked before the body is read, a
failed function answered with a fixed 502, and the event and context AWS would give."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials
from freezegun import freeze_time

from engine.log import configure
from loom.client import sign
from loom.local.emulator.client import LocalApi, call
from loom.local.emulator.sigv4 import new_principal
from loom.local.lambdas.http import AuthType, FunctionUrlServer, UrlAuth
from loom.local.lambdas.package import FunctionPackage
from loom.local.lambdas.pool import FunctionPool
from tests.logs import json_lines

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
PHYSICAL = "loom-dev-control-plane"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, fake_package: FunctionPackage) -> Iterator[dict[str, Any]]:
    logs = io.StringIO()
    configure("INFO", stream=logs)
    out_path = tmp_path_factory.mktemp("fn") / "function.log"
    output = open(out_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed below
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_REGION": REGION,
        "AWS_LAMBDA_FUNCTION_NAME": PHYSICAL,
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{PHYSICAL}",
    }
    pool = FunctionPool(
        function="ControlPlaneFunction",
        handler="tests.e2e.fake_handlers.url_probe",
        env=env,
        timeout=1.5,
        output=output,
        package=fake_package,
    ).start()
    principal = new_principal()
    server = FunctionUrlServer(pool, UrlAuth.iam(REGION, principal)).start()
    try:
        yield {
            "server": server,
            "pool": pool,
            "api": LocalApi(server.url, principal.credentials(), REGION),
            "principal": principal,
            "logs": logs,
            "function_log": out_path,
        }
    finally:
        server.stop()
        pool.stop()
        output.close()
        configure("INFO")


def send(request: urllib.request.Request) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def signed(url: dict[str, Any], method: str, path: str, body: Any = None, **kw: Any) -> urllib.request.Request:
    data = b"" if body is None else json.dumps(body).encode()
    creds = kw.get("creds") or url["api"].credentials
    headers = sign(
        method, url["server"].url + path, data, {"content-type": "application/json"}, creds, kw.get("region", REGION)
    )
    return urllib.request.Request(url["server"].url + path, data=data or None, method=method, headers=headers)


def raw(url: dict[str, Any], head: str) -> str:
    """Send only request headers over a socket; the status line and headers that come back."""
    with socket.create_connection((url["server"].host, url["server"].port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.decode(errors="replace")


# ------------------------------------------------------------------ gap 1: AWS_IAM


def test_unsigned_and_wrongly_signed_requests_get_awss_403_and_never_run(url):
    before = len(url["pool"].invocations)
    status, headers, body = send(urllib.request.Request(url["server"].url + "/echo"))
    assert status == 403 and headers["x-amzn-errortype"] == "AccessDeniedException"
    assert json.loads(body)["Message"].startswith("Forbidden.")
    garbage = urllib.request.Request(url["server"].url + "/echo", headers={"Authorization": "AWS4-HMAC-SHA256 x"})
    assert send(garbage)[0] == 403
    other_key = signed(url, "GET", "/echo", creds=new_principal().credentials())
    status, headers, body = send(other_key)
    assert status == 403 and headers["x-amzn-errortype"] == "UnrecognizedClientException"
    wrong_secret = signed(url, "GET", "/echo", creds=Credentials(url["principal"].access_key, "guess"))
    assert json.loads(send(wrong_secret)[2])["message"].startswith("The request signature we calculated")
    status, _, body = send(signed(url, "GET", "/echo", region="eu-west-1"))
    assert status == 403 and "valid region" in json.loads(body)["message"]
    with freeze_time(datetime.now(UTC) - timedelta(minutes=10)):
        stale = signed(url, "GET", "/echo")
    status, _, body = send(stale)
    assert status == 403 and json.loads(body)["message"].startswith("Signature expired")
    assert len(url["pool"].invocations) == before  # nothing reached the function
    reasons = [e["reason"] for e in json_lines(url["logs"].getvalue()) if e.get("event") == "function_url.forbidden"]
    assert {"missing", "malformed", "unknown_key", "mismatch", "wrong_region", "stale"} <= set(reasons)


def test_a_signed_request_runs_with_the_signer_in_the_event(url):
    status, seen = call(url["api"], "POST", "/echo?a=1", {"hello": "world"})
    assert status == 200
    event = seen["event"]
    assert event["requestContext"]["authorizer"] == {"iam": url["principal"].iam_authorizer()}
    assert event["requestContext"]["authentication"] is None
    headers = event["headers"]
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-port"] == str(url["server"].port)
    assert re.fullmatch(r"Root=1-[0-9a-f]{8}-[0-9a-f]{24}", headers["x-amzn-trace-id"])
    # The function's _X_AMZN_TRACE_ID continues the trace the front end started.
    assert seen["env"]["_X_AMZN_TRACE_ID"].startswith(headers["x-amzn-trace-id"] + ";Parent=")


def test_on_every_interface_the_control_plane_still_demands_a_signature(url):
    public = FunctionUrlServer(url["pool"], UrlAuth.iam(REGION, url["principal"]), host="0.0.0.0").start()
    try:
        before = len(url["pool"].invocations)
        status, _, body = send(urllib.request.Request(f"http://127.0.0.1:{public.port}/echo"))
        assert status == 403 and json.loads(body)["Message"].startswith("Forbidden.")
        assert len(url["pool"].invocations) == before
        api = LocalApi(f"http://127.0.0.1:{public.port}", url["principal"].credentials(), REGION)
        assert call(api, "GET", "/echo")[0] == 200
    finally:
        public.stop()


def test_auth_type_none_is_refused_on_a_public_interface():
    pool: Any = type("P", (), {"function": "F"})()
    with pytest.raises(ValueError, match="AuthType NONE"):
        FunctionUrlServer(pool, UrlAuth(AuthType.NONE, REGION), host="0.0.0.0")
    with pytest.raises(ValueError, match="principal"):
        FunctionUrlServer(pool, UrlAuth(AuthType.AWS_IAM, REGION), host="127.0.0.1")


# ------------------------------------------------------------------ gap 4: responses


def test_a_failing_function_answers_502_with_a_fixed_body_and_logs_the_details(url):
    status, _, body = send(signed(url, "GET", "/fail"))
    assert (status, body) == (502, b"Internal Server Error")
    assert "ValueError" not in body.decode()
    log = Path(url["function_log"]).read_text()
    assert "[ERROR] ValueError: detail only the log may see" in log and "Traceback" in log


def test_a_timeout_answers_the_same_fixed_502(url):
    status, _, body = send(signed(url, "GET", "/sleep"))
    assert (status, body) == (502, b"Internal Server Error")


def test_multi_value_headers_are_dropped_with_a_warning(url):
    answer = {"statusCode": 200, "headers": {"x-one": "1"}, "multiValueHeaders": {"x-many": ["a", "b"]}, "body": "ok"}
    status, headers, body = send(signed(url, "POST", "/respond", answer))
    assert (status, body, headers["x-one"]) == (200, b"ok", "1")
    assert "x-many" not in headers
    warned = [e for e in json_lines(url["logs"].getvalue()) if e.get("event") == "function_url.response_fields_ignored"]
    assert warned and warned[-1]["fields"] == ["multiValueHeaders"]


# ------------------------------------------------------------------ gap 7: context and environment


def test_context_and_environment_name_the_deployed_function(url):
    first = call(url["api"], "GET", "/echo")[1]
    second = call(url["api"], "GET", "/echo")[1]
    ctx = first["context"]
    assert ctx["function_name"] == PHYSICAL == first["env"]["AWS_LAMBDA_FUNCTION_NAME"]
    assert ctx["invoked_function_arn"] == f"arn:aws:lambda:{REGION}:123456789012:function:{PHYSICAL}"
    assert ctx["log_group_name"] == f"/aws/lambda/{PHYSICAL}"
    assert ctx["log_stream_name"] == first["env"]["AWS_LAMBDA_LOG_STREAM_NAME"]
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2}/\[\$LATEST\][0-9a-f]{32}", ctx["log_stream_name"])
    assert first["env"]["_X_AMZN_TRACE_ID"] != second["env"]["_X_AMZN_TRACE_ID"]  # per invocation


# ------------------------------------------------------------------ issue 14: framing before reading


def test_a_body_method_without_content_length_is_refused(url):
    answer = raw(url, "POST /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith("HTTP/1.1 411")
    chunked = raw(url, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert chunked.startswith("HTTP/1.1 411")


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", "5, 6"])
def test_a_malformed_content_length_is_a_400(url, value):
    assert raw(url, f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {value}\r\n\r\n").startswith("HTTP/1.1 400")


def test_a_100_mb_body_is_refused_from_its_headers_without_being_read(url):
    before = len(url["pool"].invocations)
    t0 = time.monotonic()
    # Only the headers are sent: a server that tried to read the body would wait, not answer.
    answer = raw(url, f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {100 * 1024 * 1024}\r\n\r\n")
    assert answer.startswith("HTTP/1.1 413")
    assert "connection: close" in answer.lower()
    assert time.monotonic() - t0 < 5
    assert len(url["pool"].invocations) == before


# ------------------------------------------------------------------ issue 20: no open doors


@pytest.mark.parametrize("value", ["\u00b2", "\u00b9", "1\u00b3"])
def test_a_content_length_of_non_ascii_digits_is_a_400_before_the_signature(url, value):
    # '²'.isdigit() is True and int('²') raises: the request got no answer and a traceback.
    # (http.server reads header bytes as Latin-1, so the byte 0xB2 is '²'.)
    before = len(url["pool"].invocations)
    head = f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {value}\r\n\r\n".encode("latin-1")
    with socket.create_connection((url["server"].host, url["server"].port), timeout=10) as sock:
        sock.sendall(head)
        chunks = []
        while chunk := sock.recv(4096):  # the server closes after a framing error
            chunks.append(chunk)
    answer = b"".join(chunks).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 400")
    assert '{"Message":"Bad Request"}' in answer
    assert len(url["pool"].invocations) == before


def test_a_fragment_in_the_request_target_is_refused(url):
    # The signature covers the path and query only; what follows '#' would ride along unsigned.
    before = len(url["pool"].invocations)
    request = signed(url, "GET", "/echo")
    headers = "".join(f"{k}: {v}\r\n" for k, v in request.header_items())
    host = f"{url['server'].host}:{url['server'].port}"
    answer = raw(url, f"GET /echo#/executions HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n")
    assert answer.startswith("HTTP/1.1 400")
    assert len(url["pool"].invocations) == before
    assert send(signed(url, "GET", "/echo"))[0] == 200  # the same request without the fragment runs


def test_a_body_resent_under_a_captured_payload_hash_is_refused(url):
    original = json.dumps({"hello": "world"}).encode()
    headers = sign(
        "POST",
        url["server"].url + "/echo",
        original,
        {"content-type": "application/json", "x-amz-content-sha256": hashlib.sha256(original).hexdigest()},
        url["api"].credentials,
        REGION,
    )
    ok = urllib.request.Request(url["server"].url + "/echo", data=original, method="POST", headers=headers)
    assert send(ok)[0] == 200
    before = len(url["pool"].invocations)
    forged = urllib.request.Request(url["server"].url + "/echo", data=b'{"evil":1}', method="POST", headers=headers)
    status, answer_headers, _ = send(forged)
    assert status == 403 and answer_headers["x-amzn-errortype"] == "InvalidSignatureException"
    unsigned = sign(
        "POST",
        url["server"].url + "/echo",
        b"{}",
        {"content-type": "application/json", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
        url["api"].credentials,
        REGION,
    )
    request = urllib.request.Request(url["server"].url + "/echo", data=b"{}", method="POST", headers=unsigned)
    assert send(request)[0] == 403
    assert len(url["pool"].invocations) == before


def test_a_refused_callback_leaves_no_token_in_the_log(url):
    token = "lcb1.secret-token-value-" + os.urandom(8).hex()
    request = urllib.request.Request(url["server"].url + f"/callbacks/{token}/succeed", data=b"{}", method="POST")
    assert send(request)[0] == 403
    lines = [e for e in json_lines(url["logs"].getvalue()) if e.get("event") == "function_url.forbidden"]
    assert any(e.get("path") == "/callbacks/<token>/succeed" for e in lines)
    assert token not in url["logs"].getvalue()
