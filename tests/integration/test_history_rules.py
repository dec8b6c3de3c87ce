"""The step-history rules in engine/history_rules.py and the adapter's conditions agree.

Random sequences of commits and failures are written through DynamoStore on moto;
before each write, the pure rule predicts whether the write may land, and the
conditional write must do exactly that.
"""

from __future__ import annotations

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from engine.adapters.dynamodb import DynamoStore
from engine.errors import ConflictError
from engine.history_rules import HistoryRule, commit_refused_by, failure_refused_by
from engine.state import Attempt, AttemptOutcome, StepStatus
from loom.template import create_resources

pytestmark = pytest.mark.integration

WRITE = st.tuples(st.sampled_from(["commit", "retrying", "final"]), st.integers(min_value=1, max_value=4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(WRITE, min_size=1, max_size=8))
def test_the_adapter_enforces_exactly_the_history_rules(writes: list[tuple[str, int]]) -> None:
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        refs = create_resources(session)
        store = DynamoStore(session.client("dynamodb"), refs["Table"], 4)
        for kind, number in writes:
            record = store.get_step("e", 0, "s")
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


def test_each_rule_names_the_case_it_refuses() -> None:
    from engine.state import StepRecord

    done = StepRecord("e", 0, "s", StepStatus.COMPLETED, (Attempt(1, 0, 1, AttemptOutcome.COMPLETED),))
    failed = StepRecord("e", 0, "s", StepStatus.FAILED, (Attempt(2, 0, 1, AttemptOutcome.FAILED),))
    assert commit_refused_by(done, 2) is HistoryRule.COMMIT_ONCE
    assert commit_refused_by(failed, 2) is HistoryRule.FAILED_IS_FINAL
    assert commit_refused_by(failed, 3) is None
    assert failure_refused_by(failed, 2) is HistoryRule.ONE_RECORD_PER_ATTEMPT
    assert failure_refused_by(done, 3) is HistoryRule.NO_FAILURE_AFTER_COMMIT
    assert commit_refused_by(None, 1) is None and failure_refused_by(None, 1) is None
