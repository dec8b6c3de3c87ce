"""Starting the stacks the kit drives: chaos-friendly settings, the throttling proxy in front."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from chaos.target import WORKFLOW_MODULES, Target
from chaos.throttle import ThrottleProxy
from loom.local.lambdas.package import makefile_sources
from loom.local.stack import LocalStack, StackOptions

# Small numbers so that every recovery path (redelivery, lease, sweeper) fires in seconds.
LEASE_SECONDS = 6
QUEUE_VISIBILITY = 3
WORKER_TIMEOUT = 10  # below the 10 s chain reserve: every step travels as its own message
TICK = 1.0


def chaos_env(*, heartbeat: float | None = 1.0, lease: float = LEASE_SECONDS) -> dict[str, str]:
    env = {
        "LOOM_LEASE_SECONDS": str(lease),
        "LOOM_WORKFLOW_MODULES": WORKFLOW_MODULES,
        "LOOM_LOG_LEVEL": "WARNING",
        "LOOM_VISIBILITY_TIMEOUT": str(QUEUE_VISIBILITY + 1),
    }
    if heartbeat is not None:
        env["LOOM_HEARTBEAT_SECONDS"] = str(heartbeat)
    return env


@contextlib.contextmanager
def chaos_stack(
    *,
    emulator: str = "embedded",
    heartbeat: float | None = 1.0,
    workers: int = 2,
    extra_env: Mapping[str, str] | None = None,
    state_dir: Path | None = None,
    seed: int = 0,
    sqs_standard_chaos: float = 0.0,
    sqs_chaos_seed: int = 0,
) -> Iterator[Target]:
    """A LocalStack of its own with the crash hook on and the throttling proxy in front of the emulator."""
    with contextlib.ExitStack() as stack_ctx:
        proxy = stack_ctx.enter_context(ThrottleProxy(seed=seed))
        if state_dir is None:
            state_dir = Path(stack_ctx.enter_context(tempfile.TemporaryDirectory(prefix="loom-chaos-")))
        # Every service through the proxy, DynamoDB too when the stack serves it apart (host-mode LocalStack).
        env = {
            **chaos_env(heartbeat=heartbeat),
            "AWS_ENDPOINT_URL": proxy.url,
            "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
            **(extra_env or {}),
        }
        opts: Any = StackOptions(
            emulator=emulator,
            host="127.0.0.1",
            port=0,
            api_port=0,
            workers=workers,
            tick=TICK,
            state_dir=state_dir,
            env=env,
            function_env={"WorkerFunction": {"LOOM_CHAOS_CRASH_AFTER_CHECKPOINT": "on"}},
            # The functions load chaos.workflows: package it, as `SOURCES='... chaos' sam build` does.
            sources=(*makefile_sources(), "chaos"),
            timeouts={"WorkerFunction": WORKER_TIMEOUT},
            queue_visibility_timeout=QUEUE_VISIBILITY,
            log_file=state_dir / "stack.log",
            write_stack_file=False,
            # On a LocalStack that `loom up` may share, the kit's resources get names of their own.
            parameters={"Stage": "chaos"} if emulator == "localstack" else {},
            # Standard-queue delivery (reordered, sometimes duplicated) for the whole run when asked.
            sqs_standard_chaos=sqs_standard_chaos,
            sqs_chaos_seed=sqs_chaos_seed,
        )
        stack = stack_ctx.enter_context(LocalStack(opts))
        proxy.routes.update(stack.service_endpoints)
        proxy.upstream = stack.endpoint_url
        yield Target.from_stack(stack, proxy=proxy, owned=True)
