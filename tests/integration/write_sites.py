"""Every conditional write the adapters make, named by where the engine makes it.

A *site* is what a conditional request is, read off the Python stack at the moment botocore
sends it: the adapter method that makes it and the two innermost engine functions that
called it, e.g. ``DynamoStore.put_execution <- attempts.advance <- steps.run_step``. The
ledger's write is named by its adapter method alone (its callers are workflow code).

``Sites`` records the site of every conditional request a client sends (a PutItem,
UpdateItem or DeleteItem with a ``ConditionExpression``, and every TransactWriteItems);
``LostAt`` loses the answer of the next request of an armed site, after DynamoDB applied
it, so that botocore sends the very same request again (its ``needs-retry`` event).
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import engine

ENGINE = Path(engine.__file__).resolve().parent
ADAPTERS = ENGINE / "adapters"
WRITE_OPERATIONS = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
# The adapters' write methods the engine calls (engine/ports.py): a call of one of these in
# engine/ is a conditional write site. DynamoLedger.apply is called by workflow code.
STORE_WRITES = frozenset(
    {
        "create_execution",
        "put_execution",
        "commit_step",
        "record_failure",
        "put_signal",
        "consume_signal",
        "note_parked",
        "open_join",
        "decide_join",
        "commit_item",
        "fail_item",
        "decline_item",
        "put_schedule",
        "delete_schedule",
        "retain",
        "create_handle",
        "put_handle",
    }
)
LEDGER_WRITE = "DynamoLedger.apply"
STORE_PARTS = frozenset({"FanStore", "ScheduleStore", "RetentionStore", "HandleStore"})  # mixed into DynamoStore


def is_conditional(operation: str, params: dict[str, Any]) -> bool:
    return operation == "TransactWriteItems" or (operation in WRITE_OPERATIONS and "ConditionExpression" in params)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ENGINE).with_suffix("").parts)


def _frames(frame: FrameType | None) -> Iterator[tuple[Path, str]]:
    while frame is not None:
        yield Path(frame.f_code.co_filename).resolve(), frame.f_code.co_qualname
        frame = frame.f_back


def site_of(frame: FrameType | None) -> str:
    """The site of the conditional request being sent from ``frame``'s stack."""
    adapter: str | None = None
    callers: list[str] = []
    for path, name in _frames(frame):
        if path.is_relative_to(ADAPTERS):
            adapter = name  # the outermost adapter frame: the method its caller called
            continue
        if adapter is None:
            continue  # botocore's own frames
        if adapter == LEDGER_WRITE:
            return adapter
        if path.is_relative_to(ENGINE):
            callers.append(f"{_module(path)}.{name}")
            if len(callers) == 2:
                break
    if adapter is None:
        return "<not an adapter's write>"
    return " <- ".join([_as_store(adapter), *callers])


def _as_store(method: str) -> str:
    """FanStore, ScheduleStore and RetentionStore are parts of DynamoStore: a site names the store the engine holds."""
    owner, _, name = method.rpartition(".")
    return f"DynamoStore.{name}" if owner in STORE_PARTS else method


def innermost(site: str) -> tuple[str, str]:
    """(adapter method, calling function) of a site: what the static scan finds in the source."""
    parts = site.split(" <- ")
    return parts[0].rsplit(".", 1)[-1], parts[1] if len(parts) > 1 else ""


class Sites:
    """Records the site of every conditional write a client sends (one per request, not per retry)."""

    def __init__(self, client: Any) -> None:
        self.seen: Counter[str] = Counter()
        self.by_scenario: dict[str, set[str]] = {}
        self.scenario = ""
        client.meta.events.register("before-parameter-build.dynamodb", self._before_call)

    def _before_call(self, model: Any = None, params: Any = None, **_: Any) -> None:
        if model is None or not is_conditional(model.name, params or {}):
            return
        site = site_of(sys._getframe(1))
        self.seen[site] += 1
        self.by_scenario.setdefault(self.scenario, set()).add(site)


class LostAt:
    """DynamoDB applies the next conditional write of an armed site, then its answer is lost."""

    def __init__(self, client: Any) -> None:
        self._armed: dict[str, int] = {}  # site -> how many more of its applied writes to let through
        self.lost: list[str] = []
        self.lost_requests: list[dict[str, Any]] = []  # the request bodies whose answers were lost
        self.applied: list[str] = []  # the sites of the applied conditional writes, in order
        for operation in WRITE_OPERATIONS:
            client.meta.events.register(f"needs-retry.dynamodb.{operation}", self._needs_retry)

    def arm(self, site: str, nth: int = 1) -> None:
        """Lose the answer of the ``nth`` write of ``site`` that DynamoDB applies from now on."""
        self._armed[site] = nth - 1

    def _needs_retry(self, response: Any = None, operation: Any = None, request_dict: Any = None, **_: Any) -> Any:
        if (
            response is None
            or response[0].status_code != 200
            or not is_conditional(operation.name, _body(request_dict))
        ):
            return None  # not applied, or not conditional: botocore's own handler decides
        site = site_of(sys._getframe(1))
        self.applied.append(site)
        if site not in self._armed:
            return None
        if self._armed[site]:
            self._armed[site] -= 1
            return None
        del self._armed[site]
        self.lost.append(site)
        self.lost_requests.append(_body(request_dict))
        return 0  # seconds to wait before botocore sends the same request again


def _body(request_dict: Any) -> dict[str, Any]:
    return json.loads(request_dict["body"]) if request_dict and request_dict.get("body") else {}


def static_sites() -> set[tuple[str, str]]:
    """(store method, calling function) for every call of a store write in engine/ (not the adapters)."""
    found: set[tuple[str, str]] = set()
    for path in sorted(ENGINE.rglob("*.py")):
        if path.is_relative_to(ADAPTERS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for qualname, node in _functions(tree):
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr in STORE_WRITES
                    and _is_store(call.func.value)
                    and _enclosing(node, call) is node
                ):
                    found.add((call.func.attr, f"{_module(path)}.{qualname}"))
    return found


def _is_store(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "store") or (
        isinstance(node, ast.Name) and node.id == "store"
    )


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _functions(node, f"{name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def _enclosing(function: ast.AST, target: ast.AST) -> ast.AST:
    """The innermost function under ``function`` (itself included) whose body holds ``target``."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            if any(n is target for n in ast.walk(child)):
                return child
        elif any(n is target for n in ast.walk(child)):
            inner = _enclosing(child, target)
            if inner is not child:
                return inner
    return function
