"""The three Lambda handlers with real AWS event shapes (events/*.json, as
``sam local generate-event`` makes them) against moto in-process, configured only by
the environment variables template.yaml gives each function."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from engine.messages import StepMessage
from functions import api, sweeper, wiring, worker
from tests.integration.api_support import Functions, LambdaContext, sample_event, sqs_event
from tests.logs import json_lines

pytestmark = pytest.mark.integration


def counts(report: dict[str, Any]) -> dict[str, int]:
    return {k: report[k] for k in ("due", "redriven", "woken")}


def test_function_url_sample_events_reach_the_engine(fn: Functions) -> None:
    fn.use("ControlPlaneFunction")
    answer = api.handler(sample_event("url_start_execution.json"), None)
    assert answer["statusCode"] == 201, answer
    assert json.loads(answer["body"])["id"] == "order-o-1"
    got = api.handler(sample_event("url_get_execution.json"), None)
    assert got["statusCode"] == 200 and json.loads(got["body"])["workflow"] == "order_fulfillment"
    listed = api.handler(sample_event("url_list_executions.json"), None)
    assert [e["id"] for e in json.loads(listed["body"])["executions"]] == ["order-o-1"]
    b64 = api.handler(sample_event("url_start_execution_base64.json"), None)
    assert b64["statusCode"] == 201 and json.loads(b64["body"])["workflow"] == "pipeline"
    assert answer["headers"]["content-type"] == "application/json" and answer["isBase64Encoded"] is False


def test_worker_runs_an_sqs_batch_and_logs_each_step_with_its_ids(fn: Functions, capsys: pytest.CaptureFixture) -> None:
    fn.api("POST", "/executions", {"workflow": "pipeline", "input": {}, "execution_id": "w1"})
    fn.api("POST", "/executions", {"workflow": "payment_retry", "input": {"fail_first": 0}, "execution_id": "w2"})
    messages = fn.receive()
    assert len(messages) == 2
    capsys.readouterr()

    answer = fn.worker(sqs_event(messages, fn.refs["StepQueue.Arn"]))

    assert answer == {"batchItemFailures": []}
    assert fn.api("GET", "/executions/w1")[1]["status"] == "COMPLETED"  # chained through all ten steps
    assert fn.api("GET", "/executions/w2")[1]["status"] == "COMPLETED"
    lines = json_lines(capsys.readouterr().out)
    step_lines = [line for line in lines if line["event"].startswith("step.")]
    assert {line["event"] for line in step_lines} >= {"step.started", "step.completed"}
    assert len([line for line in step_lines if line["event"] == "step.completed"]) == 13
    for line in step_lines:
        assert line["execution_id"] in ("w1", "w2") and isinstance(line["step"], int) and line["attempt"] == 1
        assert line["level"] in ("info", "warning") and "timestamp" in line


def test_worker_reports_only_the_failed_items_of_a_batch(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    fn.api("POST", "/executions", {"workflow": "pipeline", "input": {}, "execution_id": "ok"})
    good = fn.receive()
    event = sqs_event(good, fn.refs["StepQueue.Arn"])
    # The sample batch: messages for executions that do not exist (acknowledged as orphans),
    # plus one that is not a step message at all (parked in the DLQ with why).
    sample = sample_event("sqs_step_batch.json")["Records"]
    garbage = copy.deepcopy(sample[0]) | {"messageId": "garbage-1", "body": "{not json"}
    event["Records"] += [*sample, garbage]

    answer = fn.worker(event)
    assert answer == {"batchItemFailures": []}
    parked = fn.api("GET", "/dlq")[1]["messages"]
    assert [(m["kind"], m["body"]["message_id"]) for m in parked] == [("malformed", "garbage-1")]

    # A record whose execution's table is gone fails alone, for SQS to deliver again.
    fn.api("POST", "/executions", {"workflow": "pipeline", "input": {}, "execution_id": "later"})
    later = fn.receive()
    fn.use("WorkerFunction")
    monkeypatch.setenv("LOOM_TABLE_NAME", "gone")
    wiring.reset()
    answer = worker.handler(sqs_event(later, fn.refs["StepQueue.Arn"]), LambdaContext())
    assert answer == {"batchItemFailures": [{"itemIdentifier": later[0]["MessageId"]}]}


def test_worker_treats_a_redelivery_as_guarded(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "pipeline", "input": {}, "execution_id": "again"})
    messages = fn.receive()
    event = sqs_event(messages, fn.refs["StepQueue.Arn"])
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "2"
    assert fn.worker(event, seconds=5) == {"batchItemFailures": []}  # no time to chain
    ex = fn.api("GET", "/executions/again")[1]
    assert ex["current_step"] == 1 and ex["status"] == "RUNNING"
    assert [m["Body"] for m in fn.receive()] == [StepMessage("again", 1, 1, "step").encode()]


def test_sweeper_on_the_scheduled_event_redrives_a_lost_message(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "pipeline", "input": {}, "execution_id": "lost"})
    assert fn.discard() == 1  # the message that should drive it is gone
    event = sample_event("schedule.json")
    assert event["detail-type"] == "Scheduled Event"

    assert counts(fn.sweeper(event)) == {"due": 0, "redriven": 0, "woken": 0}

    lease_end = fn.api("GET", "/executions/lost")[1]["next_wake_at_epoch"]
    later = datetime.fromtimestamp(lease_end, UTC) + timedelta(seconds=1)
    with freeze_time(later):
        report = fn.sweeper(event | {"time": later.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert counts(report) == {"due": 1, "redriven": 1, "woken": 0} and report["truncated"] is False
    assert fn.drain() == 1
    assert fn.api("GET", "/executions/lost")[1]["status"] == "COMPLETED"


def test_sweeper_wakes_a_sleeping_execution(fn: Functions) -> None:
    fn.api("POST", "/executions", {"workflow": "order_fulfillment", "input": {"amount": 3}, "execution_id": "nap"})
    fn.drain()
    ex = fn.api("GET", "/executions/nap")[1]
    assert ex["status"] == "SLEEPING" and ex["current_step"] == 2
    with freeze_time(datetime.fromtimestamp(ex["next_wake_at_epoch"] + 1, UTC)):
        report = fn.sweeper(sample_event("schedule.json"))
    assert report["woken"] == 1
    fn.drain()
    assert fn.api("GET", "/executions/nap")[1]["status"] == "COMPLETED"


def test_handlers_say_which_environment_variables_are_missing(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOM_QUEUE_URL")
    wiring.reset()
    with pytest.raises(Exception, match="LOOM_QUEUE_URL"):
        sweeper.handler(sample_event("schedule.json"), LambdaContext())
    answer = api.handler(sample_event("url_get_execution.json"), None)
    assert answer["statusCode"] == 500 and "LOOM_QUEUE_URL" in json.loads(answer["body"])["error"]["message"]


def test_the_worker_builds_its_engine_at_init_not_in_its_first_invocation(fn: Functions) -> None:
    import importlib

    fn.use("WorkerFunction")
    wiring.reset()
    importlib.reload(worker)
    assert wiring._cache, "the first batch would pay for the clients and the workflow imports"
    built = next(iter(wiring._cache.values()))
    assert wiring.engine() is built


def test_warming_without_the_functions_environment_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOM_TABLE_NAME", raising=False)
    wiring.reset()
    wiring.warm()
    assert wiring._cache == {}


def test_a_workflow_module_that_does_not_import_fails_the_first_invocation_not_the_init(
    fn: Functions, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn.use("WorkerFunction")
    monkeypatch.setenv("LOOM_WORKFLOW_MODULES", "workflows,no_such_module_here")
    wiring.reset()
    wiring.warm()  # at init: nothing raised, nothing cached
    assert wiring._cache == {}
    with pytest.raises(ImportError):
        wiring.engine()
