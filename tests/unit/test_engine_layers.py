"""engine/ is layered: a module imports only from layers below its own (DESIGN.md "Layout").

Parsed with ``ast``, never imported. The rules:

- every engine module has a layer in ``LAYERS`` (a new module must be placed);
- no import reaches a higher layer;
- the primitives (layer 3) come in groups of siblings; a primitive never imports one of
  another group (they share the kernel, layer 2, instead);
- no import inside a function, anywhere under engine/ (adapters included);
- the adapters import only layers 0 and 1 (and each other);
- the module-level import graph has no cycle.

An import under ``if TYPE_CHECKING:`` never runs: it is exempt from the direction rule
(not from the function rule).
"""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"

# The layer of every module (dotted under engine/); data, kept in step with DESIGN.md.
LAYERS: dict[str, int] = {
    # L0: values, rules and the authoring API; nothing of the engine's behaviour
    **dict.fromkeys(
        [
            "errors",
            "state",
            "messages",
            "limits",
            "config",
            "clock",
            "retry",
            "log",
            "join",
            "batch_result",
            "history_rules",
            "record_names",
            "workflow",
            "fanout_spec",
            "ports",
            "parked",
            "error_report",
            "schedule_expr",
            "poll_strategy",
            "serde",
            "__init__",  # the authoring API: it re-exports layer 0 only (tests/unit/test_authoring_api.py)
        ],
        0,
    ),
    # L1: pure decisions and the parts a handler works with
    **dict.fromkeys(
        ["transitions", "verdicts", "outcome", "dead_letters", "parts", "fan_results", "schedule_plan", "poll_plan"], 1
    ),
    # L2: the kernel every primitive shares
    **dict.fromkeys(
        ["outbox", "escalation", "attempts", "parking", "lifecycle", "fan_items", "definitions", "retention"], 2
    ),
    # L3: the primitives (grouped below)
    **dict.fromkeys(
        [
            "steps",
            "polls",
            "callbacks",
            "signals",
            "children",
            "handles",
            "catching",
            "compensation",
            "fan_undo",
            "fanout",
            "fan_children",
        ],
        3,
    ),
    # L4: who dispatches and who serves: the runner, the sweeper, control, the read models
    **dict.fromkeys(
        [
            "runner",
            "waits",
            "sweeper",
            "schedules",
            "control",
            "progress",
            "fan_view",
            "runtime",
            "batch",
        ],
        4,
    ),
}
PRIMITIVE_GROUPS: list[set[str]] = [
    {"steps", "polls"},
    {"callbacks", "signals", "children", "handles"},
    {"catching", "compensation", "fan_undo"},
    {"fanout", "fan_children"},
]
ADAPTER_MAX_LAYER = 1

# Violations still to be removed (the restructure of issue #19 emptied it): the test fails
# on any violation not listed here, and on a listed one that is gone.
KNOWN: set[str] = set()


def module_name(path: Path) -> str:
    rel = path.relative_to(ENGINE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def resolve(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The engine modules an import statement loads (dotted under engine/)."""
    found: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == "engine" or alias.name.startswith("engine."):
                found.append(alias.name.removeprefix("engine").lstrip(".") or "__init__")
        return found
    if node.level or node.module is None or not (node.module == "engine" or node.module.startswith("engine.")):
        return found
    base = node.module.removeprefix("engine").lstrip(".")
    for alias in node.names:
        sub = f"{base}.{alias.name}" if base else alias.name
        if (ENGINE / Path(*sub.split("."))).with_suffix(".py").exists() or (ENGINE / Path(*sub.split("."))).is_dir():
            found.append(sub)
        else:
            found.append(base or "__init__")
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import: (node, inside a function, under TYPE_CHECKING)."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool, bool]] = []

    def walk(node: ast.AST, in_function: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append((child, in_function, typing_only))
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            tc = typing_only or (isinstance(child, ast.If) and _is_type_checking(child.test))
            walk(child, fn, tc)

    walk(tree, False, False)
    return out


def group_of(name: str) -> int | None:
    return next((i for i, g in enumerate(PRIMITIVE_GROUPS) if name in g), None)


def layer_of(name: str) -> int | None:
    if name.startswith("adapters"):
        return None
    return LAYERS.get(name)


def violations() -> tuple[set[str], dict[str, set[str]]]:
    found: set[str] = set()
    graph: dict[str, set[str]] = {}
    for path in sorted(ENGINE.rglob("*.py")):
        me = module_name(path)
        graph.setdefault(me, set())
        adapter = me.startswith("adapters")
        if not adapter and me not in LAYERS:
            found.add(f"{me}: has no layer")
        mine = layer_of(me)
        for node, in_function, typing_only in imports(ast.parse(path.read_text(), str(path))):
            for target in resolve(node):
                if in_function:
                    found.add(f"{me}: imports {target} inside a function")
                    continue
                if typing_only:
                    continue
                graph[me].add(target)
                theirs = layer_of(target)
                if adapter:
                    if not target.startswith("adapters") and (theirs is None or theirs > ADAPTER_MAX_LAYER):
                        found.add(f"{me}: adapter imports {target} (layer {theirs})")
                    continue
                if target.startswith("adapters") or mine is None or theirs is None:
                    if target.startswith("adapters"):
                        found.add(f"{me}: imports the adapter {target}")
                    continue
                if theirs > mine:
                    found.add(f"{me}: imports {target} from layer {theirs} above its own ({mine})")
                elif mine == theirs == 3 and group_of(me) != group_of(target):
                    found.add(f"{me}: imports the sibling primitive {target}")
    return found, graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_every_group_member_is_a_primitive() -> None:
    members = set().union(*PRIMITIVE_GROUPS)
    assert members == {m for m, layer in LAYERS.items() if layer == 3}


def test_engine_imports_go_only_downward() -> None:
    found, _ = violations()
    new = sorted(found - KNOWN)
    gone = sorted(KNOWN - found)
    assert not new, "layer violations:\n" + "\n".join(new)
    assert not gone, "fixed violations still listed in KNOWN (remove them):\n" + "\n".join(gone)


def test_engine_import_graph_has_no_cycle() -> None:
    _, graph = violations()
    assert cycles(graph) == []


def test_the_checker_sees_what_it_must(tmp_path: Path) -> None:
    """The parser finds an import in a function, one under TYPE_CHECKING and a sibling's."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from engine import steps, transitions as tr\n"
        "from engine.outbox import send\n"
        "if TYPE_CHECKING:\n    from engine.runtime import Engine\n"
        "def f():\n    from engine import control\n"
    )
    found = [(resolve(n), fn, tc) for n, fn, tc in imports(ast.parse(source))]
    assert (["steps", "transitions"], False, False) in found
    assert (["outbox"], False, False) in found
    assert (["runtime"], False, True) in found
    assert (["control"], True, False) in found
    assert group_of("fanout") != group_of("compensation")
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
