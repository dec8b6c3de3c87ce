"""Every AWS call each function makes is one its role in template.yaml allows.

moto does not enforce IAM, so a call missing from a role passes every local test and fails
with AccessDenied on the first deployed run. Here botocore's own calls are recorded while the
three handlers work through every kind of workflow the examples have (chains, retries, a
failure parked in the DLQ, sleeps, callbacks, signals, children, saga compensation, parallel
and map) and the control plane's routes, then each call is turned into the IAM action and
resource AWS checks it against (a batch call needs its single action; a transaction needs each
item's action) and looked up in the function's grants.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import botocore.client
import pytest
from freezegun import freeze_time

from loom.template import Template
from tests.integration.api_support import Functions, sample_event
from tests.integration.test_template import grants

pytestmark = pytest.mark.integration

# A batch or transaction is authorised as the single actions it is made of.
BATCHES = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    "TransactGetItems": "GetItem",
}
TRANSACT_ITEM = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


class Calls:
    """The calls made by the function in use (not by the test's own clients in ``refs``)."""

    def __init__(self, fn: Functions) -> None:
        self.fn = fn
        self.current = "ControlPlaneFunction"
        self.seen: dict[str, set[tuple[str, str]]] = {}
        self._ours = {id(c) for c in fn.refs.values() if isinstance(c, botocore.client.BaseClient)}

    def record(self, client: Any, operation: str, params: dict[str, Any]) -> None:
        if id(client) in self._ours:
            return
        service = client.meta.service_model.service_name
        for action, resource in self.authorised_as(service, operation, params):
            self.seen.setdefault(self.current, set()).add((f"{service}:{action}", resource))

    def authorised_as(self, service: str, operation: str, params: dict[str, Any]) -> Iterator[tuple[str, str]]:
        if service == "sqs":
            url = params["QueueUrl"]
            queue = next(q for q in ("StepQueue", "DeadLetterQueue") if self.fn.refs[q] == url)
            yield BATCHES.get(operation, operation), queue
        elif operation == "TransactWriteItems":
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                yield TRANSACT_ITEM[kind], self.table(body)
        elif operation == "BatchGetItem":
            for _ in params["RequestItems"]:
                yield operation, "Table"
        else:
            yield BATCHES.get(operation, operation), self.table(params)

    def table(self, params: dict[str, Any]) -> str:
        assert params["TableName"] == self.fn.refs["Table"], params["TableName"]
        return "Table" + (f"/{params['IndexName']}" if "IndexName" in params else "")


@pytest.fixture
def calls(fn: Functions, monkeypatch: pytest.MonkeyPatch) -> Calls:
    seen = Calls(fn)
    real_call = botocore.client.BaseClient._make_api_call
    real_use = fn.use

    def recorded(client: Any, operation: str, params: dict[str, Any]) -> Any:
        seen.record(client, operation, params)
        return real_call(client, operation, params)

    def use(logical_id: str) -> None:
        seen.current = logical_id
        real_use(logical_id)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recorded)
    monkeypatch.setattr(fn, "use", use)
    return seen


def sweep_at(fn: Functions, epoch: float) -> dict[str, Any]:
    when = datetime.fromtimestamp(epoch, UTC)
    with freeze_time(when):
        return fn.sweeper(sample_event("schedule.json") | {"time": when.strftime("%Y-%m-%dT%H:%M:%SZ")})


def start(fn: Functions, workflow: str, execution_id: str, payload: dict[str, Any] | None = None) -> None:
    status, answer = fn.api(
        "POST", "/executions", {"workflow": workflow, "input": payload or {}, "execution_id": execution_id}
    )
    assert status == 201, answer


def callback_token(fn: Functions) -> str:
    """The token payment_webhook's submit function handed to the 'payment service' (its ledger)."""
    items = fn.refs["dynamodb"].scan(TableName=fn.refs["Table"])["Items"]
    found = [v["S"] for item in items for v in item.values() if "S" in v and v["S"].startswith("lcb1.")]
    found += [
        t for item in items for v in item.values() if "S" in v for t in v["S"].split('"') if t.startswith("lcb1.")
    ]
    assert found, "payment_webhook handed out no callback token"
    return found[0]


def tour(fn: Functions) -> None:
    """Each kind of work the functions do, through the handlers only."""
    lines = [{"sku": f"s{i}", "qty": 1, "unit_price": i} for i in range(12)]
    for workflow, eid, payload in [
        ("pipeline", "chain", {}),
        ("payment_retry", "retry", {"fail_first": 1}),
        ("poison_pill", "poison", {}),
        ("order_saga", "saga", {"amount": 5}),  # no courier: shipping fails, the saga undoes
        ("order_parallel", "par", {"amount": 5}),
        ("price_lines", "map", {"lines": lines}),
        ("order_with_children", "kids", {"order_id": "k1", "courier": "ups"}),
        ("order_fulfillment", "nap", {"amount": 3}),
        ("order_approval", "approval", {"order_id": "a1"}),
        ("order_approval", "cancelled", {"order_id": "a2"}),
        ("payment_webhook", "webhook", {"amount": 7, "settle_after": 0}),
    ]:
        start(fn, workflow, eid, payload)
    fn.drain()
    fn.api("POST", "/executions/approval/signals/approval", {"payload": {"approved": True}})
    fn.api("POST", f"/callbacks/{callback_token(fn)}/succeed", {"result": {"paid": True}})
    fn.api("POST", "/executions/cancelled/cancel")
    for _ in range(8):  # retries' delays, sleeps and leases: the sweeper brings each back
        fn.drain()
        pending = [fn.api("GET", f"/executions/{e}")[1] for e in ("retry", "nap", "kids", "map", "webhook", "saga")]
        due = [x["next_wake_at_epoch"] for x in pending if x.get("next_wake_at_epoch")]
        if not due:
            break
        sweep_at(fn, max(due) + 1)
    fn.api("GET", "/executions?limit=20")
    fn.api("GET", "/workflows")
    for eid in ("chain", "map", "kids", "approval", "saga"):
        fn.api("GET", f"/executions/{eid}")
        fn.api("GET", f"/executions/{eid}/history")
    fn.api("GET", "/dlq")
    fn.api("POST", "/executions/poison/redrive")
    fn.drain()
    # A lapsed lease while messages wait: the sweeper asks both queues' counts.
    start(fn, "pipeline", "behind")
    sweep_at(fn, fn.api("GET", "/executions/behind")[1]["next_wake_at_epoch"] + 1)
    fn.drain()


def test_every_call_the_functions_make_is_granted_by_their_roles(fn: Functions, calls: Calls) -> None:
    tour(fn)
    ended = {e: fn.api("GET", f"/executions/{e}")[1]["status"] for e in ("chain", "map", "kids", "saga", "webhook")}
    assert ended == {
        "chain": "COMPLETED",
        "map": "COMPLETED",
        "kids": "COMPLETED",
        "saga": "COMPENSATED",
        "webhook": "COMPLETED",
    }, "the tour must reach the work it means to check"
    assert set(calls.seen) == {"ControlPlaneFunction", "WorkerFunction", "SweeperFunction"}
    tpl = Template()
    missing = {}
    for function, seen in calls.seen.items():
        allowed = grants(tpl, function)
        lacking = sorted((a, r) for a, r in seen if a not in allowed.get(r, set()))
        if lacking:
            missing[function] = lacking
    assert missing == {}, f"calls their role does not allow (AccessDenied on AWS): {missing}"
    worker = calls.seen["WorkerFunction"]
    assert ("dynamodb:UpdateItem", "Table") in worker and ("sqs:SendMessage", "DeadLetterQueue") in worker
    assert ("sqs:GetQueueAttributes", "DeadLetterQueue") in calls.seen["SweeperFunction"], "the parked count"
