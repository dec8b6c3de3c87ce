"""Every conditional write in engine/adapters goes through the one write path (DESIGN.md, "Write tokens").

Read from the source: each PutItem/UpdateItem/DeleteItem that carries a condition is made
inside ``with conditional(...)`` (engine/adapters/write_token.py, or the store's
``self._conditional``), asks for ``ALL_OLD`` and writes the token ``wt``; each
TransactWriteItems sends a ``ClientRequestToken`` and checks the cancellation's item for
its own token (``carries``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import engine.adapters

ADAPTERS = Path(engine.adapters.__file__).resolve().parent
SINGLE = {"put_item", "update_item", "delete_item"}


def _calls(tree: ast.AST, names: set[str]) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in names
    ]


def _is_conditional(call: ast.Call) -> bool:
    """A condition, or a spread other than the capacity and ALL_OLD ones (``**condition``)."""
    for kw in call.keywords:
        if kw.arg == "ConditionExpression":
            return True
        if kw.arg is None and not (_named(kw.value, "ALL_OLD") or _is_capacity(kw.value)):
            return True
    return False


def _named(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_capacity(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_capacity"


def _under_conditional(tree: ast.AST, call: ast.Call) -> bool:
    for node in ast.walk(tree):
        if not isinstance(node, ast.With) or not any(call is n for n in ast.walk(node)):
            continue
        for item in node.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call):
                name = expr.func.attr if isinstance(expr.func, ast.Attribute) else getattr(expr.func, "id", "")
                if name in ("conditional", "_conditional"):
                    return True
    return False


def _function_of(tree: ast.AST, call: ast.Call) -> ast.FunctionDef:
    found = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(call is n for n in ast.walk(f))]
    return min(found, key=lambda f: sum(1 for _ in ast.walk(f)))


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def test_every_conditional_single_item_write_goes_through_the_write_token_path() -> None:
    checked, wrong = 0, []
    for path in sorted(ADAPTERS.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree, SINGLE):
            if not _is_conditional(call):
                continue
            checked += 1
            where = f"{path.name}:{call.lineno}"
            function = _function_of(tree, call)
            if not _under_conditional(tree, call):
                wrong.append(f"{where}: not inside `with conditional(...)`")
            if not (_mentions(call, "ALL_OLD") or _mentions(function, "ALL_OLD")):
                wrong.append(f"{where}: does not ask for ALL_OLD")
            if not _mentions(function, "TOKEN") and not _mentions(function, "new_token"):
                wrong.append(f"{where}: writes no token")
    assert checked >= 10, "the scan found too few writes: it no longer reads the adapters"
    assert wrong == []


def test_every_transaction_sends_a_client_request_token_and_knows_its_own_item() -> None:
    checked, wrong = 0, []
    for path in sorted(ADAPTERS.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree, {"transact_write_items"}):
            checked += 1
            where = f"{path.name}:{call.lineno}"
            if not any(kw.arg == "ClientRequestToken" for kw in call.keywords):
                wrong.append(f"{where}: no ClientRequestToken")
            if not _mentions(_function_of(tree, call), "carries"):
                wrong.append(f"{where}: a cancellation by its own earlier try is not told apart")
    assert checked >= 1
    assert wrong == []
