"""The step-history rules in engine/history_rules.py and the adapter's conditions agree.

Random sequences of commits and failures are written through DynamoStore on moto;
before each write, the pure rule predicts whether the write may land, and the
conditional write must do exactly that. Some writes lose their answer and are sent
again by botocore (write tokens): the outcome is the same, and nothing is appended twice.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.adapters.dynamodb import DynamoStore
from engine.errors import ConflictError
from engine.history_rules import HistoryRule, commit_refused_by, failure_refused_by
from engine.state import Attempt, AttemptOutcome, StepRecord, StepStatus
from loom.testing.moto_resources import moto_kept, moto_session, template_resources
from tests.integration.engine_support import LostAnswers, WriteKind

pytestmark = pytest.mark.integration

SESSION = moto_session("us-east-1")  # its clients share botocore's loaded models

WRITE = st.tuples(
    st.sampled_from(["commit", "retrying", "final"]), st.integers(min_value=1, max_value=4), st.booleans()
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(WRITE, min_size=1, max_size=8))
def test_the_adapter_enforces_exactly_the_history_rules(writes: list[tuple[str, int, bool]]) -> None:
    with moto_kept():
        refs = template_resources(SESSION, only=True)
        client = SESSION.client("dynamodb")
        store, lost = DynamoStore(client, refs["Table"], 4), LostAnswers(client)
        expected: list[int] = []  # the attempt numbers the history should hold, in order
        for kind, number, lose_answer in writes:
            record, lost_before = store.get_step("e", 0, "s"), len(lost.lost)
            if lose_answer:
                lost.arm(WriteKind.COMMIT if kind == "commit" else WriteKind.FAILURE)
            if kind == "commit":
                refused = commit_refused_by(record, number)
                attempt = Attempt(number, 1.0, 2.0, AttemptOutcome.COMPLETED)
                try:
                    store.commit_step("e", 0, "s", attempt, {"n": number})
                    landed = True
                except ConflictError:
                    landed = False
            else:
                refused = failure_refused_by(record, number)
                attempt = Attempt(number, 1.0, 2.0, AttemptOutcome.FAILED, {"type": "E", "message": "m"})
                landed = store.record_failure("e", 0, "s", attempt, final=kind == "final")
            assert landed == (refused is None), (kind, number, record, refused)
            assert len(lost.lost) == lost_before + (lose_answer and landed), "the answer was not lost"
            lost.disarm()  # a refused write was never applied, so it had no answer to lose
            expected += [number] if landed else []
            after = store.get_step("e", 0, "s")
            assert [a.attempt for a in (after.attempts if after else ())] == expected
            assert len(set(expected)) == len(expected), "an attempt number recorded twice"


def test_each_rule_names_the_case_it_refuses() -> None:
    done = StepRecord("e", 0, "s", StepStatus.COMPLETED, (Attempt(1, 0, 1, AttemptOutcome.COMPLETED),))
    failed = StepRecord("e", 0, "s", StepStatus.FAILED, (Attempt(2, 0, 1, AttemptOutcome.FAILED),))
    assert commit_refused_by(done, 2) is HistoryRule.COMMIT_ONCE
    assert commit_refused_by(failed, 2) is HistoryRule.FAILED_IS_FINAL
    assert commit_refused_by(failed, 3) is None
    retrying = StepRecord("e", 0, "s", StepStatus.RETRYING, (Attempt(1, 0, 1, AttemptOutcome.FAILED),))
    assert commit_refused_by(retrying, 1) is HistoryRule.ONE_RECORD_PER_ATTEMPT, "a second record of attempt 1"
    assert commit_refused_by(retrying, 2) is None
    assert failure_refused_by(failed, 2) is HistoryRule.ONE_RECORD_PER_ATTEMPT
    assert failure_refused_by(done, 3) is HistoryRule.NO_FAILURE_AFTER_COMMIT
    assert commit_refused_by(None, 1) is None and failure_refused_by(None, 1) is None
