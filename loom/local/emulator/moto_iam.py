"""moto's IAM authorization, with the request-to-(action, resource) mapping AWS uses (embedded emulator only).

With ``INITIAL_NO_AUTH_ACTION_COUNT=0`` moto checks every request's SigV4 signature against the
IAM users and assumed-role sessions it knows and evaluates their identity policies. Three things
it gets wrong for the calls Loom makes, each of which would refuse what AWS allows:

- DynamoDB requests are evaluated against resource ``*``, so a statement scoped to the table's
  ARN (every statement in template.yaml) never matches. Here: the table's ARN, or
  ``<table>/index/<name>`` for a Query or Scan of an index.
- A transaction is authorised by AWS as each item's own action (``Put`` -> ``dynamodb:PutItem``,
  ``ConditionCheck`` -> ``dynamodb:ConditionCheckItem``) on each item's table; moto asks for
  ``dynamodb:TransactWriteItems``, which no policy names. A batch is its own action on each table.
- SQS's batch calls are authorised as the single action (``SendMessageBatch`` needs
  ``sqs:SendMessage``); moto asks for ``sqs:SendMessageBatch``.
- moto reads a policy's ``Action`` and ``Resource`` as regular expressions with ``*`` made
  ``.*``: ``?`` (one character in IAM) broke the match and ``.`` matched any character; and it
  compared actions case-sensitively, where IAM does not. Here: IAM's wildcards (:func:`glob_match`).

:func:`checks` decides (pure); :func:`apply` replaces moto's per-request hook with one that
checks the signature once and every (action, resource) pair in turn, and answers refusals in the
service's own error shape (DynamoDB's ``AccessDeniedException`` etc.). What moto still does not do
is listed in DESIGN.md's fidelity table (conditions, resource policies, ``?`` wildcards).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import (
    AccessDeniedError,
    InvalidClientTokenIdError,
    JsonRESTError,
    SignatureDoesNotMatchError,
)
from moto.dynamodb.responses import DynamoHandler
from moto.iam.access_control import IAMPolicyStatement, IAMRequest
from moto.sqs.responses import SQSResponse

TRANSACT_ITEM = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
SQS_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
INDEXED = frozenset({"Query", "Scan"})


def table_arn(region: str, account: str, table: str) -> str:
    return f"arn:aws:dynamodb:{region}:{account}:table/{table}"


def dynamodb_checks(action: str, params: Mapping[str, Any], region: str, account: str) -> Iterator[tuple[str, str]]:
    """The (action, resource) pairs AWS authorises one DynamoDB request as."""
    if action == "TransactWriteItems":
        for item in params.get("TransactItems") or []:
            for kind, body in item.items():
                yield TRANSACT_ITEM.get(kind, kind), table_arn(region, account, str(body.get("TableName")))
    elif action == "TransactGetItems":
        for item in params.get("TransactItems") or []:
            yield "GetItem", table_arn(region, account, str((item.get("Get") or {}).get("TableName")))
    elif action in ("BatchGetItem", "BatchWriteItem"):
        for table in params.get("RequestItems") or {}:
            yield action, table_arn(region, account, str(table))
    elif params.get("TableName"):
        arn = table_arn(region, account, str(params["TableName"]))
        if action in INDEXED and params.get("IndexName"):
            arn += f"/index/{params['IndexName']}"
        yield action, arn
    else:
        yield action, "*"  # ListTables and the like: no resource


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str, fold_case: bool) -> re.Pattern[str]:
    """One compiled expression per policy pattern: every request matches the same few statements."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, flags=re.DOTALL | (re.IGNORECASE if fold_case else 0))


def glob_match(pattern: str, value: str, *, fold_case: bool = False) -> bool:
    """IAM's wildcard match: ``*`` any run of characters, ``?`` exactly one, everything else literal."""
    return _glob_regex(pattern, fold_case).fullmatch(value) is not None


def _element_matches(self: IAMPolicyStatement, statement_element: Any, value: str) -> bool:
    """moto's ``IAMPolicyStatement._check_element_matches`` with IAM's wildcards (actions case-insensitive)."""
    patterns = self._statement[statement_element]
    patterns = patterns if isinstance(patterns, list) else [patterns]
    fold = statement_element in ("Action", "NotAction")
    return any(glob_match(str(p), value, fold_case=fold) for p in patterns)


def sqs_checks(action: str, resource: str) -> Iterator[tuple[str, str]]:
    yield SQS_BATCH.get(action, action), resource


class AuthError(JsonRESTError):
    """An authentication or authorization refusal, in the JSON shape both services answer."""

    code = 400


# (DynamoDB's error type, SQS's) per refusal, with AWS's messages.
_TYPES = {
    "missing": ("MissingAuthenticationTokenException", "MissingAuthenticationToken"),
    "unknown_key": ("UnrecognizedClientException", "InvalidClientTokenId"),
    "signature": ("InvalidSignatureException", "SignatureDoesNotMatch"),
    "denied": ("AccessDeniedException", "AccessDenied"),
}
_MESSAGES = {
    "missing": "Request is missing Authentication Token",
    "unknown_key": "The security token included in the request is invalid.",
    "signature": "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details.",
}


def refusal(service: str, kind: str, message: str | None = None) -> AuthError:
    dynamodb_type, sqs_type = _TYPES[kind]
    if service == "dynamodb":
        error = AuthError(f"com.amazon.coral.service#{dynamodb_type}", message or _MESSAGES[kind])
    else:
        error = AuthError(sqs_type, message or _MESSAGES[kind])
        error.code = 403  # SQS answers its auth errors 403
    return error


def denied_message(principal: str, action: str, resource: str) -> str:
    return (
        f"User: {principal} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )


def _params(handler: Any) -> dict[str, Any]:
    params = getattr(handler, "params", None)
    if isinstance(params, dict):
        return params
    try:
        parsed = json.loads(handler.raw_body or b"{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _check(handler: Any, service: str, pairs: list[tuple[str, str]]) -> None:
    """The signature once, then each (action, resource) pair; a refusal in the service's shape."""
    if not handler.headers.get("Authorization"):
        raise refusal(service, "missing")
    path = handler.raw_path + (f"?{handler.uri.split('?', 1)[1]}" if "?" in handler.uri else "")
    signed = False
    for action, resource in pairs:
        try:
            request = IAMRequest(
                account_id=handler.current_account,
                method=handler.method,
                path=path,
                data=handler.data,
                body=handler.raw_body,
                headers=handler.headers,
                action=action,
            )
            if not signed:
                request.check_signature()
                signed = True
            request.check_action_permitted(resource)
        except InvalidClientTokenIdError as exc:
            raise refusal(service, "unknown_key") from exc
        except SignatureDoesNotMatchError as exc:
            raise refusal(service, "signature") from exc
        except AccessDeniedError as exc:
            message = denied_message(request._access_key.arn, f"{service}:{action}", resource)
            raise refusal(service, "denied", message) from exc


def _free_action() -> bool:
    """moto's bootstrap allowance (the embedded emulator sets it to 0: none)."""
    if ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT:
        ActionAuthenticatorMixin.request_count += 1
        return True
    return False


def _dynamodb_authorize(self: Any, resource: str = "*") -> None:
    if _free_action():
        return
    pairs = list(dynamodb_checks(self._get_action(), _params(self), self.region, self.current_account))
    _check(self, "dynamodb", pairs)


def _sqs_authorize(self: Any, resource: str = "*") -> None:
    if _free_action():
        return
    _check(self, "sqs", list(sqs_checks(self._get_action(), resource)))


def apply() -> None:
    DynamoHandler._authenticate_and_authorize_normal_action = _dynamodb_authorize  # type: ignore[method-assign]
    SQSResponse._authenticate_and_authorize_normal_action = _sqs_authorize  # type: ignore[method-assign]
    IAMPolicyStatement._check_element_matches = _element_matches  # type: ignore[method-assign]
