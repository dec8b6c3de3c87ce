"""Three ways to build the console: around the stack in this process (``loom up``), around the
running local stack's stack.json (``loom console``), or around a deployed Function URL
(``loom console --url``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from chaos.target import Target as ChaosTarget
from loom.client import ControlPlane, Target, resolve_target
from loom.console.kit import Kit
from loom.console.proxy import Proxy
from loom.console.server import ConsoleServer

DEFAULT_PORT = 5232  # beside the emulator (5230) and the control plane (5231)
LIST_LIMIT = 500


def _lister(client: ControlPlane) -> Callable[[str, float], list[str]]:
    """Execution ids with a prefix, created since a moment: through the API like everything else."""

    def list_ids(prefix: str, since: float) -> list[str]:
        page = client.list(limit=LIST_LIMIT)
        return [
            str(ex["id"])
            for ex in page.get("executions", [])
            if str(ex.get("id", "")).startswith(prefix) and float(ex.get("created_at_epoch") or 0) >= since - 1
        ]

    return list_ids


def for_stack(stack: Any, port: int = DEFAULT_PORT) -> ConsoleServer:
    """The console of a LocalStack running in this process (``loom up``)."""
    client = ControlPlane(
        Target(stack.api_url, signed=True, region=stack.options.region, credentials=stack.principal.credentials())
    )
    chaos_target = functools.cache(lambda: ChaosTarget.from_stack(stack))
    kit = Kit(Path(stack.clock_offset_file), chaos_target, _lister(client))
    return ConsoleServer(Proxy(client), kit, port=port, mode="local")


def serve_stack(stack: Any, port: int) -> ConsoleServer:
    """The console of a stack in this process, started: the factory ``loom up`` hands the stack."""
    return for_stack(stack, port).start()


def for_stackfile(info: Mapping[str, Any], port: int = DEFAULT_PORT) -> ConsoleServer:
    """The running local stack, found in its stack.json (``loom console`` with no --url)."""
    client = ControlPlane(resolve_target(None, None))
    if info.get("emulator") == "aws" or not info.get("clock_offset_file"):
        return ConsoleServer(Proxy(client), None, port=port, mode="deployed")
    chaos_target = functools.cache(lambda: ChaosTarget.from_stackfile(info))
    kit = Kit(Path(str(info["clock_offset_file"])), chaos_target, _lister(client))
    return ConsoleServer(Proxy(client), kit, port=port, mode="local")


def for_url(url: str, region: str | None, port: int = DEFAULT_PORT) -> ConsoleServer:
    """A deployed Function URL, signed with the user's AWS credentials (default chain)."""
    client = ControlPlane(resolve_target(url, region))
    return ConsoleServer(Proxy(client), None, port=port, mode="deployed")
