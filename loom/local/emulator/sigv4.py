"""AWS_IAM for the local Function URL: check a request's SigV4 signature as Lambda does.

The check is a pure decision (:func:`verify` returns a :class:`Verdict`); the server acts
on it. botocore's own signer computes the expected signature, so the local check and the
CLI's signing (loom.client.sign) share one canonicalisation and no crypto is hand-written.

Lambda accepts a request signed for service ``lambda`` in the URL's region, by a key IAM
knows, within five minutes of its clock. Locally IAM knows one principal: the key pair the
stack creates at start (:func:`new_principal`) and writes to the stack file for the CLI and
the tools. Anything else answers 403 with the body AWS answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SERVICE = "lambda"
ALGORITHM = "AWS4-HMAC-SHA256"
ACCOUNT_ID = "123456789012"
MAX_SKEW = timedelta(minutes=5)  # AWS refuses a signature dated further than this from its clock
USER_NAME = "loom-local"
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Principal:
    """The IAM user the local stack knows: what Lambda would look the access key up to."""

    access_key: str
    secret_key: str
    user_id: str
    account_id: str = ACCOUNT_ID
    user_name: str = USER_NAME
    session_token: str | None = None  # temporary credentials: the request must carry this token

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{self.account_id}:user/{self.user_name}"

    def credentials(self) -> Credentials:
        return Credentials(self.access_key, self.secret_key, self.session_token)

    def to_json(self) -> dict[str, str]:
        return {
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "user_id": self.user_id,
            "user_arn": self.arn,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Principal:
        return cls(str(data["access_key_id"]), str(data["secret_access_key"]), str(data["user_id"]))

    def iam_authorizer(self) -> dict[str, Any]:
        """``requestContext.authorizer.iam`` as a Function URL fills it for an IAM user."""
        return {
            "accessKey": self.access_key,
            "accountId": self.account_id,
            "callerId": self.user_id,
            "cognitoIdentity": None,
            "principalOrgId": None,
            "userArn": self.arn,
            "userId": self.user_id,
        }


def new_principal() -> Principal:
    """A fresh key pair, shaped like an IAM user's (AKIA..., AIDA...), secret to this stack."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    access = "AKIA" + "".join(secrets.choice(alphabet) for _ in range(16))
    user = "AIDA" + "".join(secrets.choice(alphabet) for _ in range(17))
    return Principal(access, secrets.token_urlsafe(30), user)


class AuthFailure(Enum):
    """Why a request is refused; each is answered with AWS's own error type and message."""

    MISSING = "missing"  # no Authorization header at all
    MALFORMED = "malformed"  # an Authorization header that is not SigV4
    UNKNOWN_KEY = "unknown_key"  # an access key IAM does not know
    WRONG_SERVICE = "wrong_service"
    WRONG_REGION = "wrong_region"
    STALE = "stale"  # X-Amz-Date more than five minutes from the server's clock
    MISMATCH = "mismatch"  # the signature does not match (wrong secret, altered request)
    # x-amz-content-sha256 is not the body's hash (UNSIGNED-PAYLOAD included): Lambda signs the
    # body it received, so the signature over a claimed hash cannot match it.
    PAYLOAD_MISMATCH = "payload_mismatch"


# (x-amzn-ErrorType, body) per failure. Unsigned requests get the Function URL's own body; the
# others are the SigV4 errors every AWS endpoint answers (InvalidSignatureException etc.).
_FORBIDDEN = (
    "Forbidden. For troubleshooting Function URL authorization issues, see: "
    "https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"
)
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)
_ANSWERS: dict[AuthFailure, tuple[str, str, str]] = {
    AuthFailure.MISSING: ("AccessDeniedException", "Message", _FORBIDDEN),
    AuthFailure.MALFORMED: (
        "IncompleteSignatureException",
        "message",
        "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters.",
    ),
    AuthFailure.UNKNOWN_KEY: (
        "UnrecognizedClientException",
        "message",
        "The security token included in the request is invalid.",
    ),
    AuthFailure.WRONG_SERVICE: (
        "InvalidSignatureException",
        "message",
        f"Credential should be scoped to correct service: '{SERVICE}'. ",
    ),
    AuthFailure.WRONG_REGION: (
        "InvalidSignatureException",
        "message",
        "Credential should be scoped to a valid region. ",
    ),
    AuthFailure.STALE: ("InvalidSignatureException", "message", "Signature expired or not yet current."),
    AuthFailure.MISMATCH: ("InvalidSignatureException", "message", _MISMATCH),
    AuthFailure.PAYLOAD_MISMATCH: ("InvalidSignatureException", "message", _MISMATCH),
}


@dataclass(frozen=True)
class Verdict:
    principal: Principal | None = None
    failure: AuthFailure | None = None
    detail: str | None = None  # a message AWS words per request (the expired signature's times)

    @property
    def allowed(self) -> bool:
        return self.principal is not None and self.failure is None

    def answer(self) -> tuple[int, list[tuple[str, str]], bytes]:
        """The 403 AWS answers for this failure: status, headers, body."""
        assert self.failure is not None
        error_type, key, message = _ANSWERS[self.failure]
        message = self.detail or message
        headers = [("content-type", "application/json"), ("x-amzn-ErrorType", error_type)]
        return 403, headers, json.dumps({key: message}, separators=(",", ":")).encode()


def _parse_authorization(value: str) -> dict[str, str] | None:
    if not value.startswith(ALGORITHM + " "):
        return None
    parts: dict[str, str] = {}
    for item in value[len(ALGORITHM) + 1 :].split(","):
        name, sep, val = item.strip().partition("=")
        if not sep:
            return None
        parts[name] = val
    if not {"Credential", "SignedHeaders", "Signature"} <= set(parts):
        return None
    if len(parts["Credential"].split("/")) != 5:
        return None
    return parts


def verify(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    principals: Mapping[str, Principal],
    region: str,
    now: datetime,
) -> Verdict:
    """Whether ``headers`` (names lower-cased) carry a valid SigV4 signature for this request.

    ``url`` is the request as the client addressed it (``http://<Host header><raw path>``):
    the signature covers the raw path and query exactly as sent.
    """
    auth = headers.get("authorization")
    if not auth:
        return Verdict(failure=AuthFailure.MISSING)
    parts = _parse_authorization(auth)
    if parts is None:
        return Verdict(failure=AuthFailure.MALFORMED)
    key, day, scope_region, service, terminal = parts["Credential"].split("/")
    principal = principals.get(key)
    if principal is None or headers.get("x-amz-security-token") != principal.session_token:
        return Verdict(failure=AuthFailure.UNKNOWN_KEY)
    if service != SERVICE or terminal != "aws4_request":
        return Verdict(failure=AuthFailure.WRONG_SERVICE)
    if scope_region != region:
        return Verdict(failure=AuthFailure.WRONG_REGION)
    signed = parts["SignedHeaders"].split(";")
    amz_date = headers.get("x-amz-date", "")
    if "host" not in signed or "x-amz-date" not in signed or any(h not in headers for h in signed):
        return Verdict(failure=AuthFailure.MISMATCH)
    try:
        moment = datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        return Verdict(failure=AuthFailure.MALFORMED)
    if not amz_date.startswith(day):
        return Verdict(failure=AuthFailure.MISMATCH)
    if abs(moment - now) > MAX_SKEW:
        return Verdict(failure=AuthFailure.STALE, detail=_stale_message(moment, now))
    if not _payload_hash_matches(headers.get("x-amz-content-sha256"), body):
        return Verdict(failure=AuthFailure.PAYLOAD_MISMATCH)
    expected = _signature(method, url, {h: headers[h] for h in signed}, body, principal, scope_region, amz_date)
    if not hmac.compare_digest(expected, parts["Signature"]):
        return Verdict(failure=AuthFailure.MISMATCH)
    return Verdict(principal=principal)


def _payload_hash_matches(claimed: str | None, body: bytes) -> bool:
    """botocore's canonical request takes x-amz-content-sha256 at its word; Lambda hashes the body
    it received (and takes no UNSIGNED-PAYLOAD), so a claim must be this body's hash."""
    if claimed is None:
        return True
    return hmac.compare_digest(claimed.strip().lower().encode(), hashlib.sha256(body).hexdigest().encode())


def _signature(
    method: str, url: str, signed: Mapping[str, str], body: bytes, principal: Principal, region: str, amz_date: str
) -> str:
    # Only the headers the client signed go in, so botocore's canonical request is the client's.
    request = AWSRequest(method=method.upper(), url=url, data=body, headers=dict(signed))
    request.context["timestamp"] = amz_date
    token = signed.get("x-amz-security-token")
    signer = SigV4Auth(Credentials(principal.access_key, principal.secret_key, token), SERVICE, region)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def _stale_message(moment: datetime, now: datetime) -> str:
    if moment < now:
        return (
            f"Signature expired: {moment:{_AMZ_DATE}} is now earlier than "
            f"{now - MAX_SKEW:{_AMZ_DATE}} ({now:{_AMZ_DATE}} - 5 min.)"
        )
    return (
        f"Signature not yet current: {moment:{_AMZ_DATE}} is still later than "
        f"{now + MAX_SKEW:{_AMZ_DATE}} ({now:{_AMZ_DATE}} + 5 min.)"
    )


def amz_now() -> datetime:
    return datetime.now(UTC)
