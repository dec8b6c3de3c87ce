"""The AWS APIs the local stack talks to: moto (embedded), LocalStack, or none.

The embedded emulator is moto's server in a child process; LocalStack runs from
compose.yaml through ``docker compose``. Either way the functions reach it the
way they reach AWS: boto3 honouring ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3

from loom.template import ROOT

COMPOSE_FILE = ROOT / "compose.yaml"
LOCALSTACK_URL = "http://localhost:4566"


class EmulatorError(RuntimeError):
    """The emulator did not start or does not answer."""


def fake_credentials(region: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }


API_KEY_HEADER = "x-loom-emulator-key"
# What makes moto's server authenticate every request and send no CORS headers (read at its import).
SECURE_ENV = {"INITIAL_NO_AUTH_ACTION_COUNT": "0", "MOTO_DISABLE_GLOBAL_CORS": "true"}


@dataclass(frozen=True)
class EmulatorKeys:
    """The embedded emulator's admin user (the kit's own clients sign with it) and its moto-api key."""

    access_key_id: str
    secret_access_key: str
    user_arn: str
    api_key: str

    def env(self, region: str) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        }

    def session(self, region: str) -> Any:
        return boto3.session.Session(
            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key, region_name=region
        )

    def to_json(self) -> dict[str, str]:
        return {
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "user_arn": self.user_arn,
            "api_key": self.api_key,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EmulatorKeys:
        return cls(
            str(data["access_key_id"]), str(data["secret_access_key"]), str(data["user_arn"]), str(data["api_key"])
        )


def wait_http(url: str, timeout: float, ok: Any = None, headers: Mapping[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers or {})), timeout=2) as resp:
                body = resp.read()
                if ok is None or ok(body):
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise EmulatorError(f"{url} did not answer within {timeout:.0f}s ({last})")


class EmbeddedEmulator:
    """moto's server in a child process on ``host:port`` (0 picks a free port)."""

    kind = "embedded"

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, log: IO[Any] | None = None, state_file: Path | None = None
    ) -> None:
        self.host = host
        self.port = port
        self._log = log
        self.state_file = state_file  # where the data is saved once persist() is called
        self.proc: subprocess.Popen[str] | None = None
        self.keys: EmulatorKeys | None = None  # known once started

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> EmbeddedEmulator:
        argv = [sys.executable, "-m", "loom.local.emulator_main", "--host", self.host, "--port", str(self.port)]
        if self.state_file is not None:
            argv += ["--state-file", str(self.state_file)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log if self._log is not None else subprocess.DEVNULL,
            cwd=str(ROOT),
            text=True,
            start_new_session=True,
            env={**os.environ, **SECURE_ENV},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            raise EmulatorError(f"moto server did not start on {self.host}:{self.port} (is port {self.port} taken?)")
        started = json.loads(line)
        self.port = int(started["port"])
        self.keys = EmulatorKeys.from_json({**started["admin"], "api_key": started["api_key"]})
        wait_http(f"{self.endpoint_url}/moto-api/", timeout, headers={API_KEY_HEADER: self.keys.api_key})
        return self

    def session(self, region: str) -> Any:
        """A boto3 session signing as the emulator's admin (the kit's own clients)."""
        if self.keys is None:
            raise EmulatorError("the emulator is not started")
        return self.keys.session(region)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def persist(self) -> None:
        """From now on the emulator saves its data to ``state_file`` (after a restore, never before)."""
        if self.proc is None or self.proc.stdin is None or self.state_file is None:
            raise EmulatorError("persist() needs a started emulator with a state file")
        self.proc.stdin.write("persist\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15 if self.state_file is not None else 5)  # the last save runs now
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and why not when it does not."""
    try:
        import docker

        docker.from_env().ping()
        return True, "docker engine answers"
    except Exception as exc:
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"


def compose_command() -> list[str]:
    """``docker compose`` (the plugin), or the older ``docker-compose`` binary."""
    if shutil.which("docker") is not None:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    raise EmulatorError("neither `docker compose` nor `docker-compose` is installed; --emulator localstack needs them")


class LocalStackEmulator:
    """LocalStack from compose.yaml: ``docker compose up -d --wait``, health-checked."""

    kind = "localstack"

    def __init__(self, endpoint_url: str | None = None, compose_file: Path = COMPOSE_FILE) -> None:
        self.endpoint_url = endpoint_url or os.environ.get("LOCALSTACK_ENDPOINT", LOCALSTACK_URL)
        self.compose_file = compose_file
        self.started_here = False
        self.pid: int | None = None

    def _compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose_command(), "-f", str(self.compose_file), *args],
            cwd=str(self.compose_file.parent),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, timeout: float = 180.0) -> LocalStackEmulator:
        ok, why = docker_available()
        if not ok:
            raise EmulatorError(f"--emulator localstack needs Docker: {why}")
        # A LocalStack that already answers belongs to someone else (another stack, the
        # user's own compose): use it, and leave it running when this stack stops.
        if not self._answers():
            done = self._compose("up", "-d", "--wait", timeout=timeout)
            if done.returncode != 0:
                raise EmulatorError(f"docker compose up failed:\n{done.stderr.strip()}")
            self.started_here = True
        wait_http(
            f"{self.endpoint_url}/_localstack/health",
            timeout,
            ok=lambda body: all(
                v in ("available", "running")
                for k, v in json.loads(body).get("services", {}).items()
                if k in ("dynamodb", "sqs")
            ),
        )
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/_localstack/health", timeout=2) as answer:
                return answer.status == 200
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        if self.started_here:
            self._compose("down", timeout=120)
            self.started_here = False
