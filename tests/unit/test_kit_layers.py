"""The kit (loom/, chaos/, workflows/) is layered too: a module imports only its own layer or lower ones.

Parsed with ``ast``, never imported. From the bottom up:

- base: what every part shares (the stack file, the template, the API client, the example workflows,
  and loom.local's own owner-only files and process identities);
- the emulator (the package loom.local.emulator): the AWS services a local stack emulates (moto,
  LocalStack, IAM, SigV4, the clock);
- the Lambda imitation (the package loom.local.lambdas): what AWS does around a function (its
  package, processes, event sources);
- the stack: both put together (``LocalStack``) and the in-process harness ``loom.testing``;
- the tools over a stack: chaos (which owns its own arguments) and the benchmarks;
- the web console, which serves the chaos kit's buttons;
- the command line, the one place that composes them (it starts the console).

The rules: every kit module has a layer (a new one must be placed); no import reaches a higher
layer; no first-party import inside a function; the module-level import graph has no cycle; the
emulator's package never imports the Lambda imitation's, not even under a guard (the emulator knows
nothing of the functions it serves: the Lambda imitation builds on it).
The engine and the Lambda functions sit below the whole kit. An import under ``if TYPE_CHECKING:``
never runs, and one under ``if __name__ == "__main__":`` runs only when the module is the program
(above every layer): both are exempt from the direction and cycle rules, not from the function rule.
A third-party import may wait inside a function (an optional or slow dependency: docker, moto, samcli).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_engine_layers import cycles

ROOT = Path(__file__).resolve().parents[2]
KIT = ("loom", "chaos", "workflows")
BELOW = ("engine", "functions")  # below every kit layer
BASE, EMULATOR, LAMBDA, STACK, TOOLS, CONSOLE, CLI = range(7)

# The layer of every module or package (dotted); a package's entry covers what it holds, and the
# longest matching prefix wins. Data, kept in step with the docstring above. loom.local's two layers
# are its two subpackages: a module's layer is where it lives, and moving it is changing its layer.
LAYERS: dict[str, int] = {
    "workflows": BASE,
    "loom": BASE,
    "loom.schedule": BASE,
    "loom.ttl": BASE,
    "loom.svg": BASE,
    "loom.template": BASE,
    "loom.stackfile": BASE,
    "loom.client": BASE,
    "loom.jsonvalue": BASE,
    "loom.local": BASE,
    "loom.local.private": BASE,
    "loom.local.procs": BASE,
    "loom.local.emulator": EMULATOR,
    "loom.local.lambdas": LAMBDA,
    "loom.local.stack": STACK,
    "loom.testing": STACK,
    "chaos": TOOLS,
    "loom.bench": TOOLS,
    "loom.console": CONSOLE,
    "loom.cli": CLI,
    "loom.__main__": CLI,
}
# Packages whose every module must have an entry of its own (a prefix is not enough): a new module
# beside stack.py must be placed, or go into one of the two subpackages.
PLACED_ONE_BY_ONE = ("loom.local",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def kit_modules() -> dict[str, Path]:
    return {module_name(p): p for top in KIT for p in sorted((ROOT / top).rglob("*.py"))}


def layer_of(name: str) -> int | None:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            if n < len(parts) and prefix in PLACED_ONE_BY_ONE:
                return None
            return LAYERS[prefix]
    return None


def _guard(test: ast.expr) -> str | None:
    """'typing' for ``if TYPE_CHECKING:``, 'main' for ``if __name__ == "__main__":``."""
    if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    ):
        return "typing"
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    ):
        return "main"
    return None


def imports(tree: ast.Module, me: str, is_package: bool) -> list[tuple[str, bool, bool]]:
    """Every first-party module an import loads: (dotted name, inside a function, exempt by a guard)."""
    out: list[tuple[str, bool, bool]] = []

    def names(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            package = me.split(".") if is_package else me.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        return [f"{base}.{a.name}" for a in node.names]

    def walk(node: ast.AST, in_function: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in names(child):
                    if name.split(".")[0] in (*KIT, *BELOW):
                        out.append((name, in_function, guarded))
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            g = guarded or (isinstance(child, ast.If) and _guard(child.test) is not None)
            walk(child, fn, g)

    walk(tree, False, False)
    return out


def resolve(name: str, modules: dict[str, Path]) -> str:
    """``from loom.local.emulator import clock`` names the module loom.local.emulator.clock; ``from loom.x import f``
    names loom.x."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def violations() -> tuple[set[str], dict[str, set[str]]]:
    modules = kit_modules()
    found: set[str] = set()
    graph: dict[str, set[str]] = {}
    for me, path in modules.items():
        graph.setdefault(me, set())
        mine = layer_of(me)
        if mine is None:
            found.add(f"{me}: has no layer")
            continue
        tree = ast.parse(path.read_text(), str(path))
        for name, in_function, guarded in imports(tree, me, path.name == "__init__.py"):
            if in_function:
                found.add(f"{me}: imports {name} inside a function")
                continue
            if guarded or name.split(".")[0] in BELOW:
                continue
            target = resolve(name, modules)
            if target == me:
                continue
            graph[me].add(target)
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                found.add(f"{me} (layer {mine}) imports {target} from layer {theirs} above it")
    return found, graph


# (importer's package, the package it must never import): the emulator serves the functions' AWS
# calls without knowing them, so the Lambda imitation may use the emulator and never the reverse.
FORBIDDEN = (("loom.local.emulator", "loom.local.lambdas"),)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def forbidden_imports(me: str, tree: ast.Module, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """Each import of ``me`` into a package it must not import; guarded or not, a function's or not."""
    found: set[str] = set()
    for name, _, _ in imports(tree, me, is_package):
        target = resolve(name, modules)
        for importer, forbidden in FORBIDDEN:
            if within(me, importer) and within(target, forbidden):
                found.add(f"{me} imports {target}: {importer} never imports {forbidden}")
    return found


def test_every_kit_module_has_a_layer_and_imports_go_only_downward() -> None:
    found, _ = violations()
    assert not found, "kit layer violations:\n" + "\n".join(sorted(found))


def test_the_emulator_never_imports_the_lambda_imitation() -> None:
    modules = kit_modules()
    found: set[str] = set()
    for me, path in modules.items():
        found |= forbidden_imports(me, ast.parse(path.read_text(), str(path)), path.name == "__init__.py", modules)
    assert not found, "\n".join(sorted(found))


def test_every_layer_names_a_kit_module_and_both_local_packages_hold_modules() -> None:
    """A renamed or removed package leaves no entry behind, and each of loom.local's layers is in use."""
    modules = kit_modules()
    assert sorted(name for name in LAYERS if name not in modules) == []
    for importer, forbidden in FORBIDDEN:
        for package in (importer, forbidden):
            assert ROOT.joinpath(*package.split("."), "__init__.py").is_file()
            assert [m for m in modules if within(m, package) and m != package], f"{package} holds no module"


def test_kit_import_graph_has_no_cycle() -> None:
    _, graph = violations()
    assert cycles(graph) == []


def test_the_kit_checker_sees_what_it_must() -> None:
    """It finds a function's import, exempts the two guards, resolves relative imports and places modules."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import boto3\n"
        "from loom.local.emulator import clock\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n    from loom.cli import main\n"
        "def f():\n    from chaos import runner\n"
        'if __name__ == "__main__":\n    from chaos.cli import main_for\n'
    )
    found = imports(ast.parse(source), "loom.console.app", is_package=False)
    assert found == [
        ("loom.local.emulator.clock", False, False),
        ("loom.console.sibling", False, False),
        ("loom.cli.main", False, True),
        ("chaos.runner", True, False),
        ("chaos.cli.main_for", False, True),
    ]
    assert layer_of("loom.local.stack") == STACK
    assert layer_of("loom.local.procs") == BASE
    assert layer_of("loom.local.emulator.backends") == EMULATOR < layer_of("loom.local.lambdas.pool") == LAMBDA
    assert layer_of("loom.local.emulator") == EMULATOR  # the package's own __init__
    assert layer_of("loom.local.lambdas.new_module") == LAMBDA  # a package covers what it holds
    assert layer_of("loom.local.new_module") is None  # placed one by one: a new one must be placed
    assert layer_of("loom.console.server") == CONSOLE > layer_of("chaos.target") == TOOLS
    assert layer_of("loom.cli.demo") == CLI
    assert (
        resolve("loom.local.emulator.clock.advance", {"loom.local.emulator.clock": Path()})
        == "loom.local.emulator.clock"
    )


def test_the_forbidden_direction_checker_sees_what_it_must() -> None:
    """It finds the emulator's import of the Lambda imitation in every form, and lets the other way pass."""
    modules = {name: Path() for name in ("loom.local.lambdas.pool", "loom.local.emulator.clock", "loom.local.stack")}
    breach = "loom.local.emulator.meter imports loom.local.lambdas.pool: "
    breach += "loom.local.emulator never imports loom.local.lambdas"
    for form in (
        "from loom.local.lambdas import pool\n",
        "from ..lambdas.pool import FunctionPool\n",
        "import loom.local.lambdas.pool\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loom.local.lambdas.pool import FunctionPool\n",
        "def f():\n    from loom.local.lambdas import pool\n",
    ):
        assert forbidden_imports("loom.local.emulator.meter", ast.parse(form), False, modules) == {breach}, form
    allowed = "from loom.local import stack\nfrom loom.local.emulator import clock\n"
    assert forbidden_imports("loom.local.emulator.meter", ast.parse(allowed), False, modules) == set()
    assert forbidden_imports("loom.local.emulator", ast.parse("from ..lambdas import pool\n"), True, modules)
    assert (
        forbidden_imports(
            "loom.local.lambdas.esm", ast.parse("from loom.local.emulator import clock\n"), False, modules
        )
        == set()
    )
    assert not within("loom.local.emulator_old", "loom.local.emulator")
