"""What the chaos kit runs against: a local stack it drives, a running one, or a deployed one.

A :class:`Target` offers the same operations everywhere (start an execution,
read its state, edit the queue) and says which fault injections it cannot do
and why, so a scenario that needs one is skipped with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from chaos.containers import docker_kill_container
from engine import dead_letters
from engine.adapters.dlq import SqsDeadLetters
from engine.adapters.dynamodb import DynamoStore
from engine.adapters.ledger import DynamoLedger
from engine.adapters.sqs import SqsQueue
from engine.clock import Clock, SystemClock
from engine.config import EngineConfig
from engine.runtime import Engine
from engine.state import Execution, StepRecord
from engine.sweeper import backlog_patience
from engine.workflow import default_registry
from functions.wiring import FileOffsetClock, load_workflows
from loom import stackfile
from loom.jsonvalue import loads_object
from loom.local.emulator import clock as local_clock
from loom.local.emulator.backends import EmulatorKeys, docker_available, fake_credentials
from loom.local.emulator.client import LocalApi, call
from loom.local.emulator.sigv4 import Principal

# The kit's own calls: patient with a busy emulator, never through the throttling proxy.
KIT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 10}, connect_timeout=5, read_timeout=60)
WORKFLOW_MODULES = "workflows,chaos.workflows"

# Capabilities a scenario may need.
KILL = "kill_workers"  # SIGKILL a worker process by pid
TICK = "tick_sweeper"  # run the sweeper now
TIME = "time_travel"  # move the functions' clock forward
CRASH_HOOK = "crash_hook"  # LOOM_CHAOS_CRASH_AFTER_CHECKPOINT on in the worker
THROTTLE = "throttle"  # a throttling proxy between the functions and the AWS APIs
NEW_STACK = "new_stack"  # start another stack with other settings (heartbeat off)
CHAOS_WORKFLOWS = "chaos_workflows"  # chaos.workflows loaded by the functions
PURGE = "purge"  # PurgeQueue is allowed (real SQS: once a minute)
REDEPLOY = "redeploy"  # deploy the functions again with another environment (LocalStack.deploy_env)


class Unsupported(Exception):
    """A fault this target cannot inject; the message says why."""


@dataclass
class Target:
    kind: str  # embedded | localstack | aws
    region: str
    endpoint_url: str | None
    table: str
    queue_url: str
    dlq_url: str
    api_url: str | None = None
    api_credentials: Any = None  # botocore Credentials the local control plane accepts (SigV4)
    stack: Any = None  # a loom.local.stack.LocalStack when the kit drives one
    clock_offset_file: Path | None = None
    proxy: Any = None  # chaos.throttle.ThrottleProxy when the functions talk through it
    settings: dict[str, str] = field(default_factory=dict)  # the worker's LOOM_* environment
    missing: dict[str, str] = field(default_factory=dict)  # capability -> why it is unavailable
    sweeper_function: str | None = None  # aws: the sweeper Lambda's name
    docker_kill: bool = False  # workers are Lambda containers (LocalStack): kill them through Docker
    endpoints: dict[str, str] = field(default_factory=dict)  # service -> endpoint where not endpoint_url
    note: str = ""  # what the run should say about its emulator ("offline: DynamoDB from the embedded emulator")
    # The embedded emulator's admin key (loom.local.emulator.backends.EmulatorKeys); None: LocalStack takes any key.
    emulator_keys: Any = None

    # ------------------------------------------------------------ construction

    @classmethod
    def from_stack(cls, stack: Any, *, proxy: Any = None, owned: bool = False) -> Target:
        """A loom.local.stack.LocalStack (started)."""
        info = dict(getattr(stack, "info", {}) or {})
        refs = getattr(stack, "refs", {}) or {}
        worker_env = dict(stack.function_env("WorkerFunction"))
        kind = info.get("emulator", "embedded")
        missing: dict[str, str] = {}
        if proxy is None:
            missing[THROTTLE] = "the functions talk to the emulator directly (the kit did not start this stack)"
        if not owned:
            missing[NEW_STACK] = "the kit was handed a running stack; it starts other stacks only for itself"
        if not _flag(worker_env.get("LOOM_CHAOS_CRASH_AFTER_CHECKPOINT", "off")):
            missing[CRASH_HOOK] = "the worker runs with LOOM_CHAOS_CRASH_AFTER_CHECKPOINT=off"
        if "chaos.workflows" not in worker_env.get("LOOM_WORKFLOW_MODULES", ""):
            missing[CHAOS_WORKFLOWS] = "the functions do not load chaos.workflows (LOOM_WORKFLOW_MODULES)"
        if not hasattr(stack, "deploy_env"):
            missing[REDEPLOY] = "this stack cannot replace its function processes with another environment"
        # With either emulator the kit's stack runs its functions as local processes: kill by pid.
        offset = info.get("clock_offset_file") or worker_env.get("LOOM_CLOCK_OFFSET_FILE")
        return cls(
            kind=kind,
            region=info.get("region") or os.environ.get("AWS_REGION") or "us-east-1",
            endpoint_url=stack.endpoint_url,
            table=refs.get("Table") or info["table"],
            queue_url=refs.get("StepQueue") or info["queue_url"],
            dlq_url=refs.get("DeadLetterQueue") or info["dlq_url"],
            api_url=getattr(stack, "api_url", None) or info.get("control_plane_url"),
            api_credentials=stack.principal.credentials() if hasattr(stack, "principal") else None,
            emulator_keys=getattr(stack, "emulator_keys", None),
            stack=stack,
            clock_offset_file=Path(offset) if offset else None,
            proxy=proxy,
            settings={k: v for k, v in worker_env.items() if k.startswith("LOOM_")},
            missing=missing,
            endpoints=dict(getattr(stack, "service_endpoints", {}) or {}),
            note=str((info.get("localstack") or {}).get("dynamodb_note") or ""),
        )

    @classmethod
    def from_stackfile(cls, info: Mapping[str, Any]) -> Target:
        """A stack someone else started with ``loom up`` (read from stack.json)."""
        kind = info.get("emulator", "embedded")
        missing = {
            THROTTLE: "the functions of a running stack talk to the emulator directly",
            NEW_STACK: "running against a stack started by `loom up`",
            CRASH_HOOK: "unknown whether the running stack's worker has the crash hook on; "
            "start it with LOOM_CHAOS_CRASH_AFTER_CHECKPOINT=on or let the kit start its own",
            CHAOS_WORKFLOWS: "the running stack may not load chaos.workflows",
            REDEPLOY: "the function processes of a `loom up` stack belong to it; the kit cannot redeploy them",
        }
        offset = info.get("clock_offset_file")

        # Without the stack's credentials the control plane answers 403: use the engine API.
        stored = info.get("control_plane_credentials")
        creds = Principal.from_json(stored) if stored else None
        admin = info.get("emulator_credentials")
        return cls(
            kind=kind,
            region=info.get("region") or "us-east-1",
            endpoint_url=info.get("aws_endpoint_url"),
            table=info["table"],
            queue_url=info["queue_url"],
            dlq_url=info["dlq_url"],
            api_url=info.get("control_plane_url") if creds else None,
            api_credentials=creds.credentials() if creds else None,
            emulator_keys=EmulatorKeys.from_json(admin) if admin else None,
            clock_offset_file=Path(offset) if offset else None,
            missing=missing,
            settings={},
            endpoints=dict(info.get("aws_endpoints") or {}),
            note=str((info.get("localstack") or {}).get("dynamodb_note") or ""),
        )

    @classmethod
    def deployed(cls, stack_name: str, region: str | None = None, endpoint_url: str | None = None) -> Target:
        """A stack deployed with ``sam deploy``: its outputs name the resources, its parameters the levers."""
        session = boto3.session.Session(region_name=region)
        cfn = session.client("cloudformation")
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        params = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
        settings: dict[str, str] = {}
        if outputs.get("WorkerFunctionName"):
            config = session.client("lambda").get_function_configuration(FunctionName=outputs["WorkerFunctionName"])
            env = (config.get("Environment") or {}).get("Variables") or {}
            settings = {k: v for k, v in env.items() if k.startswith("LOOM_")}
        # AWS_ENDPOINT_URL set: the stack was deployed into LocalStack (scripts/deploy-localstack),
        # whose Lambdas run in Docker containers the kit can SIGKILL through the Docker SDK.
        # (boto3 itself honours AWS_ENDPOINT_URL for the calls below.)
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        missing = {
            TIME: "the deployed functions read real time only",
            THROTTLE: "a proxy cannot sit between Lambda and the AWS APIs",
            NEW_STACK: "deploy a second stack with LOOM_HEARTBEAT_SECONDS=0 to see the no-heartbeat half",
            REDEPLOY: "a deploy of the stack is `sam deploy`, left to a human (the kit does not change the stack)",
        }
        docker_kill = False
        if endpoint is None:
            missing[KILL] = "workers are Lambda invocations in AWS; no process to kill"
            missing[PURGE] = "PurgeQueue on a shared account queue is left to a human"
        else:
            docker_kill, why = docker_available()
            if not docker_kill:
                missing[KILL] = f"the workers are Lambda containers inside LocalStack: {why}"
        if not _flag(params.get("ChaosCrashAfterCheckpoint", "off")):
            missing[CRASH_HOOK] = "deploy with ChaosCrashAfterCheckpoint=on to enable the hook"
        if "chaos.workflows" not in params.get("WorkflowModules", ""):
            missing[CHAOS_WORKFLOWS] = (
                "deploy with WorkflowModules=workflows,chaos.workflows, "
                "built with SOURCES='engine functions workflows chaos' sam build"
            )
        return cls(
            kind="aws",
            region=session.region_name or "us-east-1",
            endpoint_url=endpoint,
            table=outputs["TableName"],
            queue_url=outputs["StepQueueUrl"],
            dlq_url=outputs["DeadLetterQueueUrl"],
            api_url=None,  # the Function URL needs SigV4; the kit uses the engine API directly
            sweeper_function=outputs.get("SweeperFunctionName"),
            settings=settings,
            missing=missing,
            docker_kill=docker_kill,
        )

    # ------------------------------------------------------------ capabilities

    def describe(self) -> str:
        """Where the run goes, for its first line: the endpoint, and any service served elsewhere."""
        where = self.endpoint_url or "AWS"
        elsewhere = ", ".join(f"{name} at {url}" for name, url in self.endpoints.items())
        if self.kind == "localstack" and self.stack is not None:
            mode = ((getattr(self.stack, "info", None) or {}).get("localstack") or {}).get("mode")
            where += f", {mode} mode" if mode else ""
        return where + (f"; {self.note}" if self.note else "") + (f" ({elsewhere})" if elsewhere else "")

    def can(self, capability: str) -> bool:
        return capability not in self.missing

    def why_not(self, *capabilities: str) -> str | None:
        reasons = [f"{c}: {self.missing[c]}" for c in capabilities if c in self.missing]
        return "; ".join(reasons) or None

    # ------------------------------------------------------------ AWS clients

    @cached_property
    def session(self) -> Any:
        if self.kind == "aws":
            return boto3.session.Session(region_name=self.region)
        if self.emulator_keys is not None:
            return self.emulator_keys.session(self.region)  # the embedded emulator checks signatures

        creds = fake_credentials(self.region)
        return boto3.session.Session(
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=creds.get("AWS_SESSION_TOKEN"),
            region_name=self.region,
        )

    def client(self, service: str) -> Any:
        return self.session.client(
            service, endpoint_url=self.endpoints.get(service, self.endpoint_url), config=KIT_CONFIG
        )

    @cached_property
    def ddb(self) -> Any:
        return self.client("dynamodb")

    @cached_property
    def sqs(self) -> Any:
        return self.client("sqs")

    @cached_property
    def shards(self) -> int:
        return int(self.settings.get("LOOM_SHARDS", "4"))

    @cached_property
    def lease(self) -> float:
        return float(self.settings.get("LOOM_LEASE_SECONDS") or EngineConfig.lease_seconds)

    @cached_property
    def settle_seconds(self) -> float:
        """How long an ended child may stay in the due index once its parent has its notice.

        A sweep that finds the parent still waiting sends the notice again and keeps the child
        due for a backlog's patience (15 leases: sent is not taken); the first sweep after the
        parent took it removes the child. Patience, two leases for the sweeps and a margin.
        """
        patience = backlog_patience(EngineConfig(lease_seconds=self.lease), parked=False)
        return max(60.0, patience + 2 * self.lease + 30)

    @cached_property
    def sweep_interval(self) -> float:
        """Seconds between the stack's own sweeper runs (the template's schedule is 1 minute)."""
        tick = getattr(getattr(self.stack, "options", None), "tick", None)
        return float(tick) if tick else 60.0

    @cached_property
    def store(self) -> DynamoStore:
        return DynamoStore(self.ddb, self.table, self.shards)

    @cached_property
    def ledger(self) -> DynamoLedger:
        return DynamoLedger(self.ddb, self.table)

    @cached_property
    def queue(self) -> SqsQueue:
        return SqsQueue(self.sqs, self.queue_url, self.dlq_url)

    def clock(self) -> Clock:
        if self.clock_offset_file is not None:
            return FileOffsetClock(str(self.clock_offset_file))
        return SystemClock()

    @cached_property
    def engine(self) -> Engine:
        """An engine with no workers: starts executions and redrives like the control plane does."""
        load_workflows(tuple(WORKFLOW_MODULES.split(",")))
        return Engine(
            registry=default_registry,
            store=self.store,
            queue=self.queue,
            clock=self.clock(),
            config=EngineConfig(shards=self.shards, lease_seconds=self.lease),
            services={"ledger": self.ledger},
        )

    # ------------------------------------------------------------ executions

    def start(self, workflow: str, input: dict[str, Any], execution_id: str) -> str:
        """Start through the control plane when there is one (it is what users call)."""
        if self.api_url:
            body = {"workflow": workflow, "input": input, "execution_id": execution_id}
            status, answer = self.http("POST", "/executions", body)
            if status not in (200, 201):
                raise RuntimeError(f"POST /executions answered {status}: {answer}")
            return str(answer.get("id", execution_id))
        ex, _ = self.engine.start(workflow, input, execution_id)
        return ex.id

    def get(self, execution_id: str) -> Execution | None:
        return self.store.get_execution(execution_id)

    def status_of(self, execution_id: str) -> str | None:
        """The execution's status (its value), None when there is no such execution."""
        ex = self.get(execution_id)
        return ex.status.value if ex is not None else None

    def get_many(self, execution_ids: list[str]) -> list[Execution]:
        """Many executions in a request a hundred: a watcher of a thousand executions would
        otherwise keep the emulator busy with a GetItem per execution per pass."""
        return self.store.get_executions(execution_ids)

    def history(self, execution_id: str) -> list[StepRecord]:
        return sorted(self.store.history(execution_id), key=lambda r: r.index)

    def entries(self, execution_id: str) -> dict[str, dict[str, Any]]:
        return self.ledger.entries(execution_id)

    def api_status(self, execution_id: str) -> str | None:
        """The status the control plane reports (None without one)."""
        if not self.api_url:
            return None
        status, answer = self.http("GET", f"/executions/{execution_id}")
        return answer.get("status") if status == 200 else f"HTTP {status}"

    def redrive_dlq(self) -> dict[str, Any]:
        """What ``loom dlq redrive`` does: through the control plane, else the same library call."""
        if self.api_url:
            status, answer = self.http("POST", "/dlq/redrive?limit=50")
            if status != 200:
                raise RuntimeError(f"POST /dlq/redrive answered {status}: {answer}")
            return answer

        results = dead_letters.redrive(self.engine, SqsDeadLetters(self.sqs, self.dlq_url), 50)
        return {"results": [r.__dict__ for r in results], "summary": dead_letters.summarize(results)}

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """A SigV4-signed call to the local control plane, as the CLI makes it."""
        assert self.api_url and self.api_credentials is not None
        status, answer = call(LocalApi(self.api_url, self.api_credentials, self.region), method, path, body, 60)
        return status, answer if isinstance(answer, dict) else {}

    # ------------------------------------------------------------ stack levers

    def worker_pids(self) -> list[int]:
        """The worker processes on this machine (none when the workers are Lambdas)."""
        if self.kind == "aws":
            return []
        if self.stack is not None:
            return list(self.stack.worker_pids())

        info = stackfile.read() or {}
        return list(info.get("worker_pids") or [])

    def kill(self, pid: int) -> bool:
        """SIGKILL one worker process; False if it was already gone."""
        if not self.can(KILL) or self.docker_kill:
            raise Unsupported(self.missing.get(KILL) or "the workers are containers: use kill_runner")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def kill_runner(self, pid: int, host: str | None = None) -> tuple[bool, str]:
        """SIGKILL whatever runs a step: its process here, or its Lambda container under LocalStack.

        ``pid`` and ``host`` are what the step recorded (os.getpid(), socket.gethostname());
        a container's hostname is the start of its id. Returns (killed, what was killed).
        """
        if self.docker_kill:
            killed = docker_kill_container(host or "")
            return bool(killed), f"container {', '.join(killed) or host}"
        return self.kill(pid), f"pid {pid}"

    @contextlib.contextmanager
    def standard_delivery(self, rate: float) -> Iterator[dict[str, Any]]:
        """Standard-queue delivery (reordered, sometimes duplicated) for the block; what it did lands in the dict.

        The kit's own stack turns it on in its event source (raising a lower rate for the block).
        AWS's queues do it already; a stack someone else runs is left as it is.
        """
        report: dict[str, Any] = {"mode": "sqs" if self.kind == "aws" else "as-is"}
        stack = self.stack
        if stack is None or not hasattr(stack, "set_sqs_standard_chaos"):
            yield report
            return
        before = stack.sqs_chaos_counts()
        previous = stack.set_sqs_standard_chaos(max(rate, stack.info.get("sqs_standard_chaos") or 0.0))
        report["mode"] = "local-esm"
        try:
            yield report
        finally:
            stack.set_sqs_standard_chaos(previous)
            after = stack.sqs_chaos_counts()
            report.update({k: after[k] - before.get(k, 0) for k in after})

    def redeploy(self, env: Mapping[str, str]) -> dict[str, str | None]:
        """Deploy the functions again with these variables set (every process replaced); what they were."""
        if not self.can(REDEPLOY):
            raise Unsupported(self.missing[REDEPLOY])
        return dict(self.stack.deploy_env(env))

    def advance_time(self, seconds: float) -> None:
        if not self.can(TIME):
            raise Unsupported(self.missing[TIME])
        if self.stack is not None and hasattr(self.stack, "advance_time"):
            self.stack.advance_time(seconds)
            return
        if self.clock_offset_file is None:
            raise Unsupported("this stack has no clock offset file")

        local_clock.advance(self.clock_offset_file, seconds)

    def tick_sweeper(self) -> dict[str, Any]:
        """One sweeper run now, the way the stack runs it."""
        if self.stack is not None and hasattr(self.stack, "tick_sweeper"):
            return dict(self.stack.tick_sweeper() or {})
        if self.kind == "aws" and self.sweeper_function:
            answer = self.session.client("lambda").invoke(FunctionName=self.sweeper_function, Payload=b"{}")
            return loads_object(answer["Payload"].read() or b"{}", "the sweeper function's answer")
        return sweep_in_subprocesses(self, 1)[0]

    def sweeper_env(self) -> dict[str, str]:
        """The sweeper function's environment (what a second sweeper Lambda would get)."""
        if self.stack is not None:
            env = dict(self.stack.function_env("SweeperFunction"))
        else:
            env = {
                "LOOM_TABLE_NAME": self.table,
                "LOOM_QUEUE_URL": self.queue_url,
                "LOOM_DLQ_URL": self.dlq_url,
                "LOOM_WORKFLOW_MODULES": WORKFLOW_MODULES,
                **self.settings,
            }
            if self.endpoint_url:
                env["AWS_ENDPOINT_URL"] = self.endpoint_url
                env.update({f"AWS_ENDPOINT_URL_{name.upper()}": url for name, url in self.endpoints.items()})
                if self.kind != "aws":
                    # An emulator takes any key; the caller's shell may have none (or real ones,
                    # which must not go to an emulator), as the stack's own functions get fake ones.

                    keys = self.emulator_keys
                    env.update(keys.env(self.region) if keys is not None else fake_credentials(self.region))
            if self.clock_offset_file:
                env["LOOM_CLOCK_OFFSET_FILE"] = str(self.clock_offset_file)
        env.setdefault("AWS_REGION", self.region)
        env.setdefault("AWS_DEFAULT_REGION", self.region)
        return env


def sweep_in_subprocesses(
    target: Target, count: int, *, at: float | None = None, span: float = 0.0
) -> list[dict[str, Any]]:
    """Run ``count`` sweeper handlers in separate processes, all released at the same instant.

    Each process imports the handler and builds its engine first, then waits for
    ``at`` (wall clock), so the sweeps really overlap, as two scheduled Lambda
    invocations would. With ``span`` each process sweeps back to back for that many seconds
    (its report sums the sweeps', ``sweeps`` says how many).
    """
    at = at if at is not None else time.time() + 2.5
    return _reports(_sweepers(target, count, ["--at", repr(at), "--for", repr(span)]))


def sweep_when_ready(
    target: Target, count: int, *, span: float, lead: float, before: Callable[[float], None]
) -> tuple[float, list[dict[str, Any]]]:
    """As ``sweep_in_subprocesses``, released ``lead`` seconds after every process is ready
    (its imports done and its first request made), however long that took; ``before(release)``
    runs first (a scenario moves the clock there). The release instant and the reports."""
    with tempfile.TemporaryDirectory(prefix="loom-sweep-") as folder:
        go = Path(folder) / "go"
        procs = _sweepers(target, count, ["--go", str(go), "--for", repr(span)])
        deadline = time.monotonic() + 120
        while len(list(Path(folder).glob("go.ready.*"))) < count:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                break  # a process died or hangs: its report (or its error) says so below
            time.sleep(0.02)
        release = time.time() + lead
        before(release)
        (Path(folder) / "go.tmp").write_text(repr(release))
        (Path(folder) / "go.tmp").rename(go)  # all at once: no process reads half a number
        return release, _reports(procs)


def _sweepers(target: Target, count: int, extra: list[str]) -> list[subprocess.Popen[str]]:
    env = {**os.environ, **target.sweeper_env()}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "chaos.sweep_once", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        for _ in range(count)
    ]


def _reports(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"sweeper process failed ({proc.returncode}): {err[-2000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def _flag(value: str) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")
