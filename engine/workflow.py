"""What users write: steps, sleeps, workflows, and the registry that holds them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from engine.errors import UnknownWorkflow, WorkflowDefinitionError
from engine.retry import RetryPolicy

Semantics = Literal["at_least_once", "at_most_once"]
SEMANTICS: tuple[str, ...] = ("at_least_once", "at_most_once")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Lambda's longest timeout: a step that needs more can never start in one invocation.
MAX_STEP_TIMEOUT = 900.0


@dataclass(frozen=True)
class StepContext:
    """What a step sees. ``data`` is the input merged with every earlier result."""

    execution_id: str
    workflow: str
    step_index: int
    step_name: str
    attempt: int
    data: Mapping[str, Any]
    log: Any
    services: Mapping[str, Any] = field(default_factory=dict)

    @property
    def idempotency_key(self) -> str:
        # Stable across attempts and redeliveries: side effects key on this.
        return f"{self.execution_id}:{self.step_index}"


StepFn = Callable[[StepContext], "dict[str, Any] | None"]


@dataclass(frozen=True)
class StepSpec:
    fn: StepFn
    name: str
    retry: RetryPolicy | None = None
    semantics: Semantics = "at_least_once"
    # Longest the step may run, in seconds: it starts only when the invocation has this
    # much left plus the reserve (None: the workflow's ``step_timeout``, else the reserve only).
    timeout: float | None = None

    @property
    def is_sleep(self) -> bool:
        return False


@dataclass(frozen=True)
class SleepSpec:
    seconds: float
    name: str

    @property
    def is_sleep(self) -> bool:
        return True


Spec = StepSpec | SleepSpec


def step(
    fn: StepFn,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    semantics: Semantics = "at_least_once",
    timeout: float | None = None,
) -> StepSpec:
    if not callable(fn):
        raise WorkflowDefinitionError(f"step {fn!r} is not callable")
    if semantics not in SEMANTICS:
        raise WorkflowDefinitionError(f"semantics must be one of {SEMANTICS}, not {semantics!r}")
    return StepSpec(
        fn=fn, name=name or fn.__name__, retry=retry, semantics=semantics, timeout=check_timeout(timeout, "timeout")
    )


def check_timeout(value: object, what: str) -> float | None:
    """A step timeout in seconds: None, or a finite number in (0, MAX_STEP_TIMEOUT]."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_STEP_TIMEOUT
    ):
        raise WorkflowDefinitionError(f"{what} must be a number of seconds in (0, {MAX_STEP_TIMEOUT:g}], not {value!r}")
    return float(value)


def sleep(
    *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0, name: str | None = None
) -> SleepSpec:
    total = seconds + 60 * minutes + 3600 * hours + 86400 * days
    if total <= 0:
        raise WorkflowDefinitionError("sleep needs a positive duration")
    return SleepSpec(seconds=float(total), name=name or f"sleep_{_human(total)}")


def _human(total: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size and total % size == 0:
            return f"{int(total // size)}{unit}"
    return f"{total:g}s"


@dataclass(frozen=True)
class WorkflowSpec:
    name: str
    steps: tuple[Spec, ...]
    retry: RetryPolicy
    # The timeout of steps that declare none.
    step_timeout: float | None = None

    def policy_for(self, spec: StepSpec) -> RetryPolicy:
        return spec.retry or self.retry

    def timeout_for(self, spec: StepSpec) -> float | None:
        return spec.timeout if spec.timeout is not None else self.step_timeout

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "steps": [
                {"index": i, "name": s.name, "kind": "sleep", "seconds": s.seconds}
                if isinstance(s, SleepSpec)
                else {
                    "index": i,
                    "name": s.name,
                    "kind": "step",
                    "semantics": s.semantics,
                    "timeout": self.timeout_for(s),
                }
                for i, s in enumerate(self.steps)
            ],
        }


def build_spec(
    name: str, steps: Any, retry: RetryPolicy | None = None, step_timeout: float | None = None
) -> WorkflowSpec:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise WorkflowDefinitionError(f"workflow name {name!r} must match {NAME_RE.pattern}")
    if not steps:
        raise WorkflowDefinitionError(f"workflow {name!r} has no steps")
    specs: list[Spec] = []
    for item in steps:
        if isinstance(item, (StepSpec, SleepSpec)):
            specs.append(item)
        elif callable(item):
            specs.append(step(item))
        else:
            raise WorkflowDefinitionError(f"workflow {name!r}: {item!r} is not a step")
    if len(specs) > 999:
        raise WorkflowDefinitionError("a workflow has at most 999 steps")
    return WorkflowSpec(
        name=name,
        steps=tuple(specs),
        retry=retry or RetryPolicy(),
        step_timeout=check_timeout(step_timeout, f"workflow {name!r}: step_timeout"),
    )


class Registry:
    """Workflows by name. Registering a name twice is an error, not an override."""

    def __init__(self) -> None:
        self._specs: dict[str, WorkflowSpec] = {}

    def add(self, spec: WorkflowSpec) -> WorkflowSpec:
        existing = self._specs.get(spec.name)
        if existing is not None and existing != spec:
            raise WorkflowDefinitionError(f"workflow {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> WorkflowSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownWorkflow(
                f"unknown workflow {name!r}; registered: {sorted(self._specs)}", workflow=name
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[WorkflowSpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.name))

    def names(self) -> Mapping[str, WorkflowSpec]:
        return MappingProxyType(self._specs)


#: Where ``@workflow`` registers by default; handlers load user modules into it.
default_registry = Registry()


def workflow(name: str, *, registry: Registry | None = None) -> Callable[[type], type]:
    """Class decorator: ``steps = [...]``, optional ``retry = RetryPolicy(...)`` and ``step_timeout = 30``."""

    def register(cls: type) -> type:
        spec = build_spec(
            name, getattr(cls, "steps", None), getattr(cls, "retry", None), getattr(cls, "step_timeout", None)
        )
        (registry or default_registry).add(spec)
        cls.spec = spec  # type: ignore[attr-defined]
        return cls

    return register
