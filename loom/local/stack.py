"""The local stack: template.yaml's resources in an emulator, its functions in local processes.

    from loom.local.stack import LocalStack, StackOptions
    with LocalStack(StackOptions(port=0, api_port=0, tick=1.0, state_dir=tmp)) as stack:
        stack.api_url, stack.endpoint_url, stack.refs
        stack.tick_sweeper(); stack.advance_time(3600)

Everything the functions are comes from the template: handlers, timeouts,
environments (Globals merged with the function's own, references resolved to
the local resources), the SQS trigger's batch size and window, the schedule,
the Function URL. ``loom up`` is a thin command line over this class.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from engine.log import get_logger
from loom import stackfile
from loom.jsonvalue import as_object
from loom.local import private, procs
from loom.local.emulator import clock as offset_clock
from loom.local.emulator import snapshot
from loom.local.emulator.aws_services import template_services
from loom.local.emulator.backends import (
    DynamoSource,
    EmbeddedEmulator,
    EmulatorError,
    EmulatorKeys,
    LocalStackEmulator,
    fake_credentials,
)
from loom.local.emulator.client import LocalApi
from loom.local.emulator.sigv4 import Principal, new_principal
from loom.local.lambdas import concurrency
from loom.local.lambdas.async_invoke import AsyncInvoker, AsyncPolicy
from loom.local.lambdas.esm import BatchOutcome, EsmConfig, SqsEventSource
from loom.local.lambdas.events import schedule_seconds, scheduled_event
from loom.local.lambdas.http import AuthType, FunctionUrlServer, UrlAuth
from loom.local.lambdas.iam import create_and_assume, function_roles
from loom.local.lambdas.imports import FunctionImports, check_group, group_checks
from loom.local.lambdas.package import FunctionPackage
from loom.local.lambdas.package import build as build_package
from loom.local.lambdas.pool import FunctionPool, Invocation, output_file
from loom.local.lambdas.standard_queue import StandardQueueChaos
from loom.template import ROOT, TEMPLATE, FunctionSpec, Template, create_resources, function_environment
from loom.template import load as load_template
from loom.ttl import Reaper, ttl_attribute

DEFAULT_PORT = 5230  # not LocalStack's 4566: both can run side by side
DEFAULT_API_PORT = 5231
REGION = "us-east-1"
# How often the sweeper's schedule looks at the functions' clock file: `loom time advance` ticks at once.
CLOCK_POLL_SECONDS = 0.25


class Console(Protocol):
    """What the stack needs of a web console it serves (loom.console.server.ConsoleServer)."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


# Builds the console around a stack and starts it on a port (loom.console.app.serve_stack).
ConsoleFactory = Callable[["LocalStack", int], Console]


class PortTaken(RuntimeError):
    """A port the stack needs is in use by another program."""


def extension_env(seconds: int) -> dict[str, str]:
    """The worker's heartbeat settings for an extension of ``seconds``, in the template's relation:
    four beats to an extension (20 s and 5 s there), so a batch outlasts missed beats."""
    return {"LOOM_VISIBILITY_TIMEOUT": str(seconds), "LOOM_HEARTBEAT_SECONDS": f"{seconds / 4:g}"}


def check_port(host: str, port: int, flag: str) -> None:
    """Refuse early, naming the port and the flag that sets it, when ``host:port`` is taken."""
    if not port:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As the servers do: a port left in TIME_WAIT by the previous stack is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortTaken(
                    f"port {port} on {host} is taken ({flag}): stop what uses it, or pass {flag} with another "
                    "port (0 picks a free one)"
                ) from None
            raise


class FunctionFailed(RuntimeError):
    """A function invocation the caller needed ended in error, crash or timeout."""

    def __init__(self, invocation: Invocation) -> None:
        self.invocation = invocation
        err = invocation.error or {}
        super().__init__(
            f"{invocation.function} {invocation.outcome}: {err.get('errorType', '')} {err.get('errorMessage', '')}"
        )


@dataclass(frozen=True)
class StackOptions:
    emulator: str = "embedded"  # embedded | localstack (aws has no local functions: see loom.local.emulator.aws)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # the embedded emulator's port; 0 picks a free one
    api_port: int = DEFAULT_API_PORT  # the control plane's port; 0 picks a free one
    # Worker processes (and SQS pollers). None: the template's ReservedConcurrentExecutions /
    # ScalingConfig.MaximumConcurrency, else 2 (logged as an approximation). A number overrides the template.
    workers: int | None = None
    api_workers: int | None = None  # the control plane's processes; None as for workers
    tick: float | None = None  # seconds between sweeper runs; None = the template's schedule
    state_dir: Path | None = None  # None = $LOOM_STATE_DIR or ./.loom
    env: Mapping[str, str] = field(default_factory=dict)  # extra env for every function
    function_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per logical id
    timeouts: Mapping[str, float] = field(default_factory=dict)  # Timeout overrides per logical id
    queue_visibility_timeout: int | None = None  # override the template's (fast redelivery locally)
    batch_size: int | None = None  # override the SQS trigger's BatchSize
    batching_window: float | None = None  # override MaximumBatchingWindowInSeconds
    parameters: Mapping[str, str] = field(default_factory=dict)  # template parameter overrides
    region: str = REGION
    endpoint_url: str | None = None  # LocalStack's endpoint (default http://localhost:4566)
    # LocalStack: whose DynamoDB (auto: LocalStack's, unless host mode has no DynamoDB Local: the embedded one).
    localstack_dynamodb: str = DynamoSource.AUTO.value
    # Host mode's venv and data; None: $LOOM_LOCALSTACK_HOME, else <state dir>/localstack.
    localstack_home: Path | None = None
    template: Path = TEMPLATE
    log_file: Path | None = None  # where function and emulator output goes; None = inherit stdout
    log_stream: IO[Any] | None = None  # or this open stream (not closed by the stack), e.g. a console relay
    write_stack_file: bool = True
    sweeper: bool = True  # run the sweeper on its schedule (tick_sweeper() works either way)
    # What the functions' package holds, as the Makefile's SOURCES (None: $SOURCES, else the Makefile's).
    sources: tuple[str, ...] | None = None
    persist: bool = False  # embedded: keep the data (and the clock offset) in state_dir across restarts
    fresh: bool = False  # with persist: forget what was saved and start empty
    heartbeat: float = 2.0  # seconds between touches of the stack file (when it was last alive)
    # Standard-queue delivery: reorder and occasionally duplicate what the worker receives, at this
    # rate (0 = off, the emulator's strict send order). Seeded, so a run can be replayed.
    sqs_standard_chaos: float = 0.0
    sqs_chaos_seed: int = 0
    # The web console on 127.0.0.1 at this port (0: a free one); None: no console. The stack does
    # not know the console (it sits above): whoever composes them (the CLI) passes console_factory.
    console_port: int | None = None
    console_port_fallback: bool = False  # the port is only a preference: when taken, any free one
    console_factory: ConsoleFactory | None = None

    def __post_init__(self) -> None:
        if self.console_port is not None and self.console_factory is None:
            raise ValueError("StackOptions.console_port needs a console_factory (loom.console.app.serve_stack)")


class _EndpointSession:
    """A boto3 session whose clients all talk to the emulator (without touching os.environ).

    ``endpoints`` sends some services elsewhere (DynamoDB to the embedded emulator next to a
    host-mode LocalStack), as boto3's per-service ``AWS_ENDPOINT_URL_<SERVICE>`` does for the functions.
    ``keys``: the embedded emulator's admin key, which it signs with; LocalStack takes any key.
    """

    def __init__(
        self,
        endpoint_url: str,
        region: str,
        endpoints: Mapping[str, str] | None = None,
        keys: EmulatorKeys | None = None,
    ) -> None:
        creds = keys.env(region) if keys is not None else fake_credentials(region)
        self._session = boto3.session.Session(
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=creds.get("AWS_SESSION_TOKEN"),
            region_name=region,
        )
        self.endpoint_url = endpoint_url
        self.endpoints = dict(endpoints or {})
        self.region_name = region

    def client(self, name: str, **kwargs: Any) -> Any:
        # boto3's stubs type client() per literal service name; this one takes the name at run time.
        url = self.endpoints.get(name, self.endpoint_url)
        return self._session.client(name, endpoint_url=url, **kwargs)  # type: ignore[call-overload]


def _base_env() -> dict[str, str]:
    # A Lambda's environment is not the developer's shell: only what a process needs to start.
    # The interpreter runs isolated (-I -S): PYTHON* variables would be ignored, sys.path is the package's.
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["TZ"] = "UTC"
    return env


class LocalStack:
    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        if self.options.emulator not in ("embedded", "localstack"):
            raise ValueError(
                f"LocalStack runs functions against 'embedded' or 'localstack', not {self.options.emulator!r}"
            )
        self.state_dir = Path(self.options.state_dir or stackfile.state_dir()).resolve()
        self.template = Template(None if self.options.template == TEMPLATE else load_template(self.options.template))
        self.clock_offset_file = self.state_dir / offset_clock.FILENAME
        self.refs: dict[str, Any] = {}
        self.pools: dict[str, FunctionPool] = {}
        self.package: FunctionPackage | None = None
        self.api_url: str | None = None
        self.endpoint_url: str | None = None
        self.started_at: float | None = None
        self._emulator: EmbeddedEmulator | LocalStackEmulator | None = None
        self._dynamodb_emulator: EmbeddedEmulator | None = None  # next to a LocalStack without DynamoDB
        self.service_endpoints: dict[str, str] = {}  # service -> endpoint, where it is not endpoint_url
        self._esm: SqsEventSource | None = None
        self._http: FunctionUrlServer | None = None
        self.console: Console | None = None  # when options.console_port is set
        self._sweeper_thread: threading.Thread | None = None
        self._ttl_thread: threading.Thread | None = None
        self._reapers: list[Reaper] = []
        self.sweeper_async: AsyncInvoker | None = None
        self.concurrency: dict[str, concurrency.ConcurrencyPlan] = {}
        self._stopping = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self.restored: dict[str, Any] | None = None  # what a persistent start put back
        self._file_lock = threading.Lock()
        self._output: IO[Any] | None = None
        self._session: _EndpointSession | None = None
        self._envs: dict[str, dict[str, str]] = {}
        self._roles: dict[str, str] = {}  # logical id -> worker | sweeper | api
        self._role_envs: dict[str, dict[str, str]] = {}  # logical id -> its IAM role's credentials
        self._role_names: dict[str, str] = {}  # logical id -> the IAM role it runs as
        self._tick_seconds: float | None = None
        self._log = get_logger(component="stack")
        # The one IAM principal the local Function URL accepts: new per stack, so a control plane
        # bound to another interface (--host 0.0.0.0) answers only whoever can read the stack file.
        self.principal: Principal = new_principal()

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def state_file(self) -> Path:
        return self.state_dir / snapshot.FILENAME

    def _start(self) -> None:
        opts = self.options
        private.private_dir(self.state_dir)
        if opts.emulator == "embedded":
            check_port(opts.host, opts.port, "--port")
        check_port(opts.host, opts.api_port, "--api-port")
        if opts.console_port is not None and not opts.console_port_fallback:
            check_port("127.0.0.1", opts.console_port, "--console-port")
        saved = self._saved_state()
        if saved is None:
            offset_clock.reset(self.clock_offset_file)  # a new stack starts at real time
        self.package = build_package(self.state_dir, opts.sources)
        self._assign_roles()
        self._check_imports()  # before anything starts: a module that cannot load stops `up` here
        if opts.log_file is not None:
            self._output = output_file(Path(opts.log_file))
        elif opts.log_stream is not None:
            self._output = opts.log_stream
        emulator_log = self._output or output_file(self.state_dir / "emulator.log")
        if opts.emulator == "embedded":
            state_file = self.state_file if opts.persist else None
            emulator: EmbeddedEmulator | LocalStackEmulator = EmbeddedEmulator(
                opts.host, opts.port, log=emulator_log, state_file=state_file
            ).start()
        else:
            emulator = self._start_localstack(emulator_log)
        self._emulator = emulator
        self.endpoint_url = emulator.endpoint_url
        self._session = _EndpointSession(self.endpoint_url, opts.region, self.service_endpoints, self.emulator_keys)
        self.refs = create_resources(self._session, parameters=dict(opts.parameters), template=self.template)
        self._assume_roles()
        if saved is not None:
            self.restored = snapshot.restore(self._session, saved)
            if self.restored["skipped"]:
                # The next save would drop them: keep the whole file aside first.
                backup = self.state_dir / f"emulator-state.{int(time.time())}.json"
                shutil.copyfile(self.state_file, backup)
                os.chmod(backup, private.FILE_MODE)
                self.restored["backup"] = str(backup)
            self._log.info("state.restored", file=str(self.state_file), **self.restored)
        if isinstance(self._emulator, EmbeddedEmulator) and opts.persist:
            self._emulator.persist()
        self._plan_functions()
        self._apply_visibility_override()
        self._start_pools()
        self.started_at = time.time()
        self._start_triggers()
        self._start_ttl()
        self._start_console()
        self.write_stack_file()
        if opts.write_stack_file:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
            self._heartbeat_thread.start()
        self._log.info(
            "stack.started",
            emulator=opts.emulator,
            aws_endpoint_url=self.endpoint_url,
            control_plane_url=self.api_url,
            table=self.refs.get("Table"),
            worker_pids=self.worker_pids(),
        )

    def _start_localstack(self, emulator_log: IO[Any]) -> LocalStackEmulator:
        opts = self.options
        localstack = LocalStackEmulator(
            opts.endpoint_url,
            home=opts.localstack_home,
            log_path=self.state_dir / "localstack.log",
            services=template_services(self.template.resources),
            dynamodb=DynamoSource(opts.localstack_dynamodb),
        )
        started = localstack.start()
        self._log.info("localstack.started", **localstack.describe())
        if localstack.dynamodb is DynamoSource.EMBEDDED:
            self._dynamodb_emulator = EmbeddedEmulator(opts.host, opts.port, log=emulator_log).start()
            self.service_endpoints["dynamodb"] = self._dynamodb_emulator.endpoint_url
        return started

    def _start_console(self) -> None:
        serve = self.options.console_factory
        if self.options.console_port is None or serve is None or self.api_url is None:
            return
        try:
            self.console = serve(self, self.options.console_port)
        except OSError as exc:
            if not (self.options.console_port_fallback and exc.errno in (errno.EADDRINUSE, errno.EACCES)):
                raise
            self.console = serve(self, 0)

    def _saved_state(self) -> dict[str, Any] | None:
        """What a persistent start puts back (None: start empty, at real time)."""
        opts = self.options
        if not opts.persist or opts.emulator != "embedded":
            return None
        if opts.fresh:
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
            return None
        return snapshot.read(self.state_file)  # SnapshotError: refuse to start rather than lose it

    def _heartbeat(self) -> None:
        while not self._stopping.wait(self.options.heartbeat):
            stackfile.touch(self.state_dir)

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._esm is not None:
            self._esm.stop()
        if self._http is not None:
            with contextlib.suppress(Exception):
                self._http.stop()
        if self.console is not None:
            with contextlib.suppress(Exception):
                self.console.stop()
        for pool in self.pools.values():
            pool.stop()
        if self._esm is not None:
            self._esm.join()
        if self._sweeper_thread is not None:
            self._sweeper_thread.join(timeout=5)
        if self._ttl_thread is not None:
            self._ttl_thread.join(timeout=5)
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        if self.sweeper_async is not None:
            self.sweeper_async.stop()
            self.sweeper_async.join(timeout=2)
        if self._emulator is not None:
            with contextlib.suppress(Exception):
                self._emulator.stop()
        if self._dynamodb_emulator is not None:
            with contextlib.suppress(Exception):
                self._dynamodb_emulator.stop()
        if self.options.write_stack_file:
            current = stackfile.read(self.state_dir)
            if current is not None and current.get("supervisor_pid") == os.getpid():
                stackfile.remove(self.state_dir)
        if self._output is not None and self._output is not self.options.log_stream:
            with contextlib.suppress(Exception):
                self._output.close()
        self._log.info("stack.stopped")

    # ------------------------------------------------------------------ functions

    def _function_spec(self, logical_id: str) -> FunctionSpec:
        return self.template.functions()[logical_id]

    def _assign_roles(self) -> None:
        for logical_id, spec in self.template.functions().items():
            props = self.template.resources[logical_id].get("Properties", {})
            kinds = {e.get("Type") for e in spec.events.values()}
            if "SQS" in kinds:
                self._roles[logical_id] = "worker"
            elif "Schedule" in kinds:
                self._roles[logical_id] = "sweeper"
            elif "FunctionUrlConfig" in props:
                self._roles[logical_id] = "api"

    @property
    def _keyed_emulator(self) -> EmbeddedEmulator | None:
        """The embedded emulator that checks signatures: the stack's own, or the one serving
        DynamoDB beside a host-mode LocalStack (which checks none)."""
        if isinstance(self._emulator, EmbeddedEmulator):
            return self._emulator
        return self._dynamodb_emulator

    @property
    def emulator_keys(self) -> EmulatorKeys | None:
        """The embedded emulator's admin key (None when no embedded emulator runs: LocalStack alone)."""
        keyed = self._keyed_emulator
        return keyed.keys if keyed is not None else None

    def _physical_name(self, logical_id: str) -> str:
        props = self.template.resources[logical_id].get("Properties", {})
        return str(self.template.resolve(props.get("FunctionName", logical_id), self.refs))

    def _assume_roles(self) -> None:
        """Each function's role from the template, assumed as Lambda assumes it (where an embedded emulator runs)."""
        keyed, keys = self._keyed_emulator, self.emulator_keys
        if keyed is None or keys is None or self._session is None:
            return
        roles = function_roles(self.template, self.refs, str(self.refs["AWS::StackName"]))
        roles = {k: v for k, v in roles.items() if k in self._roles}
        names = {logical_id: self._physical_name(logical_id) for logical_id in roles}
        # Beside a host-mode LocalStack the roles live in the emulator that checks them (the one
        # serving DynamoDB); LocalStack takes their keys as it takes any.
        iam = (
            self._session
            if keyed is self._emulator
            else _EndpointSession(keyed.endpoint_url, self.options.region, keys=keys)
        )
        self._role_envs = create_and_assume(iam, roles, names, keys.user_arn, self.options.region)
        self._role_names = {k: v.role_name for k, v in roles.items()}

    def _plan_functions(self) -> None:
        opts = self.options
        for logical_id in self._roles:
            spec = self._function_spec(logical_id)
            name = self._physical_name(logical_id)
            env = _base_env()
            env.update(function_environment(spec, self.refs, self.template))
            # Its role's credentials, as Lambda hands them over; LocalStack takes any key.
            env.update(self._role_envs.get(logical_id) or fake_credentials(opts.region))
            env.update(
                {
                    "AWS_ENDPOINT_URL": self.endpoint_url or "",
                    **{f"AWS_ENDPOINT_URL_{name.upper()}": url for name, url in self.service_endpoints.items()},
                    "LOOM_CLOCK_OFFSET_FILE": str(self.clock_offset_file),
                    "AWS_LAMBDA_FUNCTION_NAME": name,
                    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory),
                    "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
                    "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
                    "_HANDLER": spec.handler,
                    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
                }
            )
            if self._roles[logical_id] == "worker" and opts.queue_visibility_timeout is not None:
                env.update(extension_env(opts.queue_visibility_timeout))
            env.update(opts.env)
            env.update(opts.function_env.get(logical_id, {}))
            self._envs[logical_id] = env
        self._plan_concurrency()

    def _plan_concurrency(self) -> None:
        overrides = {"worker": self.options.workers, "api": self.options.api_workers, "sweeper": None}
        for logical_id, role in self._roles.items():
            plan = concurrency.plan(self._function_spec(logical_id), role, overrides[role])
            self.concurrency[logical_id] = plan
            # Info, not a warning: `loom up` prints the notes (see loom.cli.local), the kit's runs stay quiet.
            self._log.info(
                "stack.concurrency",
                function=logical_id,
                processes=plan.size,
                source=plan.source.value,
                approximate=plan.approximate,
                note=plan.note,
            )

    def _check_imports(self) -> None:
        """Every handler and workflow module imports from the package, or the stack does not come up."""
        package = self.package
        assert package is not None
        functions = [
            FunctionImports(lid, self._function_spec(lid).handler, self._preflight_env(lid)) for lid in self._roles
        ]
        groups = group_checks(functions)
        with ThreadPoolExecutor(max_workers=max(1, len(groups))) as ex:
            list(ex.map(lambda group: check_group(package, group), groups))

    def _preflight_env(self, logical_id: str) -> dict[str, str]:
        """The function's environment as far as it is known before any resource exists.

        Variables that name a resource (a table, a queue) are left out: importing a module must not
        need them, and LOOM_WORKFLOW_MODULES, the one the check reads, is a parameter.
        """
        opts = self.options
        refs = {**self.template.parameter_defaults(), **opts.parameters}
        env = _base_env()
        for name, value in self._function_spec(logical_id).environment.items():
            with contextlib.suppress(KeyError, ValueError):
                env[name] = str(self.template.resolve(value, refs))
        env.update(fake_credentials(opts.region))
        env.update(opts.env)
        env.update(opts.function_env.get(logical_id, {}))
        return env

    def _queue_of(self, event_props: Mapping[str, Any]) -> str:
        """The logical id of the queue an SQS event names (``!GetAtt Q.Arn``)."""
        target = event_props.get("Queue")
        if isinstance(target, dict) and "Fn::GetAtt" in target:
            return str(target["Fn::GetAtt"][0])
        arn = self.template.resolve(target, self.refs)
        for key, value in self.refs.items():
            if key.endswith(".Arn") and value == arn:
                return key[: -len(".Arn")]
        raise KeyError(f"SQS event names a queue that is not in the template: {target!r}")

    def _sqs_event(self, logical_id: str) -> dict[str, Any]:
        spec = self._function_spec(logical_id)
        return next(e["Properties"] for e in spec.events.values() if e.get("Type") == "SQS")

    def _apply_visibility_override(self) -> None:
        vt = self.options.queue_visibility_timeout
        if vt is None or self._session is None:
            return
        sqs = self._session.client("sqs")
        for logical_id, role in self._roles.items():
            if role == "worker":
                queue = self._queue_of(self._sqs_event(logical_id))
                sqs.set_queue_attributes(QueueUrl=self.refs[queue], Attributes={"VisibilityTimeout": str(vt)})

    def _timeout(self, logical_id: str) -> float:
        return float(self.options.timeouts.get(logical_id, self._function_spec(logical_id).timeout))

    def _start_pools(self) -> None:
        package = self.package
        assert package is not None  # built first, in _start
        for logical_id in self._roles:
            spec = self._function_spec(logical_id)
            self.pools[logical_id] = FunctionPool(
                function=logical_id,
                handler=spec.handler,
                env=self._envs[logical_id],
                timeout=self._timeout(logical_id),
                size=self.concurrency[logical_id].size,
                memory=spec.memory,
                package=package,
                output=self._output,
                on_invocation=self._logged,
                on_change=self._pool_changed,
            )
        with ThreadPoolExecutor(max_workers=max(1, len(self.pools))) as ex:
            list(ex.map(lambda p: p.start(), self.pools.values()))

    def _start_triggers(self) -> None:
        opts = self.options
        assert self._session is not None
        for logical_id, role in self._roles.items():
            if role == "worker":
                props = self._sqs_event(logical_id)
                queue = self._queue_of(props)
                self._esm = SqsEventSource(
                    self._session.client("sqs"),
                    self.pools[logical_id],
                    EsmConfig(
                        queue_url=self.refs[queue],
                        queue_arn=self.refs[f"{queue}.Arn"],
                        region=opts.region,
                        batch_size=int(opts.batch_size or props.get("BatchSize", 10)),
                        batching_window=float(
                            opts.batching_window
                            if opts.batching_window is not None
                            else props.get("MaximumBatchingWindowInSeconds", 0)
                        ),
                        report_batch_item_failures="ReportBatchItemFailures"
                        in (props.get("FunctionResponseTypes") or []),
                    ),
                    on_batch=self._batch_logged,
                    chaos=StandardQueueChaos(opts.sqs_standard_chaos, opts.sqs_chaos_seed),
                ).start()
            elif role == "api":
                self._http = FunctionUrlServer(
                    self.pools[logical_id], self._url_auth(logical_id), opts.host, opts.api_port
                ).start()
                self.api_url = self._http.url
            elif role == "sweeper":
                self._start_schedule(logical_id)

    def _start_schedule(self, logical_id: str) -> None:
        """EventBridge's rule: every tick an asynchronous invocation, retried by the function's EventInvokeConfig."""
        opts = self.options
        spec = self._function_spec(logical_id)
        schedule = self.template.resolve(
            next(e["Properties"] for e in spec.events.values() if e.get("Type") == "Schedule"), self.refs
        )
        self._tick_seconds = float(opts.tick) if opts.tick else schedule_seconds(schedule["Schedule"])
        self.sweeper_async = AsyncInvoker(
            self.pools[logical_id].invoke,
            AsyncPolicy.from_event_invoke_config(self.template.resolve(spec.event_invoke, self.refs)),
            clock=self._function_clock,
            function=logical_id,
        ).start()
        if opts.sweeper and schedule.get("Enabled", True):
            self._sweeper_thread = threading.Thread(
                target=self._sweep_forever, args=(logical_id,), name="sweeper-schedule", daemon=True
            )
            self._sweeper_thread.start()

    def _start_ttl(self) -> None:
        """DynamoDB's TTL, which moto lacks (loom/ttl.py): on the functions' clock, once a minute
        and after every clock jump, so that `loom time advance 31d` shows retention at work."""
        ddb = self.client("dynamodb")
        self._reapers = [
            Reaper(ddb, name, ttl_attribute(ddb, name), self._function_clock)
            for name in (self.refs[lid] for lid in self.template.of_type("AWS::DynamoDB::Table"))
        ]
        if any(r.attribute for r in self._reapers):
            self._ttl_thread = threading.Thread(target=self._reap_forever, name="ttl", daemon=True)
            self._ttl_thread.start()

    def _reap_forever(self) -> None:
        while not self._stopping.wait(CLOCK_POLL_SECONDS):
            for reaper in self._reapers:
                try:
                    deleted = reaper.maybe_reap()
                except (BotoCoreError, ClientError) as exc:  # the emulator's answer: the next round retries
                    self._log.warning("ttl.failed", table=reaper.table, error=str(exc)[:300])
                    continue
                if deleted:
                    self._log.info("ttl.deleted", table=reaper.table, items=deleted)

    def _url_auth(self, logical_id: str) -> UrlAuth:
        props = self.template.resources[logical_id].get("Properties", {})
        kind = AuthType(str((props.get("FunctionUrlConfig") or {}).get("AuthType", "AWS_IAM")))
        if kind is AuthType.NONE:
            return UrlAuth(AuthType.NONE, self.options.region)
        return UrlAuth.iam(self.options.region, self.principal)

    def _sweeper_id(self) -> str:
        for logical_id, role in self._roles.items():
            if role == "sweeper":
                return logical_id
        raise KeyError("the template has no scheduled function")

    def _rule_arn(self, logical_id: str) -> str:
        stack = self.refs.get("AWS::StackName")
        return f"arn:aws:events:{self.options.region}:123456789012:rule/{stack}-{logical_id}Tick"

    def _function_clock(self) -> float:
        # The functions' clock (time travel included): `loom time advance 2m` makes a pending retry due.
        return time.time() + offset_clock.read_offset(self.clock_offset_file)

    def _sweep_forever(self, logical_id: str) -> None:
        """EventBridge's rule, plus a tick at once when the functions' clock moves.

        ``loom time advance`` should fire what falls due in the jump (a sleep's end, a
        workflow's schedule) now, not at the next tick. The first tick also runs at once: it
        makes the schedule cursors (engine/schedules.py), which a jump before them would skip.
        """
        assert self._tick_seconds is not None and self.sweeper_async is not None
        offset = self.time_offset()
        due = time.monotonic()
        while True:
            moved = self.time_offset()
            if time.monotonic() >= due or moved != offset:
                # Fire and forget, as EventBridge does: a run still going does not hold the next tick back.
                self.sweeper_async.submit(scheduled_event(self._rule_arn(logical_id), self.options.region))
                if time.monotonic() >= due:
                    due = time.monotonic() + self._tick_seconds
            offset = moved
            if self._stopping.wait(min(CLOCK_POLL_SECONDS, max(0.0, due - time.monotonic()))):
                return

    # ------------------------------------------------------------------ logging and the stack file

    def _logged(self, inv: Invocation) -> None:
        fields: dict[str, Any] = {
            "function": inv.function,
            "request_id": inv.request_id,
            "pid": inv.pid,
            "duration_ms": inv.duration_ms,
            "outcome": inv.outcome,
        }
        if inv.error:
            fields["error_type"] = inv.error.get("errorType")
            fields["error_message"] = str(inv.error.get("errorMessage", ""))[:500]
        if inv.outcome == "ok" and isinstance(inv.result, dict) and "batchItemFailures" in inv.result:
            fields["batch_item_failures"] = len(inv.result.get("batchItemFailures") or [])
        (self._log.info if inv.outcome == "ok" else self._log.warning)("invocation", **fields)
        if self._roles.get(inv.function) == "sweeper" and isinstance(inv.result, dict) and inv.result.get("retained"):
            for reaper in self._reapers:  # what it stamped may be deletable now (loom/ttl.py)
                reaper.nudge()

    def _batch_logged(self, batch: BatchOutcome) -> None:
        self._log.debug(
            "esm.batch",
            request_id=batch.invocation.request_id,
            received=batch.received,
            deleted=batch.deleted,
            kept=batch.kept,
        )

    def _pool_changed(self, pool: FunctionPool) -> None:
        if self.started_at is not None and not self._stopping.is_set():
            self.write_stack_file()
            if self._roles.get(pool.function) == "worker":
                self._log.info("pool.changed", function=pool.function, pids=pool.pids(), replaced=pool.replaced)

    def all_pids(self) -> list[int]:
        """The supervisor, the emulator and every function process: what `loom down` may end."""
        pids = [os.getpid(), getattr(self._emulator, "pid", None), getattr(self._dynamodb_emulator, "pid", None)]
        pids += [pid for pool in self.pools.values() for pid in pool.pids()]
        return [p for p in pids if p]

    @property
    def info(self) -> dict[str, Any]:
        return {
            "emulator": self.options.emulator,
            "region": self.options.region,
            "aws_endpoint_url": self.endpoint_url,
            "aws_endpoints": dict(self.service_endpoints),  # per service, where not aws_endpoint_url
            "localstack": self._emulator.describe() if isinstance(self._emulator, LocalStackEmulator) else None,
            "control_plane_url": self.api_url,
            "control_plane_credentials": self.principal.to_json(),
            # The emulator's admin (the kit's clients sign with it) and moto-api key: owner-only file.
            "emulator_credentials": self.emulator_keys.to_json() if self.emulator_keys is not None else None,
            "function_roles": dict(self._role_names),
            # Carries the console's session token: the stack file is owner-only for the key above already.
            "console_url": self.console.url if self.console is not None else None,
            "table": self.refs.get("Table"),
            "queue_url": self.refs.get("StepQueue"),
            "dlq_url": self.refs.get("DeadLetterQueue"),
            "clock_offset_file": str(self.clock_offset_file),
            "supervisor_pid": os.getpid(),
            "worker_pids": self.worker_pids(),
            "started_at": self.started_at,
            # Beyond the contract: everything else a tool may want to find.
            "function_pids": {k: p.pids() for k, p in self.pools.items()},
            "emulator_pid": getattr(self._emulator, "pid", None),
            "state_dir": str(self.state_dir),
            # `loom logs` reads the functions' lines here (None: stdout, i.e. stack.log when detached).
            "log_file": str(Path(self.options.log_file).resolve()) if self.options.log_file else None,
            # pid -> start time and command line: only these exact processes are ever signalled.
            "processes": procs.records(self.all_pids()),
            "persistent": bool(self.options.persist and self.options.emulator == "embedded"),
            "sweeper_tick_seconds": self._tick_seconds,
            "concurrency": {
                k: {"processes": p.size, "source": p.source.value, "note": p.note} for k, p in self.concurrency.items()
            },
            "sqs_standard_chaos": self._esm.chaos.rate if self._esm is not None else 0.0,
            "refs": {k: v for k, v in self.refs.items() if isinstance(v, (str, int, float))},
            "python": sys.executable,
            "package": None
            if self.package is None
            else {
                "sources": list(self.package.sources),
                "task_root": str(self.package.task_root),
                "runtime_dir": str(self.package.runtime_dir),
            },
        }

    def write_stack_file(self) -> None:
        if not self.options.write_stack_file:
            return
        with self._file_lock:
            stackfile.write(self.info, self.state_dir)

    # ------------------------------------------------------------------ the API tools use

    @property
    def api(self) -> LocalApi:
        """The control plane's URL and the principal to sign requests with (loom.local.emulator.client)."""
        if self.api_url is None:
            raise EmulatorError("the stack has no control plane (not started, or no Function URL)")
        return LocalApi(self.api_url, self.principal.credentials(), self.options.region)

    def function_env(self, logical_id: str) -> dict[str, str]:
        """The exact environment a function's processes get (to call its handler in-process)."""
        return dict(self._envs[logical_id])

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client for the emulator, signed as its admin (no global environment touched)."""
        if self._session is None:
            raise EmulatorError("the stack is not started")
        return self._session.client(service, **kwargs)

    def worker_pids(self) -> list[int]:
        workers = [lid for lid, role in self._roles.items() if role == "worker" and lid in self.pools]
        return [pid for lid in workers for pid in self.pools[lid].pids()]

    def invocations(self, function: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Recent invocation records, oldest first: function, request_id, pid, duration_ms, outcome, error."""
        out: list[Invocation] = []
        for logical_id, pool in self.pools.items():
            if function is None or function == logical_id:
                out.extend(list(pool.invocations))
        out.sort(key=lambda inv: inv.started_at)
        if limit is not None:
            out = out[-limit:]
        return [inv.record() for inv in out]

    def source_dirs(self, extra: Iterable[str | Path] = ()) -> list[Path]:
        """Where the functions' code comes from: what `loom up --reload` watches.

        The SOURCES the functions' package is built from (as the Makefile builds it for
        Lambda), every other PYTHONPATH entry the functions get, and ``extra``.
        """
        if self.package is None:
            raise EmulatorError("the stack is not started")
        dirs = [Path(name) if Path(name).is_absolute() else ROOT / name for name in self.package.sources]
        for env in self._envs.values():
            for entry in env.get("PYTHONPATH", "").split(os.pathsep):
                if entry and Path(entry).resolve() != ROOT:
                    dirs.append(Path(entry))
        dirs += [Path(d) for d in extra]
        out: list[Path] = []
        for d in dirs:
            d = d.resolve()
            if d.is_dir() and d not in out:
                out.append(d)
        return out

    def reload_functions(self, changed: list[str] | None = None) -> None:
        """Replace every function process so the next invocations import the code afresh."""
        self._log.info("functions.reloading", changed=(changed or [])[:10])
        # The functions run from a built package: rebuild it (cached by content) first.
        self.package = build_package(self.state_dir, self.options.sources)
        for pool in self.pools.values():
            pool.package = self.package
            pool.recycle()
        self.write_stack_file()

    def deploy_env(self, values: Mapping[str, str]) -> dict[str, str | None]:
        """A deploy that changes only the functions' configuration: every function gets these
        variables and every process is replaced, as a Lambda configuration update replaces its
        environments (a busy one finishes its invocation first, and the deploy waits for it). The
        values it had, None where unset."""
        self._log.info("functions.deploying_env", names=sorted(values))
        previous = {name: next(iter(self._envs.values()), {}).get(name) for name in values}
        for logical_id, env in self._envs.items():
            env.update(values)
            if logical_id in self.pools:
                self.pools[logical_id].env.update(values)
        with ThreadPoolExecutor(max_workers=max(1, len(self.pools))) as ex:
            list(ex.map(lambda p: p.recycle(), self.pools.values()))
        # Done when no invocation still runs the old configuration (a sweep under way would
        # otherwise act on the old definitions after the deploy returned).
        for pool in self.pools.values():
            if not pool.wait_recycled(pool.timeout + 5):
                raise EmulatorError(f"{pool.function}: a process of the old configuration still runs")
        return previous

    def invoke(self, logical_id: str, event: Any) -> Invocation:
        """Invoke one of the stack's functions directly (as ``aws lambda invoke`` would)."""
        return self.pools[logical_id].invoke(event)

    def set_sqs_standard_chaos(self, rate: float) -> float:
        """Turn standard-queue delivery on (rate > 0) or off (0) while the stack runs; the previous rate."""
        if self._esm is None:
            raise EmulatorError("the stack has no SQS-triggered function")
        previous = self._esm.chaos.rate
        self._esm.chaos.set_rate(rate)
        self._log.info("esm.standard_queue_chaos", rate=rate, seed=self._esm.chaos.seed)
        return previous

    def sqs_chaos_counts(self) -> dict[str, int]:
        """What standard-queue delivery did so far: batches, reordered, held, duplicated."""
        if self._esm is None:
            return {}
        return dict(self._esm.chaos.counts().__dict__)

    def tick_sweeper(self) -> dict[str, Any]:
        """Run one sweeper invocation now, with a real scheduled event; its sweep report."""
        logical_id = self._sweeper_id()
        inv = self.pools[logical_id].invoke(scheduled_event(self._rule_arn(logical_id), self.options.region))
        if inv.outcome != "ok":
            raise FunctionFailed(inv)
        return as_object(inv.result, "the sweeper's answer")

    def advance_time(self, seconds: float) -> float:
        """Move every function's clock forward; the new offset in seconds."""
        return offset_clock.advance(self.clock_offset_file, seconds)

    def reset_time(self) -> float:
        return offset_clock.reset(self.clock_offset_file)

    def time_offset(self) -> float:
        return offset_clock.read_offset(self.clock_offset_file)
