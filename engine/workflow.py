"""What users write: steps, sleeps, workflows, and the registry that holds them."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from engine import batch_result
from engine.batch_result import BatchResult
from engine.errors import DefinitionChanged, UnknownWorkflow, WorkflowDefinitionError
from engine.poll_strategy import Exponential, Fixed, PollStrategy
from engine.poll_strategy import exponential as exponential  # re-exported: the authoring API
from engine.poll_strategy import fixed as fixed
from engine.retry import RetryPolicy, for_wait, retries_timeouts
from engine.schedule_expr import CatchUp
from engine.schedule_expr import parse as parse_schedule
from engine.serde import DEFAULT, Serializer, check_input_type, check_serializer
from engine.state import canonical_json

if TYPE_CHECKING:
    from engine.state import Execution


class Phase(StrEnum):
    """What a step's function is run for: the step itself, its compensation, or its catch handler."""

    FORWARD = "forward"
    COMPENSATE = "compensate"
    CATCH = "catch"


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
    # While a compensation runs (engine/compensation.py): the compensated step's committed
    # result, and the failure (or cancel) that started the compensation.
    phase: Phase = Phase.FORWARD
    result: Mapping[str, Any] | None = None
    failure: Mapping[str, Any] | None = None
    # An item of a fan-out step (engine/fanout.py): its value and index (a branch's index).
    item: Any = None
    item_index: int | None = None
    # Reads a fan-out step's stored results, paged: (step index, start, count) -> results.
    pages: Callable[[int, int, int], list[Any]] | None = None
    # Reads a callback handle's token: (index of the step that created it) -> token.
    tokens: Callable[[int], str] | None = None

    def callback_token(self, name: str) -> str:
        """The token of callback handle ``name`` (``create_callback``), to hand to the outside
        world; the same on every call and every retry. The context holds only its handle."""
        value = self.data.get(name)
        if not (isinstance(value, Mapping) and value.get("$loom") == "callback"):
            raise KeyError(f"{name!r} holds no callback handle (is it created by an earlier create_callback?)")
        if self.tokens is None:
            raise RuntimeError("this context cannot read callback tokens")
        return self.tokens(int(value["step"]))

    # Typed reads (engine/serde.py): the step's serializer, and the execution's input as started
    # (the stored dict itself: ``input`` copies it only when a step reads it).
    serializer: Serializer = DEFAULT
    _input: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def input(self) -> Mapping[str, Any]:
        """The execution's input as started, a read-only copy (the context changes; this does not)."""
        return MappingProxyType(json.loads(canonical_json(self._input)))

    def get(self, name: str, type_: Any = None) -> Any:
        """``data[name]``, loaded as ``type_`` through the serializer (as stored without one)."""
        value = self.data[name]
        return value if type_ is None else self.serializer.load(_plain(value), type_)

    def input_as(self, type_: Any) -> Any:
        """The execution's input as ``type_`` (the workflow's ``input_type`` checked it at start)."""
        return self.serializer.load(_plain(self.input), type_)

    @property
    def idempotency_key(self) -> str:
        # Stable across attempts and redeliveries: side effects key on this. A compensation
        # or a catch handler has its own, so that it never dedupes against the forward step.
        base = f"{self.execution_id}:{self.step_index}"
        if self.item_index is not None:
            base = f"{base}:{self.item_index}"
        if self.phase is Phase.FORWARD:
            return base
        return f"{base}:{self.phase.value}"

    def results(self, name: str, page_size: int = 100) -> Iterator[Any]:
        """The results of fan-out step ``name`` in item order, whether the context holds the
        list or only the marker of results too big for it (then read ``page_size`` at a time)."""
        value = self.data.get(name)
        if isinstance(value, list):
            yield from value
            return
        if not (isinstance(value, Mapping) and value.get("$loom") == "results"):
            raise KeyError(f"{name!r} holds no fan-out results")
        if self.pages is None:
            raise RuntimeError("this context cannot read stored fan-out results")
        step_index, count = int(value["step"]), int(value["count"])
        for start in range(0, count, max(1, page_size)):
            yield from self.pages(step_index, start, min(page_size, count - start))

    def batch(self, name: str) -> BatchResult:
        """The batch result of fan-out step ``name``: why it closed, how many items succeeded,
        failed or never started, and the first failures (engine/batch_result.py)."""
        return batch_result.read(self.data, name)


def _plain(value: Any) -> Any:
    # The context is read-only (MappingProxyType); a loader sees plain dicts, as JSON gives them.
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


StepFn = Callable[[StepContext], Any]
# ``handler(ctx, error)``: ``error`` is the failure as the history recorded it (type, message...).
CatchFn = Callable[[StepContext, "dict[str, Any]"], "dict[str, Any] | None"]


@dataclass(frozen=True)
class StepSpec:
    fn: StepFn
    name: str
    retry: RetryPolicy | None = None
    semantics: Semantics = "at_least_once"
    # Longest the step may run, in seconds: it starts only when the invocation has this
    # much left plus the reserve (None: the workflow's ``step_timeout``, else the reserve only).
    timeout: float | None = None
    # Saga compensation: runs (reverse order, once per commit) if the execution fails for
    # good or is cancelled with compensate; its own retry policy (None: the workflow's).
    compensate: StepFn | None = None
    compensate_retry: RetryPolicy | None = None
    # Runs as a durable step when this step fails for good; the workflow then goes on.
    catch: CatchFn | None = None
    # Dumps a typed result to JSON and loads typed reads (None: the workflow's, else DEFAULT).
    serializer: Serializer | None = None

    @property
    def is_sleep(self) -> bool:
        return False

    def describe_fan(self, spec: WorkflowSpec) -> dict[str, Any] | None:
        """A fan-out step's own description (engine/fanout_spec.py); None for any other step."""
        return None


@dataclass(frozen=True)
class SleepSpec:
    seconds: float
    name: str

    @property
    def is_sleep(self) -> bool:
        return True


class _NotYet:
    """What a ``wait_until`` check returns while the awaited thing is not done."""

    _instance: _NotYet | None = None

    def __new__(cls) -> _NotYet:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_YET"

    def __reduce__(self) -> str:
        return "NOT_YET"


#: Return this from a ``wait_until`` check to be called again after ``every``.
NOT_YET = _NotYet()


@dataclass(frozen=True)
class NotYet:
    """What a stateful check returns to be called again with ``state`` (``not_yet(state)``)."""

    state: Any


def not_yet(state: Any) -> NotYet:
    """Not done yet: checkpoint ``state`` (JSON) and pass it to the next check."""
    return NotYet(state)


def _no_submit(ctx: StepContext, token: str) -> None:
    return None


def _nothing(ctx: StepContext) -> None:
    return None


def _empty_input(ctx: StepContext) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class CallbackSpec(StepSpec):
    """``submit(ctx, token)`` hands the token out; the step then waits for its completion."""

    submit: Callable[[StepContext, str], Any] = _no_submit
    # The wait's overall timeout (``timeout`` of StepSpec is how long the body may run).
    wait_timeout: float | None = None
    heartbeat_timeout: float | None = None


@dataclass(frozen=True)
class SignalSpec(StepSpec):
    """Waits for one signal named ``signal``; its payload is the step's result."""

    signal: str = ""
    wait_timeout: float | None = None


@dataclass(frozen=True)
class PollSpec(StepSpec):
    """``fn`` is the check: a result when done, ``NOT_YET`` (or ``not_yet(state)``) to be
    called again after the strategy's delay. A stateful poll (``state_json`` set: the initial
    state, as canonical JSON so that the spec stays immutable) calls ``fn(ctx, state)``."""

    strategy: PollStrategy = field(default_factory=lambda: Fixed(60.0))
    wait_timeout: float | None = None
    max_checks: int | None = None
    state_json: str | None = None

    @property
    def every(self) -> float:
        """The first delay (the console's "checks every")."""
        return self.strategy.seconds if isinstance(self.strategy, Fixed) else self.strategy.initial

    @property
    def stateful(self) -> bool:
        return self.state_json is not None

    def initial_state(self) -> Any:
        """A fresh copy: a check that mutates its state never changes the spec's."""
        return None if self.state_json is None else json.loads(self.state_json)


@dataclass(frozen=True)
class ChildSpec(StepSpec):
    """Starts workflow ``workflow`` with ``fn(ctx)`` as its input and waits for it to end."""

    workflow: str = ""


@dataclass(frozen=True)
class CallbackHandleSpec(StepSpec):
    """``create_callback``: issues a handle (its token readable by later steps) and moves on."""

    wait_timeout: float | None = None
    heartbeat_timeout: float | None = None


@dataclass(frozen=True)
class CallbacksWaitSpec(StepSpec):
    """``wait_for_callbacks``: WAITING until every handle named is completed (``build_spec``
    resolves the names to the steps that create them)."""

    handles: tuple[str, ...] = ()
    handle_steps: tuple[int, ...] = ()


WaitSpec = CallbackSpec | SignalSpec | PollSpec | ChildSpec
WAIT_SPECS = (CallbackSpec, SignalSpec, PollSpec, ChildSpec)
# The waits with a timeout of their own: it fails the step, unless the step names a retry policy.
TIMED_WAITS = (CallbackSpec, SignalSpec, PollSpec)
# The waits that park the execution WAITING (a poll runs its check as a step instead).
PARKING_WAITS = (CallbackSpec, SignalSpec, ChildSpec, CallbacksWaitSpec)

Spec = StepSpec | SleepSpec


def step(
    fn: StepFn,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    semantics: Semantics = "at_least_once",
    timeout: float | None = None,
    compensate: StepFn | None = None,
    compensate_retry: RetryPolicy | None = None,
    catch: CatchFn | None = None,
    serializer: Serializer | None = None,
) -> StepSpec:
    """A step: ``fn(ctx)`` returns a dict (merged into the context), None, or a typed value (a
    dataclass or a model), dumped by ``serializer`` and stored under the step's name."""
    if not callable(fn):
        raise WorkflowDefinitionError(f"step {fn!r} is not callable")
    if semantics not in SEMANTICS:
        raise WorkflowDefinitionError(f"semantics must be one of {SEMANTICS}, not {semantics!r}")
    for what, value in (("compensate", compensate), ("catch", catch)):
        if value is not None and not callable(value):
            raise WorkflowDefinitionError(f"{what} {value!r} of step {name or fn.__name__!r} is not callable")
    if compensate_retry is not None and not isinstance(compensate_retry, RetryPolicy):
        raise WorkflowDefinitionError(f"compensate_retry must be a RetryPolicy, not {compensate_retry!r}")
    if compensate_retry is not None and compensate is None:
        raise WorkflowDefinitionError("compensate_retry needs compensate")
    return StepSpec(
        fn=fn,
        name=name or fn.__name__,
        retry=retry,
        semantics=semantics,
        timeout=check_timeout(timeout, "timeout"),
        compensate=compensate,
        compensate_retry=compensate_retry,
        catch=catch,
        serializer=check_serializer(serializer, f"step {name or fn.__name__!r}"),
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


def _seconds(value: timedelta | float | None, what: str, *, required: bool = False) -> float | None:
    if value is None:
        if required:
            raise WorkflowDefinitionError(f"{what} is required")
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds > 0:
        raise WorkflowDefinitionError(f"{what} must be positive")
    return seconds


def _check_catch(catch: object, name: str) -> None:
    # Checked at the definition: a handler that cannot run would surface only once the wait failed.
    if catch is not None and not callable(catch):
        raise WorkflowDefinitionError(f"catch {catch!r} of step {name!r} is not callable")


def _wait_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise WorkflowDefinitionError(f"{what} {name!r} must match {NAME_RE.pattern}")
    return name


def wait_for_callback(
    name: str,
    *,
    submit: Callable[[StepContext, str], Any] = _no_submit,
    timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
    retry: RetryPolicy | None = None,
    catch: CatchFn | None = None,
) -> CallbackSpec:
    """Run ``submit(ctx, token)``, then wait WAITING until the token is completed from outside.

    The completion's ``result`` is the step's result; a failure fails the attempt through the
    retry policy (a retry runs submit with a new token). A timeout or a missed heartbeat fails
    the step, unless ``retry`` is given here: then it is retried too, each retry waiting the
    whole timeout again (``retry.for_wait``). Once the step fails, ``catch(ctx, error)`` runs
    instead of failing, as for a step.
    """
    if not callable(submit):
        raise WorkflowDefinitionError(f"submit {submit!r} is not callable")
    _check_catch(catch, name)
    return CallbackSpec(
        fn=_nothing,
        name=_wait_name(name, "callback name"),
        retry=retry,
        submit=submit,
        wait_timeout=_seconds(timeout, "timeout"),
        heartbeat_timeout=_seconds(heartbeat_timeout, "heartbeat_timeout"),
        catch=catch,
    )


def create_callback(
    name: str | None = None,
    *,
    timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
) -> CallbackHandleSpec:
    """A step that creates a callback handle and moves on at once: the context gets
    ``{name: {"$loom": "callback", ...}}`` (never the token), later steps read the token with
    ``ctx.callback_token(name)``, and a later ``wait_for_callbacks`` waits for its completion.

    ``timeout`` and ``heartbeat_timeout`` count from the creation (a heartbeat pushes the
    latter). No name: ``callback_<step index>``, stable for the definition.
    """
    if name is not None:
        _wait_name(name, "callback name")
    return CallbackHandleSpec(
        fn=_nothing,
        name=name or "",
        wait_timeout=_seconds(timeout, "timeout"),
        heartbeat_timeout=_seconds(heartbeat_timeout, "heartbeat_timeout"),
    )


def wait_for_callbacks(*names: str, name: str | None = None, catch: CatchFn | None = None) -> CallbacksWaitSpec:
    """Wait WAITING until every named handle is completed (no names: every handle created
    before it that no earlier wait awaits). Each completion's result lands in the context
    under its handle's name; a failure, a timeout or a missed heartbeat of any fails the step
    for good (non-retryable ``HandleFailed``, ``HandleTimeout``, ``HandleHeartbeatTimeout``: a
    handle is not created again); ``catch(ctx, error)`` then runs if given, with the workflow's
    retry policy."""
    for handle in names:
        _wait_name(handle, "callback name")
    if len(set(names)) != len(names):
        raise WorkflowDefinitionError(f"wait_for_callbacks names a handle twice: {list(names)}")
    if name is not None:
        _wait_name(name, "step name")
    _check_catch(catch, name or "wait_for_callbacks")
    return CallbacksWaitSpec(fn=_nothing, name=name or "", handles=tuple(names), catch=catch)


def wait_for_signal(
    name: str,
    *,
    timeout: timedelta | float | None = None,
    retry: RetryPolicy | None = None,
    step_name: str | None = None,
    catch: CatchFn | None = None,
) -> SignalSpec:
    """Wait for the signal ``name`` sent to this execution (one signal feeds one wait). Its
    timeout fails the step unless ``retry`` is given here (``retry.for_wait``)."""
    _wait_name(name, "signal name")
    _check_catch(catch, name)
    return SignalSpec(
        fn=_nothing,
        name=_wait_name(step_name or f"signal_{name}", "step name"),
        retry=retry,
        signal=name,
        wait_timeout=_seconds(timeout, "timeout"),
        catch=catch,
    )


class _Stateless:
    def __repr__(self) -> str:
        return "<no state>"


_STATELESS: Any = _Stateless()


def wait_until(
    check: Callable[..., Any],
    *,
    every: timedelta | float | None = None,
    strategy: PollStrategy | None = None,
    timeout: timedelta | float | None = None,
    max_checks: int | None = None,
    initial_state: Any = _STATELESS,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    catch: CatchFn | None = None,
) -> PollSpec:
    """Durable polling; no Lambda runs between checks.

    ``check(ctx)`` returns a result (a dict or None) when done, or ``NOT_YET``. With
    ``initial_state=`` (any JSON value) the check is ``check(ctx, state)``: the first gets
    ``initial_state``, and ``return not_yet(new_state)`` checkpoints ``new_state`` for the next
    (``NOT_YET`` keeps the state as it was). Between checks: ``every=`` seconds, or
    ``strategy=fixed(s)`` / ``exponential(initial, factor, max, jitter)``. Bounds, per attempt:
    ``timeout`` (PollTimeout) and ``max_checks`` (PollExhausted); either fails the step, or is
    retried when ``retry`` is given here (the workflow's policy retries only a failing check),
    then ``catch`` if given, like any step failure.
    """
    if not callable(check):
        raise WorkflowDefinitionError(f"check {check!r} is not callable")
    step_name = _wait_name(name or str(getattr(check, "__name__", "")), "step name")
    _check_catch(catch, step_name)
    stateful = initial_state is not _STATELESS
    _check_arity(check, 2 if stateful else 1, step_name)
    return PollSpec(
        fn=check,
        name=step_name,
        retry=retry,
        catch=catch,
        strategy=_poll_strategy(every, strategy, step_name),
        wait_timeout=_seconds(timeout, "timeout"),
        max_checks=_max_checks(max_checks, step_name),
        state_json=_state_json(initial_state, step_name) if stateful else None,
    )


def _poll_strategy(every: timedelta | float | None, strategy: object, name: str) -> PollStrategy:
    if every is not None and strategy is not None:
        raise WorkflowDefinitionError(f"poll {name!r}: give every= or strategy=, not both")
    if strategy is not None:
        if not isinstance(strategy, (Fixed, Exponential)):
            raise WorkflowDefinitionError(
                f"poll {name!r}: strategy must be fixed(seconds) or exponential(...), not {strategy!r}"
            )
        return strategy
    if every is None:
        raise WorkflowDefinitionError(f"poll {name!r}: every= or strategy= is required")
    return Fixed(_seconds(every, "every", required=True) or 0.0)


def _max_checks(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkflowDefinitionError(f"poll {name!r}: max_checks must be a whole number >= 1, not {value!r}")
    return value


def _state_json(state: Any, name: str) -> str:
    try:
        return canonical_json(state)
    except (TypeError, ValueError) as exc:
        raise WorkflowDefinitionError(f"poll {name!r}: initial_state must be JSON: {exc}") from None


def _check_arity(check: Callable[..., Any], count: int, name: str) -> None:
    """A check must take the arguments it will get: (ctx), or (ctx, state) with initial_state."""
    try:
        inspect.signature(check).bind(*range(count))
    except TypeError:
        takes = "(ctx, state), since initial_state is given" if count == 2 else "(ctx); pass initial_state= for state"
        raise WorkflowDefinitionError(f"poll {name!r}: the check must take {takes}") from None
    except ValueError:
        return  # no signature to read (some builtins): the first call tells


def child(
    workflow: str,
    *,
    input: Callable[[StepContext], dict[str, Any]] | None = None,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    catch: CatchFn | None = None,
) -> ChildSpec:
    """Start ``workflow`` as a child (id ``<parent>--<step>-<attempt>``) and wait for it to end."""
    if input is not None and not callable(input):
        raise WorkflowDefinitionError(f"child input {input!r} must be a function of the context")
    _check_catch(catch, name or f"child_{workflow}")
    return ChildSpec(
        fn=input or _empty_input,
        name=_wait_name(name or f"child_{workflow}", "step name"),
        retry=retry,
        workflow=_wait_name(workflow, "child workflow"),
        catch=catch,
    )


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
    # An EventBridge schedule expression: the sweeper starts one execution per fire time
    # (engine/schedules.py); ``catch_up`` says what happens to firings missed in an outage.
    schedule: str | None = None
    catch_up: CatchUp = CatchUp.RUN_ONCE
    # ``@workflow(name, version=2)``: versions of one name stay registered side by side.
    version: int = 1
    # The steps' serializer where a step names none; ``input_type``: what a start's input must load into.
    serializer: Serializer = DEFAULT
    input_type: Any = None

    @cached_property  # read on every message (Registry.of); the spec never changes once built
    def fingerprint(self) -> str:
        """The definition's shape: step names, kinds and order (never the code inside a step).

        An execution records it at start; a worker runs a step only for the definition with
        the same fingerprint (engine/definitions.py). sha256 over canonical JSON, so every
        process computes the same value (``hash()`` is salted per process).
        """
        shape = [[s.name, _describe_step(self, i, s)["kind"]] for i, s in enumerate(self.steps)]
        encoded = canonical_json({"workflow": self.name, "steps": shape})
        return hashlib.sha256(encoded.encode("utf-8")).hexdigest()

    def policy_for(self, spec: StepSpec) -> RetryPolicy:
        """The step's own policy, else the workflow's; a timed wait's timeout is retried only
        when the wait names a policy of its own (``retry.for_wait``)."""
        if spec.retry is not None:
            return spec.retry
        return self._wait_retry if isinstance(spec, TIMED_WAITS) else self.retry

    @cached_property
    def _wait_retry(self) -> RetryPolicy:
        return for_wait(self.retry)

    def compensation_policy_for(self, spec: StepSpec) -> RetryPolicy:
        return spec.compensate_retry or self.retry

    @property
    def has_compensation(self) -> bool:
        return any(isinstance(s, StepSpec) and s.compensate is not None for s in self.steps)

    def timeout_for(self, spec: StepSpec) -> float | None:
        return spec.timeout if spec.timeout is not None else self.step_timeout

    def describe(self) -> dict[str, Any]:
        typed = {} if self.input_type is None else {"input_type": _type_name(self.input_type)}
        return {
            **typed,
            "name": self.name,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "retry": describe_retry(self.retry),
            "step_timeout": self.step_timeout,
            "schedule": None
            if self.schedule is None
            else {"expression": self.schedule, "catch_up": self.catch_up.value},
            "steps": [_describe_step(self, i, s) for i, s in enumerate(self.steps)],
        }


def _type_name(tp: Any) -> str:
    return str(getattr(tp, "__name__", repr(tp)))


def describe_retry(policy: RetryPolicy) -> dict[str, Any]:
    """The policy's numbers (its exception filters and ``decide`` are code, shown by name only)."""
    return {
        "max_attempts": policy.max_attempts,
        "base": policy.base,
        "rate": policy.rate,
        "max_delay": policy.max_delay,
        "jitter": policy.jitter,
        "custom": policy.decide is not None,
    }


_KINDS = {
    CallbackSpec: "callback",
    SignalSpec: "signal",
    PollSpec: "poll",
    ChildSpec: "child",
    CallbackHandleSpec: "callback_handle",
    CallbacksWaitSpec: "callback_wait",
}


def _describe_step(spec: WorkflowSpec, i: int, s: Spec) -> dict[str, Any]:
    if isinstance(s, SleepSpec):
        return {"index": i, "name": s.name, "kind": "sleep", "seconds": s.seconds}
    fan = s.describe_fan(spec)
    if fan is not None:
        return {"index": i, "name": s.name, **fan}
    kind = _KINDS.get(type(s))
    if kind is None:
        out: dict[str, Any] = {
            "index": i,
            "name": s.name,
            "kind": "step",
            "semantics": s.semantics,
            "timeout": spec.timeout_for(s),
        }
        if s.compensate is not None:
            out["compensate"] = getattr(s.compensate, "__name__", repr(s.compensate))
        if s.catch is not None:
            out["catch"] = getattr(s.catch, "__name__", repr(s.catch))
        if s.serializer is not None and s.serializer is not DEFAULT:
            out["serializer"] = type(s.serializer).__name__
        out["retry"] = describe_retry(spec.policy_for(s))
        if s.compensate is not None:
            out["compensate_retry"] = describe_retry(spec.compensation_policy_for(s))
        return out
    policy = spec.policy_for(s)
    out = {"index": i, "name": s.name, "kind": kind, "retry": describe_retry(policy), **_wait_fields(s)}
    if isinstance(s, TIMED_WAITS):
        out["timeout_retried"] = retries_timeouts(policy)  # else the timeout fails the step: the whole wait
    if s.catch is not None:
        out["catch"] = getattr(s.catch, "__name__", repr(s.catch))
    return out


def _wait_fields(s: StepSpec) -> dict[str, Any]:
    """What a wait waits for and how long: the console draws it beside the step."""
    out: dict[str, Any] = {}
    if isinstance(s, (CallbackSpec, SignalSpec, PollSpec, CallbackHandleSpec)):
        out["wait_timeout"] = s.wait_timeout
    if isinstance(s, CallbacksWaitSpec):
        out["callbacks"] = list(s.handles)
    if isinstance(s, (CallbackSpec, CallbackHandleSpec)):
        out["heartbeat_timeout"] = s.heartbeat_timeout
    elif isinstance(s, SignalSpec):
        out["signal"] = s.signal
    elif isinstance(s, PollSpec):
        out["every"] = s.every
        out["strategy"] = s.strategy.describe()
        out["max_checks"] = s.max_checks
        out["stateful"] = s.stateful
    elif isinstance(s, ChildSpec):
        out["workflow"] = s.workflow
    return out


def check_schedule(name: str, schedule: object, catch_up: object) -> tuple[str | None, CatchUp]:
    """The schedule as stored (stripped) and its catch-up policy; WorkflowDefinitionError otherwise."""
    if catch_up not in tuple(CatchUp):
        choices = ", ".join(repr(c.value) for c in CatchUp)
        raise WorkflowDefinitionError(f"workflow {name!r}: catch_up must be one of {choices}, not {catch_up!r}")
    if schedule is None:
        if catch_up != CatchUp.RUN_ONCE:
            raise WorkflowDefinitionError(f"workflow {name!r}: catch_up needs a schedule")
        return None, CatchUp.RUN_ONCE
    if not isinstance(schedule, str):
        raise WorkflowDefinitionError(f"workflow {name!r}: schedule must be a string such as 'rate(1 hour)'")
    try:
        parsed = parse_schedule(schedule)
    except WorkflowDefinitionError as exc:
        raise WorkflowDefinitionError(f"workflow {name!r}: schedule {exc.message}") from None
    return parsed.expression, CatchUp(str(catch_up))


def build_spec(
    name: str,
    steps: Any,
    retry: RetryPolicy | None = None,
    step_timeout: float | None = None,
    *,
    schedule: str | None = None,
    catch_up: CatchUp | str = CatchUp.RUN_ONCE,
    version: int = 1,
    serializer: Serializer | None = None,
    input_type: Any = None,
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
    specs = resolve_handles(name, specs)
    expression, policy = check_schedule(name, schedule, catch_up)
    check_version(name, version)
    chosen = check_serializer(serializer, f"workflow {name!r}")
    if chosen is not None:
        # Resolved once, here: a step's context then needs only its own spec to read typed values.
        specs = [
            replace(s, serializer=chosen) if isinstance(s, StepSpec) and s.serializer is None else s for s in specs
        ]
    typed_input = check_input_type(input_type, f"workflow {name!r}")
    _check_scheduled_input(name, expression, chosen or DEFAULT, typed_input)
    return WorkflowSpec(
        name=name,
        steps=tuple(specs),
        retry=retry or RetryPolicy(),
        step_timeout=check_timeout(step_timeout, f"workflow {name!r}: step_timeout"),
        schedule=expression,
        catch_up=policy,
        version=version,
        serializer=chosen or DEFAULT,
        input_type=typed_input,
    )


def resolve_handles(workflow: str, specs: list[Spec]) -> list[Spec]:
    """Name every unnamed handle and wait by its index, and tie each wait to the steps that
    create its handles: a handle awaited before it exists, twice, or not at all is an error now."""
    created: dict[str, int] = {}
    awaited: set[str] = set()
    out: list[Spec] = []
    for i, s in enumerate(specs):
        if isinstance(s, CallbackHandleSpec):
            s = replace(s, name=s.name or f"callback_{i}")
            if s.name in created:
                raise WorkflowDefinitionError(f"workflow {workflow!r}: callback {s.name!r} is created twice")
            created[s.name] = i
        elif isinstance(s, CallbacksWaitSpec):
            names = s.handles or tuple(n for n in created if n not in awaited)
            unknown = [n for n in names if n not in created]
            if unknown or not names:
                raise WorkflowDefinitionError(
                    f"workflow {workflow!r}: step {i} waits for callbacks no earlier create_callback makes: "
                    f"{unknown or 'none'}"
                )
            twice = sorted(awaited.intersection(names))
            if twice:
                raise WorkflowDefinitionError(f"workflow {workflow!r}: callbacks {twice} are awaited twice")
            awaited.update(names)
            steps = tuple(created[n] for n in names)
            s = replace(s, name=s.name or f"wait_callbacks_{i}", handles=names, handle_steps=steps)
        out.append(s)
    return out


# What every fire of a schedule starts with (engine/schedule_plan.py writes the time this way).
SCHEDULED_INPUT = {"scheduled_at": "2026-01-01T00:00:00Z"}


def _check_scheduled_input(name: str, schedule: str | None, serializer: Serializer, input_type: Any) -> None:
    """A scheduled workflow's input_type must take the input a fire gives, or every fire would fail."""
    if schedule is None or input_type is None:
        return
    try:
        serializer.load(dict(SCHEDULED_INPUT), input_type)
    except (TypeError, ValueError) as exc:
        raise WorkflowDefinitionError(
            f"workflow {name!r}: a schedule starts it with {{'scheduled_at': '<ISO time>'}}, "
            f"which input_type does not load: {exc}"
        ) from None


def check_version(name: str, version: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 1_000_000:
        raise WorkflowDefinitionError(f"workflow {name!r}: version must be an integer from 1, not {version!r}")


class Registry:
    """Workflows by name and version. Registering a (name, version) twice is an error, not an
    override; the versions of one name live side by side, and a name means its newest version."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[int, WorkflowSpec]] = {}

    def add(self, spec: WorkflowSpec) -> WorkflowSpec:
        versions = self._specs.setdefault(spec.name, {})
        existing = versions.get(spec.version)
        if existing is not None and existing != spec:
            raise WorkflowDefinitionError(f"workflow {spec.name!r} version {spec.version} is registered twice")
        versions[spec.version] = spec
        return spec

    def get(self, name: str) -> WorkflowSpec:
        """The newest version of ``name``: what a new execution starts on."""
        versions = self._specs.get(name)
        if not versions:
            raise UnknownWorkflow(
                f"unknown workflow {name!r}; registered: {sorted(self._specs)}", workflow=name
            ) from None
        return versions[max(versions)]

    def versions(self, name: str) -> list[WorkflowSpec]:
        """Every registered version of ``name``, oldest first (UnknownWorkflow if none)."""
        self.get(name)
        return [self._specs[name][v] for v in sorted(self._specs[name])]

    def matching(self, name: str, fingerprint: str | None, version: int | None = None) -> WorkflowSpec | None:
        """The registered definition an execution that started with ``fingerprint`` runs on.

        No fingerprint (started before executions recorded one): the newest, as before. Otherwise
        the version it started on if its shape is unchanged, else any version of the same
        shape; None when no registered version has it (the execution is BLOCKED).
        """
        if fingerprint is None:
            return self.get(name)
        candidates = sorted(self.versions(name), key=lambda s: (s.version != version, -s.version))
        return next((s for s in candidates if s.fingerprint == fingerprint), None)

    def of(self, ex: Execution) -> WorkflowSpec:
        """The definition ``ex`` runs on; ``DefinitionChanged`` when none is registered."""
        spec = self.matching(ex.workflow, ex.fingerprint, ex.workflow_version)
        if spec is None:
            raise DefinitionChanged(
                f"workflow {ex.workflow!r} has no registered definition with the fingerprint "
                f"execution {ex.id!r} started with",
                workflow=ex.workflow,
            )
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[WorkflowSpec]:
        """The newest version of each name, by name."""
        return iter(sorted((self.get(n) for n in self._specs), key=lambda s: s.name))

    def all_versions(self) -> Iterator[WorkflowSpec]:
        return iter(sorted((s for vs in self._specs.values() for s in vs.values()), key=lambda s: (s.name, s.version)))

    def names(self) -> Mapping[str, WorkflowSpec]:
        return MappingProxyType({n: self.get(n) for n in self._specs})


#: Where ``@workflow`` registers by default; handlers load user modules into it.
default_registry = Registry()


def workflow(
    name: str,
    *,
    registry: Registry | None = None,
    schedule: str | None = None,
    catch_up: CatchUp | str = CatchUp.RUN_ONCE,
    version: int = 1,
    serializer: Serializer | None = None,
    input_type: Any = None,
) -> Callable[[type], type]:
    """Class decorator: ``steps = [...]``, optional ``retry = RetryPolicy(...)`` and ``step_timeout = 30``.

    ``schedule="cron(0 2 * * ? *)"`` or ``"rate(1 hour)"`` (EventBridge's syntax, UTC) starts
    one execution per fire time, with the input ``{"scheduled_at": "<ISO time>"}``;
    ``catch_up`` is ``"run_once"`` (one run for all firings missed in an outage) or ``"skip"``.
    ``version=2`` registers a new definition beside version 1: new starts take the newest, and
    each execution runs on the definition it started with (engine/definitions.py).
    ``input_type=Order`` refuses a start whose input does not load into ``Order`` (InvalidInput);
    ``serializer=`` dumps and loads the typed values of every step that names none (engine/serde.py).
    """
    # Checked now, at the decorator, so a bad expression fails the import, not a later tick.
    check_schedule(name, schedule, catch_up)
    check_version(name, version)
    check_serializer(serializer, f"workflow {name!r}")
    check_input_type(input_type, f"workflow {name!r}")

    def register(cls: type) -> type:
        spec = build_spec(
            name,
            getattr(cls, "steps", None),
            getattr(cls, "retry", None),
            getattr(cls, "step_timeout", None),
            schedule=schedule,
            catch_up=catch_up,
            version=version,
            serializer=serializer,
            input_type=input_type,
        )
        (registry or default_registry).add(spec)
        cls.spec = spec  # type: ignore[attr-defined]
        return cls

    return register
