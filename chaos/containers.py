"""Under LocalStack a worker runs in a Lambda container: killing it is the kill of a worker process.

Its own module so that both the target (``kill_runner``) and the fault injectors use it without
importing each other.
"""

from __future__ import annotations

from typing import Any


def docker_kill_container(host: str = "", *, client: Any = None, limit: int = 1) -> list[str]:
    """Under LocalStack: SIGKILL the Lambda container running the worker (needs a Docker engine).

    ``host`` is the hostname a step recorded inside its container (the start of the
    container's id); without it, up to ``limit`` running worker Lambda containers are killed.
    """
    if client is None:
        import docker  # the SDK; only this path needs it

        client = docker.from_env()
    killed: list[str] = []
    for container in client.containers.list(filters={"status": "running"}):
        if host:
            chosen = container.id.startswith(host)
        else:
            name = container.name.lower()
            chosen = "lambda" in name and "worker" in name
        if chosen and len(killed) < limit:
            container.kill(signal="SIGKILL")
            killed.append(container.name)
    return killed
