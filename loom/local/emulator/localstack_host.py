"""LocalStack 4.14.0 in host mode: its own virtual environment, started and stopped by Loom.

Where no Docker engine answers, ``loom up --emulator localstack`` runs LocalStack as a plain
process (``python -m localstack.runtime.main`` from PyPI's ``localstack-core``), as long as
``loom localstack install`` built its environment first: nothing is downloaded at ``loom up``.

    home = localstack_home()                  # $LOOM_LOCALSTACK_HOME, else <state dir>/localstack
    install(home, find_python())              # venv + pip install REQUIREMENTS (explicit opt-in)
    proc = HostLocalStack(installed(home), data_dir(home, 4566), 4566, services, log_path).start()
    proc.stop()

Facts this rests on (measured on LocalStack 4.14.0): it needs Python 3.13 whatever its metadata
says (localstack/utils/tagging.py), and the pins below; it believes it runs in a container when
/.dockerenv exists, so OVERRIDE_IN_DOCKER=0 keeps its files under FILESYSTEM_ROOT; DNS_ADDRESS=0
keeps it off port 53.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from loom import stackfile

LOCALSTACK_VERSION = "4.14.0"
PYTHON_VERSION = (3, 13)
# What `loom localstack install` puts in the venv: the runtime extra brings the server (rolo, moto-ext...).
REQUIREMENTS = (
    f"localstack-core[runtime]=={LOCALSTACK_VERSION}",
    "cbor2<6",
    "cryptography<45",
    "pyopenssl<25",
    "joserfc<1.1",
    "service-identity",
)
STAMP = ".loom-localstack.json"
INSTALL_COMMAND = "loom localstack install"


class HostModeError(RuntimeError):
    """Host-mode LocalStack is not installed, cannot be installed, or did not start."""


def localstack_home() -> Path:
    """Where host-mode LocalStack lives: $LOOM_LOCALSTACK_HOME, else the state dir's localstack/."""
    env = os.environ.get("LOOM_LOCALSTACK_HOME")
    return Path(env).resolve() if env else stackfile.state_dir() / "localstack"


def venv_dir(home: Path) -> Path:
    return home / f"venv-{LOCALSTACK_VERSION}"


DEFAULT_PORT = 4566


def data_dir(home: Path, port: int) -> Path:
    """A host-mode LocalStack's files: one directory per port.

    Two LocalStacks on one filesystem root write the same cache and tmp files (its self-signed
    certificate among them), so a second one on another port (a test's, the chaos table's beside
    ``loom up``) keeps to a directory of its own, which ``HostLocalStack.stop`` removes: with
    PERSISTENCE=0 nothing in it outlives the process. The default port keeps ``data/``.
    """
    return home / "data" if port == DEFAULT_PORT else home / f"data-{port}"


@dataclass(frozen=True)
class Installation:
    venv: Path
    python: Path  # the venv's interpreter
    version: str
    requirements: tuple[str, ...]


def installed(home: Path) -> Installation | None:
    """The installation in ``home`` when it is complete and of this version, else None."""
    venv = venv_dir(home.resolve())  # absolute: LocalStack runs with its data dir as working directory
    try:
        stamp = json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    python = venv / "bin" / "python"
    if stamp.get("version") != LOCALSTACK_VERSION or tuple(stamp.get("requirements", ())) != REQUIREMENTS:
        return None
    if not python.exists():
        return None
    return Installation(venv, python, LOCALSTACK_VERSION, REQUIREMENTS)


def not_installed_message(home: Path) -> str:
    return (
        f"host-mode LocalStack {LOCALSTACK_VERSION} is not installed in {venv_dir(home)}: run "
        f"`{INSTALL_COMMAND}` (it builds that venv from PyPI with Python 3.13; nothing is downloaded at `loom up`)"
    )


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)", done.stdout.strip())
    return (int(match.group(1)), int(match.group(2))) if done.returncode == 0 and match else None


def _pyenv_candidates() -> list[str]:
    if shutil.which("pyenv") is None:
        return []
    try:
        bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    wanted = re.compile(rf"^{PYTHON_VERSION[0]}\.{PYTHON_VERSION[1]}(\.\d+)?$")
    versions = sorted((v for v in bare.split() if wanted.match(v)), key=_version_key, reverse=True)
    out = []
    for version in versions:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            prefix = subprocess.run(["pyenv", "prefix", version], capture_output=True, text=True, timeout=30)
            if prefix.returncode == 0:
                out.append(str(Path(prefix.stdout.strip()) / "bin" / "python3"))
    return out


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def find_python() -> str:
    """Python 3.13, found as scripts/bootstrap finds 3.12: $LOOM_LOCALSTACK_PYTHON, pyenv, then PATH."""
    chosen = os.environ.get("LOOM_LOCALSTACK_PYTHON")
    candidates = [chosen] if chosen else [*_pyenv_candidates(), "python3.13"]
    for candidate in candidates:
        path = candidate if os.sep in candidate else shutil.which(candidate)
        if path and Path(path).exists() and _version_of(path) == PYTHON_VERSION:
            return path
    wanted = ".".join(map(str, PYTHON_VERSION))
    if chosen:
        raise HostModeError(f"LOOM_LOCALSTACK_PYTHON={chosen} is not a Python {wanted} interpreter")
    raise HostModeError(
        f"LocalStack {LOCALSTACK_VERSION} in host mode needs Python {wanted} (pyenv install {wanted}, or set "
        "LOOM_LOCALSTACK_PYTHON to one)"
    )


def install(home: Path, python: str, log: IO[str] | None = None) -> Installation:
    """Build the venv in ``home`` from the package registry; a second run only checks."""
    done = installed(home)
    if done is not None:
        return done
    venv = venv_dir(home)
    if venv.exists():
        shutil.rmtree(venv)  # a half-built one (no stamp): start again rather than trust it
    home.mkdir(parents=True, exist_ok=True)
    _run([python, "-m", "venv", str(venv)], "creating the venv", log)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--quiet", *REQUIREMENTS], "pip install", log)
    check = "import importlib.metadata as m, localstack.runtime.runtime; print(m.version('localstack-core'))"
    version = subprocess.run([str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True, timeout=120)
    if version.returncode != 0 or version.stdout.strip() != LOCALSTACK_VERSION:
        raise HostModeError(f"the installed LocalStack does not import: {version.stderr.strip()[-2000:]}")
    stamp = {"version": LOCALSTACK_VERSION, "requirements": list(REQUIREMENTS), "python": python}
    (venv / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    result = installed(home)
    assert result is not None
    return result


def _run(argv: list[str], what: str, log: IO[str] | None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    # pip repeats warnings about this machine's find-links folders for every package: not news.
    noise = "is ignored: it is neither a file nor a directory"
    said = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if noise not in line)
    if log is not None and said:
        log.write(said + "\n")
    if done.returncode != 0:
        raise HostModeError(f"{what} failed ({done.returncode}): {said[-3000:]}")


def host_environment(data_dir: Path, port: int, services: Iterable[str]) -> dict[str, str]:
    """LocalStack's configuration for a host-mode process that keeps to ``data_dir`` and ``port``."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        {
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            "OVERRIDE_IN_DOCKER": "0",  # /.dockerenv would send its files to /var/lib/localstack
            "FILESYSTEM_ROOT": str(data_dir / "filesystem"),
            "CONFIG_DIR": str(data_dir / "config"),  # not ~/.localstack
            "DNS_ADDRESS": "0",  # no DNS server on port 53
            "SERVICES": ",".join(sorted(set(services))),
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DISABLE_EVENTS": "1",  # no analytics calls home
            "PERSISTENCE": "0",
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        }
    )
    return env


def health(endpoint_url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """LocalStack's /_localstack/health answer, or None when nothing (or not LocalStack) answers."""
    try:
        with urllib.request.urlopen(f"{endpoint_url}/_localstack/health", timeout=timeout) as answer:
            body = json.loads(answer.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return body if isinstance(body, dict) and "services" in body else None


class HostLocalStack:
    """One host-mode LocalStack process in its own session (so its children stop with it)."""

    def __init__(self, installation: Installation, data_dir: Path, port: int, services: Iterable[str], log_path: Path):
        self.installation = installation
        self.data_dir = data_dir
        self.port = port
        self.services = sorted(set(services))
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        # Another port's directory is this process's alone (see data_dir): removed when it stops.
        self.scratch = port != DEFAULT_PORT and data_dir.name == f"data-{port}"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 120.0) -> HostLocalStack:
        # Owner-only, as the rest of the state dir: the log carries request details.
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.installation.python), "-m", "localstack.runtime.main"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.data_dir),
                env=host_environment(self.data_dir, self.port, self.services),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise HostModeError(f"LocalStack exited with status {code}; {self.log_path} ends:\n{self.tail()}")
            answer = health(self.endpoint_url)
            if answer is not None and str(answer.get("version", "")).startswith(LOCALSTACK_VERSION):
                return self
            time.sleep(0.2)
        self.stop()
        raise HostModeError(f"LocalStack did not answer within {timeout:.0f}s; {self.log_path} ends:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            self._end(proc, timeout)
        if self.scratch:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    @staticmethod
    def _end(proc: subprocess.Popen[bytes], timeout: float) -> None:
        # Its own session: the group is LocalStack and what it started (DynamoDB Local's java), nothing else.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def has_dynamodb_local(host: HostLocalStack) -> bool:
    """Whether this LocalStack has DynamoDB Local already: its DynamoDB then needs no download.

    Asked of LocalStack's own package registry, in its venv, with its configuration; never installs.
    """
    probe = (
        "from localstack.services.dynamodb.packages import dynamodblocal_package as p; "
        "print(bool(p.get_installed_dir()))"
    )
    try:
        done = subprocess.run(
            [str(host.installation.python), "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(host.data_dir),
            env=host_environment(host.data_dir, host.port, host.services),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip().endswith("True")
