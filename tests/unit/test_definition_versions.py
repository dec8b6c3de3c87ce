"""Issue #24: a deploy that changes a workflow never skips or repeats work (loom.testing).

Each execution records its definition's fingerprint; a worker that finds no registered
definition of that shape blocks it (BLOCKED, definition_changed) before running anything, the
sweeper resumes it once one is registered again, and ``migrate`` moves it on purpose.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from engine import Registry, sleep, workflow
from engine.errors import AlreadyTerminal, DefinitionChanged, InvalidInput, NotBlocked, WorkflowDefinitionError
from engine.messages import MessageKind, StepMessage
from engine.outcome import OutcomeStatus
from engine.state import Attempt, AttemptOutcome, Status
from engine.workflow import child, default_registry, wait_for_signal
from loom.testing import WorkflowTest
from workflows import versioned

pytestmark = pytest.mark.unit

RAN: list[str] = []


def body(name: str, then: Callable[[], None] | None = None) -> Callable[[Any], dict[str, Any]]:
    def fn(ctx: Any) -> dict[str, Any]:
        RAN.append(name)
        if then is not None:
            then()
        return {name: True}

    fn.__name__ = name
    return fn


def checkout(reg: Registry, *names: str, version: int = 1, hook: dict[str, Callable[[], None]] | None = None) -> None:
    hooks = hook or {}

    @workflow("checkout", registry=reg, version=version)
    class Checkout:
        steps = [body(n, hooks.get(n)) for n in names]


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def registry(*versions: tuple[str, ...], hook: dict[str, Callable[[], None]] | None = None) -> Registry:
    reg = Registry()
    for i, names in enumerate(versions, start=1):
        checkout(reg, *names, version=i, hook=hook)
    return reg


# -- the fingerprint ------------------------------------------------------------------------


def test_the_fingerprint_is_the_shape_not_the_code() -> None:
    a, b = Registry(), Registry()
    checkout(a, "reserve", "charge")

    @workflow("checkout", registry=b)
    class Other:  # same names, other code
        steps = [lambda ctx: None, lambda ctx: {"x": 1}]
        steps[0].__name__, steps[1].__name__ = "reserve", "charge"  # type: ignore[attr-defined]

    assert a.get("checkout").fingerprint == b.get("checkout").fingerprint
    reordered, inserted, slept = Registry(), Registry(), Registry()
    checkout(reordered, "charge", "reserve")
    checkout(inserted, "reserve", "fraud", "charge")

    @workflow("checkout", registry=slept)
    class Slept:
        steps = [body("reserve", None), sleep(seconds=5, name="charge")]

    prints = {r.get("checkout").fingerprint for r in (a, reordered, inserted, slept)}
    assert len(prints) == 4, "order, an insertion and a kind each change it"


def test_the_fingerprint_is_the_same_in_another_process() -> None:
    reg = registry(("reserve", "charge"))
    code = (
        "from engine import Registry, workflow\n"
        "def reserve(ctx): pass\n"
        "def charge(ctx): pass\n"
        "reg = Registry()\n"
        "@workflow('checkout', registry=reg)\n"
        "class C:\n"
        "    steps = [reserve, charge]\n"
        "print(reg.get('checkout').fingerprint)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == reg.get("checkout").fingerprint and len(out) == 64


def test_a_version_is_registered_once_and_must_be_a_positive_integer() -> None:
    reg = registry(("reserve",))
    with pytest.raises(WorkflowDefinitionError, match="version 1 is registered twice"):
        checkout(reg, "other")
    for bad in (0, -1, True, "2"):
        with pytest.raises(WorkflowDefinitionError, match="version must be"):
            workflow("checkout", registry=reg, version=bad)  # type: ignore[arg-type]


# -- blocked, and resumed -----------------------------------------------------------------


def test_a_deploy_that_inserts_a_step_blocks_the_running_execution_before_it_runs_anything() -> None:
    old = ("reserve", "charge", "ship")
    new = Registry()
    checkout(new, "reserve", "fraud_check", "charge", "ship")
    with WorkflowTest(registry(old)) as test:
        # The deploy lands while ``reserve`` runs: its commit stands, the next index is another step now.
        reg = registry(old, hook={"reserve": lambda: test.deploy(new)})
        test.deploy(reg)
        eid = test.start("checkout")
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.BLOCKED
        assert ex.blocked is not None and ex.blocked["reason"] == "definition_changed"
        assert ex.blocked["from"] == "RUNNING" and ex.current_step == 1
        assert RAN == ["reserve"], "neither fraud_check nor charge ran at index 1"
        assert ex.next_wake_at == ex.updated_at + test.config.blocked_recheck_seconds

        # Rechecks find nothing matching: still blocked, no message sent, nothing run.
        report = test.advance(test.config.blocked_recheck_seconds)
        assert report.blocked == 1 and test.status(eid) == "BLOCKED" and test.queue.receive() is None

        # Version 1 deployed again beside the new one as version 2: the execution resumes on it.
        both = Registry()
        checkout(both, *old, version=1)
        checkout(both, "reserve", "fraud_check", "charge", "ship", version=2)
        test.deploy(both)
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and done.blocked is None
        assert RAN == ["reserve", "charge", "ship"] and done.workflow_version == 1


def test_versions_side_by_side_new_starts_take_the_newest_and_old_ones_drain_on_theirs() -> None:
    both = registry(("reserve", "charge"), ("reserve", "fraud_check", "charge"))
    with WorkflowTest(registry(("reserve", "charge"))) as test:
        test.deploy(Registry())
        first = registry(("reserve", "charge"), hook={"reserve": lambda: test.deploy(both)})
        test.deploy(first)
        old = test.start("checkout")
        assert test.run(old).status is Status.COMPLETED  # type: ignore[union-attr]
        assert RAN == ["reserve", "charge"]
        RAN.clear()
        new = test.start("checkout")
        ex = test.run(new)
        assert ex is not None and ex.status is Status.COMPLETED and ex.workflow_version == 2
        assert RAN == ["reserve", "fraud_check", "charge"]


def test_an_execution_started_before_fingerprints_runs_on_the_newest_as_before() -> None:
    with WorkflowTest(registry(("reserve", "charge"))) as test:
        test.deploy(registry(("reserve", "charge"), hook={"reserve": lambda: None}))
        eid = test.start("checkout")
        legacy = replace(test.store.get_execution(eid), fingerprint=None, workflow_version=None)  # type: ignore[arg-type]
        test.store._executions[eid] = legacy  # type: ignore[attr-defined]
        test.deploy(registry(("reserve", "other", "charge")))
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.COMPLETED and RAN == ["reserve", "other", "charge"]


def blocked_at_charge(test: WorkflowTest) -> str:
    """An execution of (reserve, charge, ship) blocked at index 1 by a deploy that puts
    fraud_check before charge."""
    new = registry(("reserve", "fraud_check", "charge", "ship"))
    test.deploy(registry(("reserve", "charge", "ship"), hook={"reserve": lambda: test.deploy(new)}))
    eid = test.start("checkout")
    assert test.run(eid).status is Status.BLOCKED  # type: ignore[union-attr]
    return eid


def test_a_duplicate_or_stale_message_for_a_blocked_execution_writes_nothing() -> None:
    with WorkflowTest() as test:
        eid = blocked_at_charge(test)
        before = test.execution(eid)
        for kind in (MessageKind.STEP, MessageKind.REDRIVE, MessageKind.WAKE):
            out = test.engine.handle(StepMessage(eid, 1, before.attempt, kind), redelivered=True)
            assert out.status is OutcomeStatus.STALE
        assert test.execution(eid) == before and RAN == ["reserve"]


def test_a_blocked_execution_can_be_cancelled() -> None:
    with WorkflowTest() as test:
        eid = blocked_at_charge(test)
        ex = test.engine.cancel(eid)
        assert ex.status is Status.CANCELLED and ex.blocked is None
        with pytest.raises(AlreadyTerminal):
            test.engine.cancel(eid)


def test_a_signal_or_callback_path_on_a_changed_definition_says_so() -> None:
    reg = registry(("reserve",))
    with WorkflowTest(reg) as test:
        eid = test.start("checkout")
        ex = test.execution(eid)
        test.deploy(registry(("other",)))
        with pytest.raises(DefinitionChanged):
            test.engine.registry.of(ex)


# -- migrate --------------------------------------------------------------------------------


def test_migrate_moves_a_blocked_execution_to_the_mapped_step_of_the_new_version() -> None:
    with WorkflowTest() as test:
        eid = blocked_at_charge(test)
        with pytest.raises(InvalidInput, match="cannot read back"):
            test.engine.migrate(eid, {"charge": "fraud_check"})
        with pytest.raises(InvalidInput, match="does not have"):
            test.engine.migrate(eid, {"charge": "nope"}, at="charge")
        assert test.status(eid) == "BLOCKED", "a refused migration writes nothing"
        # The deploy put a fraud check before charge: the migration says run it first.
        moved = test.engine.migrate(eid, {"charge": "fraud_check"}, at="charge")
        assert moved.status is Status.RUNNING and moved.current_step == 1 and moved.workflow_version == 1
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.COMPLETED
        assert RAN == ["reserve", "fraud_check", "charge", "ship"]


def test_migrate_reads_the_stopped_step_from_its_history_when_it_had_attempts() -> None:
    with WorkflowTest() as test:
        eid = blocked_at_charge(test)
        # A failed attempt of ``charge`` is on record at index 1, as a retrying step leaves it.
        now = test.clock.now()
        failed = Attempt(1, now, now, AttemptOutcome.FAILED, {"type": "Boom", "message": "x"})
        assert test.store.record_failure(eid, 1, "charge", failed, final=False)
        with pytest.raises(InvalidInput, match="not 'ship'"):
            test.engine.migrate(eid, {}, at="ship")
        moved = test.engine.migrate(eid, {})  # charge is charge in the new version too
        assert moved.current_step == 2 and moved.attempt == 2, "a new round: attempt numbers are not reused"
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.COMPLETED and RAN == ["reserve", "charge", "ship"]


def test_migrate_refuses_an_execution_that_is_not_blocked() -> None:
    with WorkflowTest(registry(("reserve",))) as test:
        eid = test.start("checkout")
        test.run(eid)
        with pytest.raises(NotBlocked):
            test.engine.migrate(eid, {})


def test_a_signal_for_a_wait_whose_definition_changed_is_kept_and_delivered_on_resume() -> None:
    def approval(reg: Registry, *first: Any) -> Registry:
        @workflow("approve", registry=reg)
        class Approve:
            steps = [*first, wait_for_signal("ok"), body("ship")]

        return reg

    old = approval(Registry())
    with WorkflowTest(old) as test:
        eid = test.start("approve")
        assert test.run(eid).status is Status.WAITING  # type: ignore[union-attr]
        test.deploy(approval(Registry(), body("audit")))  # a step inserted before the wait
        sent = test.signal(eid, "ok", {"by": "ann"})
        assert not sent.delivered and test.status(eid) == "BLOCKED" and RAN == []
        test.deploy(old)
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.COMPLETED and ex.context["by"] == "ann" and RAN == ["ship"]


def test_the_example_keeps_version_1_beside_version_2() -> None:
    assert [s.version for s in default_registry.versions("checkout_versions")] == [1, 2]
    v1 = versioned.CheckoutV1.spec  # type: ignore[attr-defined]
    with WorkflowTest() as test:
        eid = test.start("checkout_versions", {"amount": 5})
        assert test.execution(eid).workflow_version == 2
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.COMPLETED and ex.context["flagged"] is False
        only_v1 = Registry()
        only_v1.add(v1)
        test.deploy(only_v1)
        old = test.run(test.start("checkout_versions", {"amount": 5}))
        assert old is not None and old.workflow_version == 1 and "flagged" not in old.context


def test_a_parent_blocked_by_its_childs_end_notice_takes_the_notice_again_on_resume() -> None:
    def family(reg: Registry, *first: Any, deploy: Callable[[], None] | None = None) -> Registry:
        @workflow("kid", registry=reg)
        class Kid:
            steps = [body("pick", deploy)]

        @workflow("parent", registry=reg)
        class Parent:
            steps = [*first, child("kid"), body("after")]

        return reg

    with WorkflowTest() as test:
        changed = family(Registry(), body("audit"))
        old = family(Registry(), deploy=lambda: test.deploy(changed))  # the deploy lands while the kid runs
        test.deploy(old)
        eid = test.start("parent")
        ex = test.run(eid)
        assert ex is not None and ex.status is Status.BLOCKED and ex.blocked["from"] == "WAITING"  # type: ignore[index]
        assert RAN == ["pick"]
        test.deploy(family(Registry()))
        assert test.advance(test.config.blocked_recheck_seconds).resumed == 1
        done = test.run(eid)
        assert done is not None and done.status is Status.COMPLETED and RAN == ["pick", "after"]
