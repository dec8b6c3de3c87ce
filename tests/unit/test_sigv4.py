"""The CLI's SigV4 signing for Function URLs, against botocore's own signer and against the
algorithm written out by hand (AWS's published steps), at a fixed time."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from urllib.parse import quote

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from freezegun import freeze_time

from loom import client, stackfile
from loom.client import ClientError, region_from_url, resolve_target, sign
from loom.local.emulator.sigv4 import new_principal

pytestmark = pytest.mark.unit

URL = "https://abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws"
CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
TOKEN_CREDS = Credentials("ASIAEXAMPLE", "secret/with+chars", "FwoGZXIvYXdzEXAMPLETOKEN")
NOW = "2026-03-04T05:06:07Z"


def botocore_headers(method: str, url: str, body: bytes, headers: dict[str, str], creds: Credentials) -> dict[str, str]:
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(creds, "lambda", "eu-west-1").add_auth(request)
    return dict(request.headers.items())


@pytest.mark.parametrize(
    ("method", "path", "body", "headers"),
    [
        ("GET", "/executions/order-1", b"", {"accept": "application/json"}),
        ("GET", "/executions?limit=5&status=RUNNING&workflow=order_fulfillment", b"", {"accept": "application/json"}),
        (
            "POST",
            "/executions",
            b'{"workflow":"pipeline","input":{"note":"caf\xc3\xa9"}}',
            {"accept": "application/json", "content-type": "application/json"},
        ),
        ("POST", "/executions/order-1/cancel", b"", {"accept": "application/json"}),
        ("POST", "/dlq/redrive?limit=10", b"", {}),
    ],
)
@pytest.mark.parametrize("creds", [CREDS, TOKEN_CREDS], ids=["keys", "session-token"])
def test_signing_matches_botocore(
    method: str, path: str, body: bytes, headers: dict[str, str], creds: Credentials
) -> None:
    with freeze_time(NOW):
        ours = sign(method, URL + path, body, headers, creds, "eu-west-1")
        theirs = botocore_headers(method, URL + path, body, dict(headers), creds)
    assert ours["Authorization"] == theirs["Authorization"]
    assert ours == theirs
    assert ours["X-Amz-Date"] == "20260304T050607Z"
    assert "/20260304/eu-west-1/lambda/aws4_request" in ours["Authorization"]
    if creds.token:
        assert ours["X-Amz-Security-Token"] == creds.token


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def test_signature_follows_the_published_algorithm() -> None:
    """Recompute the signature from AWS's documented steps, without botocore."""
    body = b'{"workflow":"pipeline"}'
    host = URL.removeprefix("https://")
    with freeze_time(NOW):
        headers = sign(
            "POST", URL + "/executions?b=2&a=1", body, {"content-type": "application/json"}, CREDS, "eu-west-1"
        )
    amz_date, day = "20260304T050607Z", "20260304"
    canonical_headers = f"content-type:application/json\nhost:{host}\nx-amz-date:{amz_date}\n"
    signed = "content-type;host;x-amz-date"
    canonical_request = "\n".join(
        [
            "POST",
            quote("/executions"),
            "a=1&b=2",  # sorted by name
            canonical_headers,
            signed,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/eu-west-1/lambda/aws4_request"
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + CREDS.secret_key).encode(), day)
    for part in ("eu-west-1", "lambda", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    assert headers["Authorization"] == (
        f"AWS4-HMAC-SHA256 Credential={CREDS.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )


def test_a_different_time_gives_a_different_signature() -> None:
    with freeze_time(NOW):
        first = sign("GET", URL + "/workflows", b"", {}, CREDS, "eu-west-1")["Authorization"]
    with freeze_time("2026-03-04T05:06:08Z"):
        second = sign("GET", URL + "/workflows", b"", {}, CREDS, "eu-west-1")["Authorization"]
    assert first != second


def test_region_comes_from_the_function_url() -> None:
    assert region_from_url(URL + "/") == "eu-west-1"
    assert region_from_url("https://x.lambda-url.ap-southeast-2.on.aws") == "ap-southeast-2"
    assert region_from_url("http://127.0.0.1:8080") is None


def test_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    with pytest.raises(ClientError, match=r"no local stack is running: run `loom up`, or pass --url"):
        resolve_target(None, None)
    stackfile.write({"control_plane_url": "http://127.0.0.1:9999/", "region": "us-east-1"})
    with pytest.raises(ClientError, match="no control plane credentials"):
        resolve_target(None, None)
    principal = new_principal()
    stackfile.write(
        {
            "control_plane_url": "http://127.0.0.1:9999/",
            "region": "us-east-1",
            "control_plane_credentials": principal.to_json(),
        }
    )
    local = resolve_target(None, None)
    assert (local.url, local.signed, local.region) == ("http://127.0.0.1:9999", True, "us-east-1")
    assert local.credentials is not None and local.credentials.access_key == principal.access_key
    assert stackfile.path().stat().st_mode & 0o077 == 0  # it holds a secret: owner-only
    # `loom up --emulator aws`: the deployed URL, signed with the default credential chain.
    stackfile.write({"emulator": "aws", "control_plane_url": URL + "/", "region": "eu-west-1"})
    aws = resolve_target(None, None)
    assert (aws.url, aws.signed, aws.region, aws.credentials) == (URL, True, "eu-west-1", None)
    deployed = resolve_target(URL + "/", None)
    assert (deployed.url, deployed.signed, deployed.region) == (URL, True, "eu-west-1")
    assert resolve_target("http://127.0.0.1:1/", "us-west-2").region == "us-west-2"
    with pytest.raises(ClientError, match="absolute URL"):
        resolve_target("not-a-url", None)
    assert client.SERVICE == "lambda"
