"""Control-plane routes of the waits: complete callbacks and send signals.

| method and path                         | answers                                              |
|-----------------------------------------|------------------------------------------------------|
| POST /callbacks/{token}/succeed         | 200 (a repeat of the same body too), 202 kept, 400, 404, 409, 410, 413 |
| POST /callbacks/{token}/fail            | 200, 400, 404, 409 (``execution_blocked``: Retry-After), 410 |
| POST /callbacks/{token}/heartbeat       | 200, 202 kept, 400, 404, 409, 410                     |
| POST /executions/{id}/signals/{name}    | 200 kept (``delivered``: a wait took it), 400, 404, 409, 413 |

400 a malformed token or body; 404 a token no wait was issued (or a wrong secret); 410
``wait_ended`` the wait has ended for good (completed with another body, timed out, failed,
superseded by a retry, or its execution ended: the message says which); 409 a signal to a
terminal execution (``already_terminal``), a token or a signal for an execution whose workflow
is not registered here (``workflow_not_registered``, with the fix: send it again once it is),
or (``execution_blocked``, with ``Retry-After``) a failure for an execution that is BLOCKED
(DESIGN.md, "BLOCKED"); 202 ``kept``: the execution is BLOCKED, the completion is committed
and applies when it resumes; 413 a result or payload over the item limit. Every check runs
before any write, so a rejected request writes nothing. A token never reaches the
logs: ``redact_path`` keeps only its hash's first 12 characters.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from engine import callbacks
from functions import wiring
from functions.http import HttpError, Request, Router, response

_CALLBACK_PATH = re.compile(r"^/callbacks/([^/]+)")


def redact_path(path: str) -> str:
    """The path as logs may show it: a callback token becomes ``tok:<hash prefix>``."""
    match = _CALLBACK_PATH.match(path)
    if match is None:
        return path
    secret = match.group(1).rsplit(".", 1)[-1]
    return f"/callbacks/tok:{hashlib.sha256(secret.encode()).hexdigest()[:12]}{path[match.end() :]}"


def _body(request: Request) -> Any:
    return request.json() if request.body.strip() else None


def _completion(c: callbacks.Completion) -> dict[str, Any]:
    return {
        "execution_id": c.execution_id,
        "step": c.step,
        "attempt": c.attempt,
        "action": c.action.value,
        "repeat": c.repeat,
        "kept": c.kept,
    }


def _callback(action: callbacks.Action) -> Any:
    def route(request: Request) -> dict[str, Any]:
        _no_query(request)
        body = _body(request)
        if action is not callbacks.Action.HEARTBEAT and body is None:
            from functions.http import MalformedJson

            raise MalformedJson("the request body is empty; send a JSON object")
        done = wiring.engine().complete_callback(request.params["token"], action.value, body)
        # 202: kept for an execution that is BLOCKED, applied when it resumes (engine/callbacks.py).
        return response(202 if done.kept else 200, _completion(done))

    route.__name__ = f"callback_{action.value}"
    return route


def signal(request: Request) -> dict[str, Any]:
    _no_query(request)
    body = _body(request)
    if body is None:
        body = {}
    if not isinstance(body, dict) or set(body) - {"payload"}:
        from engine.errors import InvalidInput

        raise InvalidInput('the request body must be {"payload": {...}}')
    sent = wiring.engine().signal(request.params["id"], request.params["name"], body.get("payload"))
    return response(
        200, {"execution_id": sent.execution_id, "name": sent.name, "signal_id": sent.key, "delivered": sent.delivered}
    )


def _no_query(request: Request) -> None:
    if request.query:
        from engine.errors import InvalidInput

        raise InvalidInput(f"unknown query parameter(s) {sorted(request.query)}; allowed: []")


def _empty_token(request: Request) -> dict[str, Any]:
    raise HttpError(
        400,
        "invalid_token",
        f"the callback token in {request.path} is empty: POST /callbacks/<token>/... with the token "
        "that submit() handed out (or ctx.callback_token(name) of a callback handle)",
    )


def register(router: Router) -> None:
    for action in callbacks.Action:
        router.add("POST", f"/callbacks/{{token}}/{action.value}", _callback(action))
        # An empty token (a variable that was never set) would read as an unknown path.
        router.add("POST", f"/callbacks//{action.value}", _empty_token)
    router.add("POST", "/executions/{id}/signals/{name}", signal)
