"""Shared pieces of the waits tests: workflows with callbacks, signals, polls and children,
and a store wrapper that runs a racer at the exact moment a write is about to happen."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from engine import Registry, RetryPolicy
from engine.workflow import NOT_YET, StepContext, build_spec, child, wait_for_callback, wait_for_signal, wait_until


class Inbox:
    """Where submit() hands tokens out: the test plays the outside system that reads them."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def submit(self, ctx: StepContext, token: str) -> None:
        self.tokens.append(token)

    @property
    def last(self) -> str:
        return self.tokens[-1]


class Runs:
    """Counts how often each step body ran: 'advanced exactly once' is 'the next step ran once'."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    def step(self, name: str, result: dict[str, Any] | None = None) -> Callable[[StepContext], dict[str, Any]]:
        def run(ctx: StepContext) -> dict[str, Any]:
            self.count[name] += 1
            return dict(result or {name: True})

        run.__name__ = name
        return run


def registry(inbox: Inbox, runs: Runs) -> Registry:
    reg = Registry()
    quick = RetryPolicy(max_attempts=2, base=1, jitter="none")
    reg.add(
        build_spec(
            "approve",
            [
                runs.step("reserve"),
                wait_for_callback("approval", submit=inbox.submit, timeout=3600, retry=quick),
                runs.step("after"),
            ],
        )
    )
    reg.add(
        build_spec(
            "beat",
            [
                wait_for_callback("job", submit=inbox.submit, timeout=86_400, heartbeat_timeout=600, retry=quick),
                runs.step("after"),
            ],
        )
    )
    reg.add(
        build_spec(
            "shipping", [runs.step("pack"), wait_for_signal("shipped", timeout=7200, retry=quick), runs.step("after")]
        )
    )
    reg.add(
        build_spec(
            "two_signals", [wait_for_signal("go"), runs.step("middle"), wait_for_signal("go"), runs.step("after")]
        )
    )
    reg.add(build_spec("kid", [runs.step("kid_work", {"kid_out": 42})]))
    reg.add(build_spec("waiting_kid", [wait_for_signal("go"), runs.step("kid_after")]))
    reg.add(build_spec("failing_kid", [_fails], RetryPolicy(max_attempts=1)))
    reg.add(build_spec("family", [child("kid", input=lambda ctx: {"n": 1}), runs.step("after")]))
    reg.add(build_spec("patient_family", [child("waiting_kid"), runs.step("after")], RetryPolicy(max_attempts=1)))
    reg.add(
        build_spec(
            "retrying_family", [child("failing_kid"), runs.step("after")], RetryPolicy(max_attempts=2, jitter="none")
        )
    )
    return reg


def _fails(ctx: StepContext) -> None:
    raise RuntimeError("the child's work failed")


def poller(answers: list[Any]) -> Callable[[StepContext], Any]:
    """A check that returns ``answers`` in turn (NOT_YET until the last)."""

    def check_settled(ctx: StepContext) -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return check_settled


__all__ = ["NOT_YET", "Inbox", "Runs", "poller", "registry", "wait_until"]


class Racing:
    """Wraps a store; ``before(method, fn)`` runs ``fn`` once, just before the next call of ``method``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._hooks: dict[str, Callable[[], None]] = {}
        self.calls: Counter[str] = Counter()

    def before(self, method: str, fn: Callable[[], None]) -> None:
        self._hooks[method] = fn

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            hook = self._hooks.pop(name, None)
            if hook is not None:
                hook()
            return target(*args, **kwargs)

        return call
