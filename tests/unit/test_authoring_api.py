"""One import for authors: ``engine``'s export list is pinned, and the examples import only from it.

A name added to or removed from ``engine.__all__`` fails here until PINNED says the same, so the
authoring API changes on purpose. The README's examples, loom/testing/README.md's and every module
of workflows/ import the engine as ``from engine import <names of __all__>``; the runtime
(``Engine``, ``process_batch``, the clocks, the configuration) is not part of it.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "loom" / "testing" / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]

PINNED = {
    "NOT_YET",
    "NonRetryableError",
    "Registry",
    "RetryPolicy",
    "Status",
    "StepContext",
    "child",
    "create_callback",
    "exponential",
    "fixed",
    "map_items",
    "not_yet",
    "parallel",
    "sleep",
    "step",
    "wait_for_callback",
    "wait_for_callbacks",
    "wait_for_signal",
    "wait_until",
    "workflow",
}
RUNTIME = {"Engine", "process_batch", "Heartbeat", "shard_of", "EngineConfig", "FakeClock", "SystemClock"}


def engine_imports(source: str) -> list[tuple[str, list[str]]]:
    """Every import of the engine in ``source``: (module, names; ``["*"]`` for ``import engine...``)."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "engine":
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, ["*"]) for a in node.names if a.name.split(".")[0] == "engine"]
    return found


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def outside_the_api(source: str) -> list[str]:
    return [
        f"{module}: {name}"
        for module, names in engine_imports(source)
        for name in names
        if module != "engine" or name not in engine.__all__
    ]


def test_the_export_list_is_the_pinned_one() -> None:
    assert len(engine.__all__) == len(set(engine.__all__)), "a name is listed twice in engine.__all__"
    added, removed = set(engine.__all__) - PINNED, PINNED - set(engine.__all__)
    assert not added and not removed, f"update PINNED on purpose: added {sorted(added)}, removed {sorted(removed)}"


def test_every_exported_name_is_there_and_none_shadows_a_builtin() -> None:
    assert all(hasattr(engine, name) for name in engine.__all__)
    assert not [name for name in engine.__all__ if hasattr(builtins, name)]


def test_the_runtime_is_kept_apart() -> None:
    assert not RUNTIME & set(dir(engine)), "runtime names belong to their modules (engine.runtime, engine.batch...)"


def test_the_docs_examples_import_only_from_the_one_import() -> None:
    blocks = [(doc.name, block) for doc in DOCS for block in python_blocks(doc.read_text())]
    assert len(blocks) >= 5
    assert any(engine_imports(block) for _, block in blocks)
    wrong = {f"{name}: {bad}" for name, block in blocks for bad in outside_the_api(block)}
    assert not wrong, "docs examples importing past `from engine import ...`:\n" + "\n".join(sorted(wrong))


def test_the_example_workflows_import_only_from_the_one_import() -> None:
    modules = sorted((ROOT / "workflows").glob("*.py"))
    wrong = {f"{p.name}: {bad}" for p in modules for bad in outside_the_api(p.read_text())}
    assert not wrong, "workflows/ importing past `from engine import ...`:\n" + "\n".join(sorted(wrong))


def test_the_checker_sees_what_it_must() -> None:
    source = (
        "import engine.runtime\n"
        "from engine import workflow, Engine\n"
        "from engine.fanout_spec import map_items\n"
        "def f():\n    from engine import step\n"
    )
    assert sorted(outside_the_api(source)) == [
        "engine.fanout_spec: map_items",
        "engine.runtime: *",
        "engine: Engine",
    ]
    assert python_blocks("text\n```python\nfrom engine import step\n```\n```bash\nls\n```") == [
        "from engine import step\n"
    ]
