"""Control plane: Function URL (payload format 2.0) -> engine calls -> JSON answers.

| method and path                      | answers                                        |
|--------------------------------------|------------------------------------------------|
| POST /executions                     | 201 started, 200 same id and input, 409 other input |
| GET  /executions?status&workflow&limit&cursor | 200 newest first, ``next_cursor``; each |
|                                      | row's ``unregistered`` as its page's (below)   |
| GET  /executions/{id}                | 200, 404                                       |
| GET  /executions/{id}/history        | 200, 404                                       |
| GET  /executions/{id}/history?step=N&items_from=K&items_limit=L | 200: one page of fan-out |
|                                      | step N's items (L default 50, at most 500), its |
|                                      | ``items_next`` and the join's counts; 400 when  |
|                                      | step N is not a started parallel/map; 404       |
| POST /executions/{id}/cancel         | 200, 404, 409 when already terminal; body      |
|                                      | {"compensate": true} undoes a saga's steps     |
|                                      | (409 compensation_not_deployed: its definition |
|                                      | is not deployed; the message says what to do)  |
| POST /executions/{id}/redrive        | 200 a new round of attempts, 404, 409 unless FAILED |
|                                      | (409 parent_decides: a child its parent no longer |
|                                      | waits on; the message names the parent)          |
| POST /executions/{id}/migrate        | 200 a BLOCKED execution moved; body {"map": {old: new}, |
|                                      | "version": N, "at": old step}; 400 unmapped, 409 not blocked |
| GET  /workflows                      | 200; a scheduled one's ``schedule.next_fire``; |
|                                      | ``versions``: each with its open executions  |
| GET  /dlq?limit                      | 200: the parked messages, left in place        |
| POST /dlq/redrive?limit              | 200: what was done with each message           |
| POST /callbacks/{token}/succeed|fail|heartbeat, POST /executions/{id}/signals/{name} | functions/waits_api.py |

Reading aids (engine/progress.py; the CLI's history and the console draw from them):

| where                    | field                | what                                                  |
|--------------------------|----------------------|-------------------------------------------------------|
| /executions/{id}, .../history | ``state``       | ``{kind, reason, until, until_epoch}``: kind is running, |
|                          |                      | retrying, sleeping, waiting, compensating or the end  |
|                          |                      | status in lower case; reason one line; until the wake |
|                          |                      | time (sleep end, retry time, wait timeout) or null    |
| .../history steps[]      | ``kind``             | step, sleep, callback, signal, poll, child, ... (from |
|                          |                      | the workflow; ``step`` when it is not deployed here)  |
| .../history steps[], attempts[] | ``duration_seconds`` | finished - started; null while running         |
| .../history              | ``pending``          | ``[{index, name, kind}]``: steps with no record yet,  |
|                          |                      | in order; empty once terminal or compensating         |
| .../history              | ``events``           | ``[{kind, at, at_epoch, ...}]``: started, cancelled   |
|                          |                      | (``compensate``), and the end (``error``: one line)   |
| .../history steps[]      | ``items``            | a started parallel/map step's first 50 items in index |
|                          |                      | order: ``{index, status, attempts, result, error,     |
|                          |                      | duration_seconds, started_at, finished_at}``; an item |
|                          |                      | with no record yet is PENDING (NOT_STARTED once the   |
|                          |                      | join decided); ``items_next``: the next page's        |
|                          |                      | ``items_from`` or null; ``n``, ``ok``, ``failed``,    |
|                          |                      | ``decided``: the join's counts (engine/fan_view.py).  |
|                          |                      | Until it joins with success a fan-out step has no     |
|                          |                      | record: its row (status RUNNING, FAILED or CANCELLED, |
|                          |                      | no attempts) is made from the join, not pending       |
| both                     | ``state.step``       | the step it is at; null once terminal                 |
| both                     | ``unregistered``     | null, or ``{code, workflow, workflow_version,         |
|                          |                      | registered_versions, message}`` while this deployment |
|                          |                      | lacks its definition (code ``workflow_not_registered``|
|                          |                      | or ``definition_changed``; engine/definitions.py);    |
|                          |                      | its live callback token, handle token and a signal    |
|                          |                      | are then 409 ``workflow_not_registered`` with this    |
|                          |                      | message, nothing written                              |
| GET /executions rows     | ``unregistered``     | the same, so a list marks those executions            |
| both                     | ``read_at``          | the control plane's clock when it answered (+ epoch)  |

Errors are ``{"error": {"code", "message"}}``: 400 bad JSON, unknown workflow, bad id or
parameter; 413 payload over an AWS limit; 404 unknown path, execution or callback token; 405
wrong method; 409 conflicts with the execution's state (the code says which); 410
``wait_ended``, a callback token whose wait has ended for good (the message says how); 503
when AWS throttles or fails. Every check runs before any write.
"""

from __future__ import annotations

import math
from typing import Any

from engine import children, control, dead_letters, definitions, fan_view, progress
from engine.error_report import error_info
from engine.errors import (
    ConflictError,
    DefinitionChanged,
    ExecutionNotFound,
    InvalidInput,
    LoomError,
    PayloadTooLarge,
    ResourceMissing,
    TransientError,
    UnknownWorkflow,
    WaitEnded,
)
from engine.join import MAX_ITEMS
from engine.log import get_logger
from engine.parts import Parts
from engine.state import Execution
from engine.workflow import WorkflowSpec
from functions import views, waits_api, wiring
from functions.http import FunctionUrlEvent, HttpError, Request, Router, error_response, response

START_FIELDS = frozenset({"workflow", "input", "execution_id"})
LIST_PARAMS = frozenset({"status", "workflow", "limit", "cursor"})
DLQ_MAX = 100

wiring.ensure_logging()  # at init, as Lambda imports the handler


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, not {raw!r}") from None
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}")
    return value


def _only(request: Request, allowed: frozenset[str]) -> None:
    unknown = sorted(set(request.query) - allowed)
    if unknown:
        raise InvalidInput(f"unknown query parameter(s) {unknown}; allowed: {sorted(allowed)}")


def _spec(ex: Execution) -> WorkflowSpec | None:
    """The definition ``ex`` runs on; None for a workflow this deployment does not have, or
    none of the shape it started with (BLOCKED): its executions still read."""
    try:
        return wiring.engine().registry.matching(ex.workflow, ex.fingerprint, ex.workflow_version)
    except UnknownWorkflow:
        return None


def _step_names(ex: Execution) -> list[str] | None:
    spec = _spec(ex)
    return None if spec is None else [s.name for s in spec.steps]


def _view(ex: Execution) -> dict[str, Any]:
    """An execution's answer, with ``unregistered`` when this deployment lacks its definition."""
    return views.execution(ex, _step_names(ex), definitions.registration(wiring.engine().registry, ex))


# ---------------------------------------------------------------- executions


def start(request: Request) -> dict[str, Any]:
    _only(request, frozenset())
    body = request.json()
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    unknown = sorted(set(body) - START_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field(s) {unknown}; allowed: {sorted(START_FIELDS)}")
    workflow = body.get("workflow")
    if not isinstance(workflow, str) or not workflow:
        raise InvalidInput("'workflow' must be the name of a registered workflow")
    execution_id = body.get("execution_id")
    ex, created = wiring.engine().start(workflow, body.get("input"), execution_id)
    return response(
        201 if created else 200,
        _view(ex),
        {"location": f"/executions/{ex.id}"},
    )


def status(request: Request) -> dict[str, Any]:
    _only(request, frozenset())
    ex = wiring.engine().get(request.params["id"])
    body = _view(ex)
    body["children"] = children.children_of(wiring.engine(), ex)  # parent: views.execution
    now = wiring.engine().clock.now()
    body["state"] = views.state(progress.state(ex, _spec(ex), now))
    return response(200, body | views.read_at(now))


HISTORY_PARAMS = frozenset({"step", "items_from", "items_limit"})


def history(request: Request) -> dict[str, Any]:
    _only(request, HISTORY_PARAMS)
    execution_id = request.params["id"]
    engine = wiring.engine()
    if request.query.get("step") not in (None, ""):
        return response(200, _items_page(request, execution_id))
    if any(request.query.get(k) not in (None, "") for k in ("items_from", "items_limit")):
        raise InvalidInput("items_from and items_limit page one fan-out step: name it with step=N")
    ex, records = control.timeline(engine, execution_id)
    spec = _spec(ex)
    kinds = progress.step_kinds(spec)
    now = engine.clock.now()
    steps = [views.step(r, kinds) for r in records]
    waiting = views.pending(progress.pending(ex, records, spec))
    opened = fan_view.open_step(engine, ex, records, spec)
    if opened is not None:  # a running, failed or cancelled fan-out: a row of its own, not pending
        forward = sum(1 for s in steps if s["phase"] != "compensation")
        steps.insert(forward, views.open_step(opened))
        waiting = [p for p in waiting if p["index"] != opened.index]
    _add_items(engine, execution_id, steps, spec)
    body = {
        "id": execution_id,
        "steps": steps,
        "pending": waiting,
        "state": views.state(progress.state(ex, spec, now)),
        # Without its definition the steps not run yet are unknown here: ``pending`` is empty, and this says why.
        "unregistered": views.unregistered(ex, definitions.registration(engine.registry, ex)),
        "events": [views.event(e) for e in progress.events(ex, records)],
        **views.read_at(now),
    }
    return response(200, body)


def _add_items(engine: Parts, execution_id: str, steps: list[dict[str, Any]], spec: WorkflowSpec | None) -> None:
    """Each forward parallel/map row gets its first page of items. A fan-out step's
    compensation and catch rows are single steps."""
    for row in steps:
        if row["kind"] in fan_view.FAN_KINDS and row["phase"] == "forward":
            found = fan_view.page(engine, execution_id, row["index"])
            if found is not None:
                row.update(views.fan_page(found, _branch_names(spec, row["index"])))


def _branch_names(spec: WorkflowSpec | None, index: int) -> list[str]:
    """A parallel's branch names, which name its items; none for a map (its items are numbered)."""
    if spec is None or not 0 <= index < len(spec.steps):
        return []
    step = spec.describe()["steps"][index]
    return [b["name"] for b in step.get("branches", [])] if step.get("kind") == "parallel" else []


def _items_page(request: Request, execution_id: str) -> dict[str, Any]:
    """``?step=N&items_from=K&items_limit=L``: one more page of a fan-out step's items."""
    step = _int_param(request, "step", 0, 0, 10_000)
    start = _int_param(request, "items_from", 0, 0, MAX_ITEMS)
    count = _int_param(request, "items_limit", fan_view.PAGE, 1, fan_view.MAX_PAGE)
    engine = wiring.engine()
    ex = engine.get(execution_id)
    found = fan_view.checked_page(engine, ex, step, start, count)
    return {"id": execution_id, "step": step, **views.fan_page(found, _branch_names(_spec(ex), step))}


def list_executions(request: Request) -> dict[str, Any]:
    _only(request, LIST_PARAMS)
    page = wiring.engine().list(
        status=request.query.get("status") or None,
        workflow=request.query.get("workflow") or None,
        limit=_int_param(request, "limit", 50, 1, 1000),
        cursor=request.query.get("cursor") or None,
    )
    registry = wiring.engine().registry
    rows = [views.execution_summary(ex, definitions.registration(registry, ex)) for ex in page.items]
    return response(200, {"executions": rows, "next_cursor": page.cursor})


def cancel(request: Request) -> dict[str, Any]:
    _only(request, frozenset())
    compensate = False
    if request.body.strip():  # no body: a plain cancel, as before
        body = request.json()
        if not isinstance(body, dict) or set(body) - {"compensate"}:
            raise InvalidInput('the cancel body must be a JSON object with at most {"compensate": true|false}')
        compensate = body.get("compensate", False)
        if not isinstance(compensate, bool):
            raise InvalidInput("'compensate' must be true or false")
    ex = wiring.engine().cancel(request.params["id"], compensate=compensate)
    return response(200, _view(ex))


def redrive(request: Request) -> dict[str, Any]:
    """One FAILED execution, as ``loom dlq redrive`` does it for its parked record (the console's button)."""
    _only(request, frozenset())
    if request.body.strip():
        raise InvalidInput("redrive takes no body")
    ex = wiring.engine().redrive_failed(request.params["id"])
    return response(200, _view(ex))


MIGRATE_FIELDS = frozenset({"map", "version", "at"})


def migrate(request: Request) -> dict[str, Any]:
    _only(request, frozenset())
    body = request.json()
    if not isinstance(body, dict) or set(body) - MIGRATE_FIELDS:
        raise InvalidInput(f"the migrate body must be a JSON object with {sorted(MIGRATE_FIELDS)}")
    mapping = body.get("map", {})
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise InvalidInput("'map' must be an object of old step name to new step name")
    version, at = body.get("version"), body.get("at")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise InvalidInput("'version' must be an integer")
    if at is not None and not isinstance(at, str):
        raise InvalidInput("'at' must be a step name")
    ex = wiring.engine().migrate(request.params["id"], mapping, version, at=at)
    return response(200, _view(ex))


def workflows(request: Request) -> dict[str, Any]:
    _only(request, frozenset())
    engine = wiring.engine()
    fires = engine.next_fires()  # reads the schedule cursors only if a workflow has a schedule
    return response(
        200,
        {
            "workflows": [
                views.workflow(spec.describe(), fires, control.open_by_version(engine, spec.name))
                for spec in engine.registry
            ],
            **views.read_at(engine.clock.now()),
        },
    )


# ----------------------------------------------------------------------- DLQ


def dlq_list(request: Request) -> dict[str, Any]:
    _only(request, frozenset({"limit"}))
    box = wiring.dead_letters()
    letters = box.peek(_int_param(request, "limit", 20, 1, DLQ_MAX))
    return response(
        200, {"messages": [views.dead_letter(d) for d in letters], "approximate_count": box.approximate_count()}
    )


def dlq_redrive(request: Request) -> dict[str, Any]:
    _only(request, frozenset({"limit"}))
    results = dead_letters.redrive(wiring.engine(), wiring.dead_letters(), _int_param(request, "limit", 50, 1, DLQ_MAX))
    return response(
        200, {"results": [views.redrive_result(r) for r in results], "summary": dead_letters.summarize(results)}
    )


ROUTER = Router()
ROUTER.add("POST", "/executions", start)
ROUTER.add("GET", "/executions", list_executions)
ROUTER.add("GET", "/executions/{id}", status)
ROUTER.add("GET", "/executions/{id}/history", history)
ROUTER.add("POST", "/executions/{id}/cancel", cancel)
ROUTER.add("POST", "/executions/{id}/redrive", redrive)
ROUTER.add("POST", "/executions/{id}/migrate", migrate)
ROUTER.add("GET", "/workflows", workflows)
ROUTER.add("GET", "/dlq", dlq_list)
ROUTER.add("POST", "/dlq/redrive", dlq_redrive)
waits_api.register(ROUTER)  # callbacks and signals (functions/waits_api.py)

# Most specific first: PayloadTooLarge is an InvalidInput, NotFailed and WaitEnded ConflictErrors.
ERROR_STATUS: tuple[tuple[type[LoomError], int], ...] = (
    (PayloadTooLarge, 413),
    (InvalidInput, 400),
    (ExecutionNotFound, 404),
    (WaitEnded, 410),  # a ConflictError, but for good: no retry of this token can win
    (ConflictError, 409),
    (DefinitionChanged, 409),  # the execution is BLOCKED: try again once it resumes
    (TransientError, 503),
    (ResourceMissing, 500),
)


def _retry_after(exc: LoomError) -> dict[str, str] | None:
    """``Retry-After`` for a refusal that says when to try again (``ExecutionBlocked``)."""
    wait = exc.details.get("retry_after")
    return None if not isinstance(wait, int | float) else {"Retry-After": str(math.ceil(wait))}


def handler(event: FunctionUrlEvent, context: Any) -> dict[str, Any]:
    log = get_logger()
    try:
        request = Request.from_event(event)
    except (ValueError, TypeError) as exc:  # a body flagged base64 that is not
        return error_response(400, "malformed_request", f"the request could not be read: {exc}")
    log = log.bind(method=request.method, path=waits_api.redact_path(request.path))  # no token in logs
    try:
        answer = ROUTER.dispatch(request)
    except HttpError as exc:
        answer = error_response(exc.status, exc.code, exc.message, exc.headers)
    except LoomError as exc:
        code = next((s for kind, s in ERROR_STATUS if isinstance(exc, kind)), 500)
        if code >= 500:
            log.error("api.failed", error=error_info(exc))
        answer = error_response(code, exc.code, exc.message, _retry_after(exc))
    except Exception as exc:
        log.exception("api.failed", error=error_info(exc))
        answer = error_response(500, "internal", f"internal error: {type(exc).__name__}")
    log.info("api.request", status=answer["statusCode"])
    return answer
