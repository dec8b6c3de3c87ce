"""The AWS APIs the local stack talks to: moto (embedded), LocalStack, or none.

The embedded emulator is moto's server in a child process; LocalStack is one that
answers already, else compose.yaml's through ``docker compose``, else host mode
(loom.local.emulator.localstack_host) where no Docker engine answers. Either way the functions reach it the
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
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import IO, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from loom.local.emulator import localstack_host
from loom.template import ROOT

COMPOSE_FILE = ROOT / "compose.yaml"
LOCALSTACK_URL = "http://localhost:4566"
# What host mode serves when the caller names nothing: what the local stack calls (kms: the table's SSE).
DEFAULT_HOST_SERVICES = ("dynamodb", "iam", "kms", "sqs", "sts")
# Host mode with --localstack-dynamodb localstack and no DynamoDB Local yet: how long LocalStack may
# take to fetch it (and Java) on the first DynamoDB call before the stack gives up with the reason.
DYNAMODB_FETCH_TIMEOUT = 300.0


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
        argv = [sys.executable, "-m", "loom.local.emulator.moto_server", "--host", self.host, "--port", str(self.port)]
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


def dynamodb_answers(endpoint_url: str, region: str, timeout: float) -> str | None:
    """None when DynamoDB at ``endpoint_url`` answers ListTables within ``timeout``, else why not."""
    creds = fake_credentials(region)
    client = boto3.session.Session(
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        region_name=region,
    ).client(
        "dynamodb",
        endpoint_url=endpoint_url,
        config=Config(connect_timeout=5, read_timeout=timeout, retries={"max_attempts": 1, "mode": "standard"}),
    )
    try:
        client.list_tables(Limit=1)
    except (BotoCoreError, ClientError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class LocalStackMode(Enum):
    """How the LocalStack a stack uses came to run."""

    RUNNING = "running"  # it answered already: someone else's, left running
    DOCKER = "docker"  # compose.yaml, started here, `docker compose down` at stop
    HOST = "host"  # host mode from `loom localstack install`'s venv, started here, stopped at stop


class DynamoSource(Enum):
    """Who serves DynamoDB next to LocalStack's SQS, STS/IAM, EventBridge and CloudFormation."""

    AUTO = "auto"  # LocalStack's, unless host mode has no DynamoDB Local (offline): then the embedded one
    LOCALSTACK = "localstack"  # LocalStack's (host mode: LocalStack fetches DynamoDB Local on first use, online)
    EMBEDDED = "embedded"  # the embedded emulator's, whatever LocalStack could do


def dynamodb_verdict(choice: DynamoSource, mode: LocalStackMode, dynamodb_local: bool) -> tuple[DynamoSource, str]:
    """Whose DynamoDB the stack uses (LOCALSTACK or EMBEDDED), and the reason, for the stack's output."""
    if choice is DynamoSource.EMBEDDED:
        return DynamoSource.EMBEDDED, "DynamoDB from the embedded emulator (--localstack-dynamodb embedded)"
    if choice is DynamoSource.LOCALSTACK:
        return DynamoSource.LOCALSTACK, "DynamoDB from LocalStack (--localstack-dynamodb localstack)"
    if mode is not LocalStackMode.HOST or dynamodb_local:
        return DynamoSource.LOCALSTACK, "DynamoDB from LocalStack"
    return DynamoSource.EMBEDDED, (
        "offline: DynamoDB from the embedded emulator (host-mode LocalStack has no DynamoDB Local, which it would "
        "fetch on first use; --localstack-dynamodb localstack lets it, online)"
    )


class LocalStackEmulator:
    """A LocalStack that answers, else compose.yaml's (Docker), else host mode (installed venv)."""

    kind = "localstack"

    def __init__(
        self,
        endpoint_url: str | None = None,
        compose_file: Path = COMPOSE_FILE,
        *,
        home: Path | None = None,
        log_path: Path | None = None,
        services: Iterable[str] = (),
        dynamodb: DynamoSource = DynamoSource.AUTO,
    ) -> None:
        self.endpoint_url = endpoint_url or os.environ.get("LOCALSTACK_ENDPOINT", LOCALSTACK_URL)
        self.compose_file = compose_file
        self.home = home or localstack_host.localstack_home()
        self.log_path = log_path or self.home / "localstack.log"
        self.services = tuple(services)
        self.dynamodb_choice = dynamodb
        self.fetch_timeout = DYNAMODB_FETCH_TIMEOUT
        self.started_here = False
        self.mode: LocalStackMode | None = None
        self.host: localstack_host.HostLocalStack | None = None
        self.dynamodb = DynamoSource.LOCALSTACK
        self.dynamodb_note = ""

    @property
    def pid(self) -> int | None:
        return self.host.pid if self.host is not None else None

    def _compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose_command(), "-f", str(self.compose_file), *args],
            cwd=str(self.compose_file.parent),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, timeout: float = 180.0) -> LocalStackEmulator:
        # A LocalStack that already answers belongs to someone else (another stack, the user's own
        # compose or host-mode process): use it, Docker or not, and leave it running at stop.
        if self._answers():
            self.mode = LocalStackMode.RUNNING
        else:
            ok, why = docker_available()
            if ok:
                self._start_compose(timeout)
            else:
                self._start_host(why, timeout)
        wait_http(
            f"{self.endpoint_url}/_localstack/health",
            timeout,
            ok=lambda body: all(
                v in ("available", "running")
                for k, v in json.loads(body).get("services", {}).items()
                if k in ("dynamodb", "sqs")
            ),
        )
        assert self.mode is not None
        has_local = self._dynamodb_local()
        self.dynamodb, self.dynamodb_note = dynamodb_verdict(self.dynamodb_choice, self.mode, has_local)
        if self.mode is LocalStackMode.HOST and self.dynamodb is DynamoSource.LOCALSTACK and not has_local:
            self._fetch_dynamodb_local()
        return self

    def _fetch_dynamodb_local(self) -> None:
        """The first DynamoDB call makes LocalStack download DynamoDB Local: online only, so say so if it fails."""
        why = dynamodb_answers(self.endpoint_url, os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), self.fetch_timeout)
        if why is not None:
            self.stop()
            raise EmulatorError(
                f"LocalStack's DynamoDB did not answer within {self.fetch_timeout:.0f}s ({why}): host mode has no "
                "DynamoDB Local, which LocalStack fetches on first use, and that needs the internet. Offline, "
                "`--localstack-dynamodb auto` (the default) or `embedded` serves DynamoDB from the embedded emulator"
            )

    def _start_compose(self, timeout: float) -> None:
        done = self._compose("up", "-d", "--wait", timeout=timeout)
        if done.returncode != 0:
            raise EmulatorError(f"docker compose up failed:\n{done.stderr.strip()}")
        self.mode, self.started_here = LocalStackMode.DOCKER, True

    def _start_host(self, no_docker: str, timeout: float) -> None:
        where = urllib.parse.urlsplit(self.endpoint_url)
        if where.hostname not in ("localhost", "127.0.0.1"):
            raise EmulatorError(
                f"no LocalStack answers at {self.endpoint_url} and {no_docker}; host mode starts LocalStack on "
                "this machine only, on 127.0.0.1: an --endpoint-url on localhost or 127.0.0.1 lets it"
            )
        installation = localstack_host.installed(self.home)
        if installation is None:
            raise EmulatorError(
                f"no LocalStack answers at {self.endpoint_url} and {no_docker}, so it would run in host mode, but "
                + localstack_host.not_installed_message(self.home)
            )
        port = where.port or localstack_host.DEFAULT_PORT
        data = localstack_host.data_dir(self.home, port)
        services = self.services or DEFAULT_HOST_SERVICES
        host = localstack_host.HostLocalStack(installation, data, port, services, self.log_path)
        try:
            self.host = host.start(timeout)
        except localstack_host.HostModeError as exc:
            raise EmulatorError(f"host-mode LocalStack did not start: {exc}") from exc
        self.mode, self.started_here = LocalStackMode.HOST, True

    def _dynamodb_local(self) -> bool:
        """Host mode: whether LocalStack has DynamoDB Local already (so using it downloads nothing)."""
        if self.host is None:
            return False
        return localstack_host.has_dynamodb_local(self.host)

    def _answers(self) -> bool:
        return localstack_host.health(self.endpoint_url) is not None

    def describe(self) -> dict[str, Any]:
        """What the stack file and `loom up` say about this LocalStack."""
        out: dict[str, Any] = {
            "mode": self.mode.value if self.mode else None,
            "endpoint_url": self.endpoint_url,
            "dynamodb": self.dynamodb.value,
            "dynamodb_note": self.dynamodb_note,
        }
        if self.host is not None:
            out.update(
                pid=self.host.pid,
                version=localstack_host.LOCALSTACK_VERSION,
                venv=str(self.host.installation.venv),
                data_dir=str(self.host.data_dir),
                log=str(self.host.log_path),
            )
        return out

    def stop(self) -> None:
        if self.host is not None:
            self.host.stop()
            self.host = None
        elif self.started_here:
            self._compose("down", timeout=120)
        self.started_here = False
