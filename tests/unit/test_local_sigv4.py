"""The local Function URL's AWS_IAM check (loom.local.emulator.sigv4): what Lambda accepts, and what it
answers for everything else. Requests are signed by the CLI's own signer (loom.client.sign)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.credentials import Credentials
from freezegun import freeze_time

from loom.client import sign
from loom.local.emulator.sigv4 import AuthFailure, Principal, new_principal, verify

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:5231"
REGION = "us-east-1"
NOW = datetime(2026, 12, 1, 1, 2, 3, tzinfo=UTC)
PRINCIPAL = Principal("AKIALOCALEXAMPLE0001", "local-secret", "AIDALOCALEXAMPLE00001")
BODY = b'{"workflow":"pipeline","input":{}}'


def signed(
    method: str = "POST",
    path: str = "/executions?limit=5&status=RUNNING",
    body: bytes = BODY,
    *,
    creds: Credentials | None = None,
    region: str = REGION,
    service: str = "lambda",
    at: datetime = NOW,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    with freeze_time(at):
        headers = sign(
            method,
            URL + path,
            body,
            {"content-type": "application/json", **(extra or {})},
            creds or PRINCIPAL.credentials(),
            region,
            service,
        )
    # What the server sees: lower-cased names, and the Host header urllib adds.
    return {k.lower(): v for k, v in headers.items()} | {"host": "127.0.0.1:5231"}


def check(
    headers: dict[str, str],
    method: str = "POST",
    path: str = "/executions?limit=5&status=RUNNING",
    body: bytes = BODY,
    now: datetime = NOW,
):
    return verify(
        method, URL + path, headers, body, principals={PRINCIPAL.access_key: PRINCIPAL}, region=REGION, now=now
    )


def test_a_request_signed_by_the_stacks_principal_passes():
    verdict = check(signed())
    assert verdict.allowed and verdict.principal == PRINCIPAL
    get = check(signed("GET", "/executions/a%2Fb", b""), "GET", "/executions/a%2Fb", b"")
    assert get.allowed


def test_the_authorizer_is_the_signers_identity():
    iam = PRINCIPAL.iam_authorizer()
    assert iam == {
        "accessKey": "AKIALOCALEXAMPLE0001",
        "accountId": "123456789012",
        "callerId": "AIDALOCALEXAMPLE00001",
        "cognitoIdentity": None,
        "principalOrgId": None,
        "userArn": "arn:aws:iam::123456789012:user/loom-local",
        "userId": "AIDALOCALEXAMPLE00001",
    }


@pytest.mark.parametrize(
    ("headers", "failure"),
    [
        ({"host": "127.0.0.1:5231"}, AuthFailure.MISSING),
        ({"host": "x", "authorization": "Bearer abc"}, AuthFailure.MALFORMED),
        ({"host": "x", "authorization": "AWS4-HMAC-SHA256 garbage"}, AuthFailure.MALFORMED),
        (signed(creds=Credentials("AKIAANOTHERKEY000001", "local-secret")), AuthFailure.UNKNOWN_KEY),
        (signed(creds=Credentials(PRINCIPAL.access_key, "wrong-secret")), AuthFailure.MISMATCH),
        (signed(service="execute-api"), AuthFailure.WRONG_SERVICE),
        (signed(region="eu-west-1"), AuthFailure.WRONG_REGION),
        (signed(at=NOW - timedelta(minutes=6)), AuthFailure.STALE),
        (signed(at=NOW + timedelta(minutes=6)), AuthFailure.STALE),
        (signed(creds=Credentials(PRINCIPAL.access_key, "local-secret", "a-token")), AuthFailure.UNKNOWN_KEY),
    ],
    ids=[
        "unsigned",
        "bearer",
        "garbage",
        "other-key",
        "wrong-secret",
        "wrong-service",
        "wrong-region",
        "stale",
        "future",
        "token-for-long-term-key",
    ],
)
def test_everything_else_is_refused(headers, failure):
    verdict = check(headers)
    assert not verdict.allowed and verdict.failure is failure
    status, _, _ = verdict.answer()
    assert status == 403


def test_a_signature_binds_the_body_the_path_and_the_query():
    headers = signed()
    assert check(headers, body=b'{"workflow":"other"}').failure is AuthFailure.MISMATCH
    assert check(headers, path="/executions?limit=6&status=RUNNING").failure is AuthFailure.MISMATCH
    assert check(headers, path="/dlq/redrive?limit=5&status=RUNNING").failure is AuthFailure.MISMATCH
    assert check(headers, method="PUT").failure is AuthFailure.MISMATCH


def test_four_minutes_of_clock_skew_is_accepted():
    assert check(signed(at=NOW - timedelta(minutes=4))).allowed
    assert check(signed(at=NOW + timedelta(minutes=4))).allowed


def test_the_answers_are_aws_bodies():
    unsigned = check({"host": "x"}).answer()
    assert unsigned[1] == [("content-type", "application/json"), ("x-amzn-ErrorType", "AccessDeniedException")]
    assert json.loads(unsigned[2]) == {
        "Message": "Forbidden. For troubleshooting Function URL authorization issues, see: "
        "https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"
    }
    mismatch = check(signed(creds=Credentials(PRINCIPAL.access_key, "nope"))).answer()
    assert ("x-amzn-ErrorType", "InvalidSignatureException") in mismatch[1]
    assert json.loads(mismatch[2])["message"].startswith("The request signature we calculated does not match")
    stale = check(signed(at=NOW - timedelta(minutes=6))).answer()
    assert json.loads(stale[2])["message"] == (
        "Signature expired: 20261201T005603Z is now earlier than 20261201T005703Z (20261201T010203Z - 5 min.)"
    )
    unknown = check(signed(creds=Credentials("AKIAANOTHERKEY000001", "x"))).answer()
    assert ("x-amzn-ErrorType", "UnrecognizedClientException") in unknown[1]


def test_each_stack_gets_its_own_secret_principal():
    first, second = new_principal(), new_principal()
    assert first.access_key != second.access_key and first.secret_key != second.secret_key
    assert first.access_key.startswith("AKIA") and len(first.access_key) == 20
    assert first.user_id.startswith("AIDA")
    assert Principal.from_json(first.to_json()) == first


def test_a_signed_payload_hash_binds_the_body():
    # botocore's canonical request trusts x-amz-content-sha256: signed over the header, a captured
    # request resent with another body verified before. Lambda hashes the body it received.
    headers = signed(extra={"x-amz-content-sha256": hashlib.sha256(BODY).hexdigest()})
    assert "x-amz-content-sha256" in headers["authorization"]
    assert check(headers).allowed
    other = check(headers, body=b'{"workflow":"evil"}')
    assert other.failure is AuthFailure.PAYLOAD_MISMATCH
    status, answer_headers, body = other.answer()
    assert status == 403 and ("x-amzn-ErrorType", "InvalidSignatureException") in answer_headers
    assert json.loads(body)["message"].startswith("The request signature we calculated does not match")


@pytest.mark.parametrize("body", [BODY, b"", b'{"workflow":"evil"}'])
def test_an_unsigned_payload_is_refused_whatever_the_body(body):
    # Lambda Function URLs take no UNSIGNED-PAYLOAD (S3 does): the signature must cover the body.
    headers = signed(body=body, extra={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    verdict = check(headers, body=body)
    assert verdict.failure is AuthFailure.PAYLOAD_MISMATCH and verdict.answer()[0] == 403
