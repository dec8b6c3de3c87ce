"""No secret reaches a log: signed requests' credentials and cookies are redacted wherever a
request or event is logged, and a fresh function process logs JSON from its first line
(structlog's default renderer would print a failure's local variables, headers included)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.log import configure, get_logger, redact
from tests.logs import json_lines

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("AKIASECRETKEY", "deadbeefsignature", "session-token-value", "topsecret-cookie")
HEADERS = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=AKIASECRETKEY/20261201/us-east-1/lambda/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=deadbeefsignature",
    "X-Amz-Security-Token": "session-token-value",
    "cookie": "session=topsecret-cookie",
    "content-type": "application/json",
}


def test_secret_headers_are_redacted_at_any_depth():
    event = {"headers": {k.lower(): v for k, v in HEADERS.items()}, "cookies": ["session=topsecret-cookie"]}
    clean = redact({"request": {"headers": HEADERS}, "events": [event]})
    text = json.dumps(clean)
    assert not any(secret in text for secret in SECRETS)
    assert clean["request"]["headers"]["content-type"] == "application/json"
    assert clean["events"][0]["headers"]["authorization"] == "[redacted]"


def test_the_json_logger_redacts_whatever_logs_a_request():
    out = io.StringIO()
    configure("INFO", stream=out)
    try:
        get_logger().info("request.seen", headers=HEADERS, lambda_event={"headers": HEADERS})
    finally:
        configure("WARNING")
    assert not any(secret in out.getvalue() for secret in SECRETS)
    (line,) = json_lines(out.getvalue())
    assert line["headers"]["content-type"] == "application/json"


FIRST_FAILURE = """
from functions import api
from loom.local.lambdas.events import HttpRequest, function_url_event

def broken(request):
    raise RuntimeError("the first request of this process fails")

api.ROUTER.dispatch = broken
headers = {headers!r}
event = function_url_event(HttpRequest("GET", "/workflows", "", list(headers.items()), b""))
print("STATUS", api.handler(event, None)["statusCode"])
"""


def test_a_fresh_processs_first_failure_is_logged_as_json_without_locals():
    script = FIRST_FAILURE.format(headers=HEADERS)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    output = done.stdout + done.stderr
    assert "STATUS 500" in done.stdout, output
    assert not any(secret in output for secret in SECRETS), output
    failed = [line for line in json_lines(done.stdout) if line.get("event") == "api.failed"]
    assert failed and "RuntimeError" in failed[0]["exception"]
    assert "locals" not in output
