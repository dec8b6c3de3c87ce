"""HTTP client of the control plane: a deployed Function URL (SigV4-signed) or the local stack.

A Function URL with ``AuthType: AWS_IAM`` accepts only requests signed with SigV4 for
service ``lambda``; botocore's signer does that with the default credential chain.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from loom import stackfile

SERVICE = "lambda"
# https://<url-id>.lambda-url.<region>.on.aws/
URL_REGION = re.compile(r"\.lambda-url\.([a-z0-9-]+)\.on\.aws$")


class ClientError(Exception):
    """Anything that kept a request from getting an answer (no target, no credentials, no connection)."""


class ApiError(Exception):
    """The control plane answered with an error."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.body = status, code, message, body


def region_from_url(url: str) -> str | None:
    match = URL_REGION.search(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def sign(
    method: str,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    credentials: Credentials,
    region: str,
    service: str = SERVICE,
) -> dict[str, str]:
    """The headers to send: ``headers`` plus X-Amz-Date, the token if any, and Authorization."""
    request = AWSRequest(method=method.upper(), url=url, data=body, headers=dict(headers))
    SigV4Auth(credentials, service, region).add_auth(request)
    return dict(request.headers.items())


@dataclass(frozen=True)
class Target:
    url: str
    signed: bool
    region: str | None = None
    credentials: Credentials | None = None  # the local stack's own principal; None: the default chain


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 or localhost: a request there never leaves the machine."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_signable(url: str) -> None:
    """A signed request goes over HTTPS; plain HTTP only to loopback (a local stack, a test server).

    Over plain HTTP anyone on the path reads the Authorization header and the session token,
    and can replay the signed request for the minutes it stays valid.
    """
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname)):
        return
    raise ClientError(
        f"refusing to send a signed request to {url}: use https:// (plain http:// only to 127.0.0.1, ::1 or localhost)"
    )


def resolve_target(url: str | None, region: str | None) -> Target:
    """``--url`` if given, else the local stack's control plane; both are signed (AuthType AWS_IAM).

    The local stack checks signatures against the principal it wrote to the stack file.
    """
    if url:
        if not urlsplit(url).scheme or not urlsplit(url).netloc:
            raise ClientError(
                f"--url must be an absolute URL like https://<id>.lambda-url.<region>.on.aws/, not {url!r}"
            )
        check_signable(url)
        region = region or region_from_url(url) or botocore.session.get_session().get_config_variable("region")
        if not region:
            raise ClientError("cannot tell the region from the URL: pass --region")
        return Target(url.rstrip("/"), signed=True, region=region)
    stack = stackfile.read()
    if not stack or not stack.get("control_plane_url"):
        raise ClientError(stackfile.no_stack_message())
    if not stackfile.supervisor_running(stack):
        raise ClientError(stackfile.not_running_message(stack))
    url = str(stack["control_plane_url"]).rstrip("/")
    if stack.get("emulator") == "aws":  # `loom up --emulator aws`: the deployed URL, the default chain
        return Target(url, signed=True, region=stack.get("region") or region_from_url(url))
    stored = stack.get("control_plane_credentials")
    if not stored:
        raise ClientError("the stack file has no control plane credentials: restart the stack with `loom up`")
    try:
        creds = Credentials(str(stored["access_key_id"]), str(stored["secret_access_key"]))
    except (KeyError, TypeError):
        raise ClientError("the stack file's control plane credentials are unreadable: restart `loom up`") from None
    return Target(url, signed=True, region=stack.get("region"), credentials=creds)


class ControlPlane:
    def __init__(self, target: Target, *, timeout: float = 30.0, credentials: Credentials | None = None) -> None:
        self.target = target
        self.timeout = timeout
        self._credentials = credentials or target.credentials

    def _creds(self) -> Credentials:
        if self._credentials is None:
            found = botocore.session.get_session().get_credentials()
            if found is None:
                raise ClientError("no AWS credentials found (environment, profile or instance role) to sign with")
            self._credentials = found
        # Refreshable credentials (SSO, roles) hand out a consistent snapshot.
        frozen = self._credentials.get_frozen_credentials()
        if frozen.access_key is None or frozen.secret_key is None:
            raise ClientError("the AWS credentials found have no access key or secret key to sign with")
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    def request(
        self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.target.url + path + (f"?{urlencode(params)}" if params else "")
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers = {"accept": "application/json"}
        if body is not None:
            headers["content-type"] = "application/json"
        opener = _OPENER
        if self.target.signed:
            check_signable(url)
            headers = sign(method, url, data, headers, self._creds(), self.target.region or "")
            opener = _SIGNED_OPENER
        req = urllib.request.Request(url, data=data if body is not None else None, method=method, headers=headers)
        try:
            with opener.open(req, timeout=self.timeout) as answer:
                return answer.status, _decode(answer.read())
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400 and self.target.signed:
                raise ClientError(
                    f"the control plane at {self.target.url} answered {exc.code} (to {exc.headers.get('location')}); "
                    "a signed request is never sent on to another address"
                ) from None
            payload = _decode(exc.read())
            error = payload.get("error") if isinstance(payload, dict) else None
            if isinstance(error, dict):
                raise ApiError(exc.code, str(error.get("code")), str(error.get("message")), payload) from None
            # Lambda's own answers (403 from IAM, 502 from a crashed function) are not ours.
            text = payload.get("Message") or payload.get("message") if isinstance(payload, dict) else payload
            raise ApiError(exc.code, f"http_{exc.code}", str(text or exc.reason), payload) from None
        except urllib.error.URLError as exc:
            raise ClientError(self._unreachable(exc.reason)) from None
        except TimeoutError:
            raise ClientError(f"the control plane at {self.target.url} did not answer in {self.timeout:g}s") from None

    def _unreachable(self, reason: Any) -> str:
        if not self.target.signed:  # the local stack: say whether it died, not just "refused"
            stack = stackfile.read()
            if stack is None:
                return f"the stack at {self.target.url} is not running (it was stopped); `loom up` starts it"
            if not stackfile.supervisor_running(stack):
                return stackfile.not_running_message(stack)
        return f"cannot reach the control plane at {self.target.url}: {reason}"

    def _object(
        self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> dict[str, Any]:
        """An answer the API gives as a JSON object; anything else is said here, not a crash later."""
        payload = self.request(method, path, query=query, body=body)[1]
        if not isinstance(payload, dict):
            # Not the path in the message: a callback's carries its token.
            kind = type(payload).__name__
            raise ClientError(f"the control plane at {self.target.url} answered {kind}, not an object")
        return payload

    # ------------------------------------------------------------------ API

    def start(self, workflow: str, input: Any, execution_id: str | None = None) -> tuple[int, dict[str, Any]]:
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if execution_id is not None:
            body["execution_id"] = execution_id
        return self.request("POST", "/executions", body=body)

    def status(self, execution_id: str) -> dict[str, Any]:
        return self._object("GET", f"/executions/{_segment(execution_id)}")

    def history(self, execution_id: str) -> dict[str, Any]:
        return self._object("GET", f"/executions/{_segment(execution_id)}/history")

    def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        query = {"status": status, "workflow": workflow, "limit": limit, "cursor": cursor}
        return self._object("GET", "/executions", query=query)

    def cancel(self, execution_id: str, *, compensate: bool = False) -> dict[str, Any]:
        body = {"compensate": True} if compensate else None
        return self._object("POST", f"/executions/{_segment(execution_id)}/cancel", body=body)

    def migrate(
        self, execution_id: str, mapping: dict[str, str], *, version: int | None = None, at: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"map": mapping}
        body.update({k: v for k, v in (("version", version), ("at", at)) if v is not None})
        return self._object("POST", f"/executions/{_segment(execution_id)}/migrate", body=body)

    def workflows(self) -> dict[str, Any]:
        return self._object("GET", "/workflows")

    def dlq_list(self, limit: int | None = None) -> dict[str, Any]:
        return self._object("GET", "/dlq", query={"limit": limit})

    def dlq_redrive(self, limit: int | None = None) -> dict[str, Any]:
        return self._object("POST", "/dlq/redrive", query={"limit": limit})

    def callback(self, token: str, action: str, body: Any = None) -> dict[str, Any]:
        """``action`` is succeed, fail or heartbeat; the token stays out of every error message."""
        return self._object("POST", f"/callbacks/{_segment(token)}/{_segment(action)}", body=body)

    def signal(self, execution_id: str, name: str, payload: Any = None) -> dict[str, Any]:
        path = f"/executions/{_segment(execution_id)}/signals/{_segment(name)}"
        return self._object("POST", path, body={"payload": payload if payload is not None else {}})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would resend the Authorization header to wherever a redirect points, http:// included."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener()
_SIGNED_OPENER = urllib.request.build_opener(_NoRedirect())


def _segment(value: str) -> str:
    return quote(value, safe="")


def _decode(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
