"""What a restart of ``loom up`` needs to come back the same: ``<state dir>/stack_settings.json``.

The data in the state dir outlives a restart; the stack's template parameters (``--parameter
WorkflowModules=...``) and its package's ``SOURCES`` used to live only on the command line and
in the shell. A restart without them registered other workflows: an execution in flight then
lost its pending steps and its callback tokens. So the last successful ``loom up`` writes what
it ran with here, and the next one reuses what it is not told (and says so in one line).

- ``--parameter NAME=VALUE`` overrides the remembered value, and is remembered;
- ``--parameter NAME=`` (no value) forgets NAME: the template's default applies again;
- ``$SOURCES`` set overrides the remembered package list, and is remembered;
- ``--forget-parameters`` forgets everything remembered; only this command line counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from loom.local import private

FILENAME = "stack_settings.json"


class SettingsError(ValueError):
    """The remembered settings cannot be read: the message names the file and the way out."""


@dataclass(frozen=True)
class Settings:
    parameters: Mapping[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] | None = None  # None: the Makefile's default SOURCES


@dataclass(frozen=True)
class Resolved:
    """What this ``loom up`` runs with, and which of it came from the last one."""

    settings: Settings
    reused: tuple[str, ...] = ()  # "NAME=VALUE" and "SOURCES=..." taken from the saved settings
    forgotten: tuple[str, ...] = ()  # parameter names given empty: back to the template's default


def path(directory: Path) -> Path:
    return directory / FILENAME


def resolve(
    saved: Settings | None, given: Mapping[str, str], env_sources: str | None, *, forget: bool = False
) -> Resolved:
    """This command line over the remembered settings (none when ``forget``); pure."""
    base = Settings() if saved is None or forget else saved
    forgotten = tuple(sorted(k for k, v in given.items() if v == ""))
    parameters = {k: v for k, v in {**base.parameters, **given}.items() if v != ""}
    reused = [f"{k}={v}" for k, v in sorted(base.parameters.items()) if k not in given]
    listed = tuple((env_sources or "").split())
    sources = listed or base.sources
    if not listed and base.sources:
        reused.append(f"SOURCES={' '.join(base.sources)}")
    return Resolved(Settings(parameters, sources), tuple(reused), forgotten)


def reuse_line(resolved: Resolved, where: Path) -> str | None:
    """The one line ``loom up`` prints when it reuses or forgets something; None when neither."""
    if not resolved.reused and not resolved.forgotten:
        return None
    parts = []
    if resolved.reused:
        parts.append(f"reusing the last `loom up`'s {', '.join(resolved.reused)}")
    if resolved.forgotten:
        parts.append(f"forgot {', '.join(resolved.forgotten)} (the template's default now)")
    return (
        f"loom: {'; '.join(parts)} (from {where}; --parameter NAME=VALUE overrides, NAME= forgets one, "
        "--forget-parameters all)"
    )


def read(directory: Path) -> Settings | None:
    """The settings the last successful ``loom up`` here ran with; None before the first."""
    target = path(directory)
    try:
        with open(target, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SettingsError(f"{target} cannot be read ({exc}); pass --forget-parameters to start over") from None
    wrong = SettingsError(f"{target} is not what `loom up` writes; pass --forget-parameters to start over")
    if not isinstance(raw, dict):
        raise wrong
    parameters, sources = raw.get("parameters", {}), raw.get("sources")
    if not _strings(parameters):
        raise wrong
    if sources is None:
        return Settings(dict(parameters), None)
    if not _string_list(sources):
        raise wrong
    return Settings(dict(parameters), tuple(sources))


def _strings(value: object) -> TypeGuard[dict[str, str]]:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _string_list(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def write(settings: Settings, directory: Path) -> Path:
    """Owner-only, as the other state files; replaced whole, so a reader never sees half."""
    target = path(directory)
    private.private_dir(target.parent)
    tmp = target.with_suffix(".tmp")
    body = {
        "parameters": dict(settings.parameters),
        "sources": None if settings.sources is None else list(settings.sources),
    }
    with private.open_write(tmp) as fh:
        json.dump(body, fh, indent=2, sort_keys=True)
    os.replace(tmp, target)
    return target


def forget(directory: Path) -> None:
    try:
        path(directory).unlink()
    except FileNotFoundError:
        pass
