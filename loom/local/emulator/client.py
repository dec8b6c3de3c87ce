"""A small JSON-over-HTTP client for the local control plane, SigV4-signed like the CLI.

The local Function URL checks signatures as an AWS_IAM Function URL does, so every caller
signs with the principal the stack created (``stack.api`` in-process, or the stack file's
``control_plane_credentials`` for a stack started by ``loom up``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.credentials import Credentials

from loom.client import sign
from loom.local.emulator.sigv4 import Principal


class ApiError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        super().__init__(f"HTTP {status}: {body}")


@dataclass(frozen=True)
class LocalApi:
    """Where the local control plane is and whom to sign as."""

    url: str
    credentials: Credentials
    region: str

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> LocalApi:
        """From a stack file's content (``loom up``)."""
        creds = info.get("control_plane_credentials")
        if not info.get("control_plane_url") or not creds:
            raise ValueError("the stack file names no control plane URL and credentials: is the stack running?")
        principal = Principal.from_json(creds)
        return cls(str(info["control_plane_url"]).rstrip("/"), principal.credentials(), str(info["region"]))


def request(
    api: LocalApi, method: str, path: str, body: Any = None, *, headers: Mapping[str, str] | None = None
) -> urllib.request.Request:
    """A signed request (what ``call`` sends); ``headers`` are added before signing."""
    data = b"" if body is None else json.dumps(body).encode()
    url = api.url.rstrip("/") + path
    wanted = {"content-type": "application/json", **(headers or {})}
    signed = sign(method, url, data, wanted, api.credentials, api.region)
    return urllib.request.Request(url, data=data if body is not None else None, method=method, headers=signed)


def call(api: LocalApi, method: str, path: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(request(api, method, path, body), timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


def ok(api: LocalApi, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    status, payload = call(api, method, path, body, timeout)
    if status >= 300:
        raise ApiError(status, payload)
    return payload
