"""The docs stay true to the repository (issue #25, "Docs").

README.md fits its budget and opens with the two commands; every ``loom`` command line shown in
the README and the guide parses with the CLI's own parser; every script named exists; a Python
block that names a file (``# path/to/file.py`` as its first line) is that file, or one of its
marked regions (``# docs:start NAME`` ... ``# docs:end NAME``); every relative link resolves,
heading anchor included.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loom.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
README_BUDGET = 8192
README_OPENING = (
    "```bash\n"
    "./scripts/demo   # set up .venv, then run the example workflows end to end on a local stack"
    " (and the chaos table)\n"
    "./scripts/test   # set up .venv, then ruff, mypy --strict and the default test tier"
    " (JUnit XML in reports/)\n"
    "```\n"
)
GUIDE_PAGES = (
    "index.md",
    "workflows.md",
    "waits.md",
    "fanout.md",
    "sagas.md",
    "testing.md",
    "local-loop.md",
    "deploying.md",
    "cli.md",
)
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```\n", re.S | re.M)
CLAIM = re.compile(r"^# ([\w./-]+\.py)\n")
REGION = re.compile(r"^# docs:start (\w+)[^\n]*\n(.*?)^# docs:end \1\n", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
SCRIPT = re.compile(r"(?<![\w/.-])(?:\./)?scripts/[\w.-]*\w")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"<[a-z][a-z _-]*>")
SEPARATORS = {"&&", "||", "|", ";", "(", ")", "&"}


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    text: str


def guide_pages() -> list[Path]:
    return [GUIDE / name for name in GUIDE_PAGES]


def shown_pages() -> list[Path]:
    """The pages whose commands and code are checked: the README and the guide."""
    return [README, *guide_pages()]


def linked_pages() -> list[Path]:
    """Every page whose relative links must resolve (DESIGN.md links its dated notes)."""
    tops = [README, ROOT / "CONTRIBUTING.md", ROOT / "DESIGN.md", ROOT / "chaos" / "README.md"]
    return [*tops, *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    return [Block(page, m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def regions(source: Path) -> dict[str, str]:
    """A file's marked regions by name, less the blank lines the formatter puts before an end marker."""
    found = REGION.findall(source.read_text(encoding="utf-8"))
    return {name: body.rstrip("\n") + "\n" for name, body in found}


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code: where a link is a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


# ------------------------------------------------------------------ command lines


def shell_lines(text: str) -> Iterator[str]:
    """A shell block's logical lines: continuations joined, heredoc bodies left out."""
    pending, heredoc = "", None
    for raw in text.splitlines():
        if heredoc is not None:
            heredoc = None if raw.strip() == heredoc else heredoc
            continue
        marker = re.search(r"<<-?'?(\w+)'?", raw)
        if marker:
            heredoc = marker.group(1)
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        yield pending + raw
        pending = ""


def loom_argv(segment: list[str]) -> list[str] | None:
    """The arguments given to ``loom`` by one simple command, or None when it runs something else."""
    words = list(segment)
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    if not words:
        return None
    head = words[0]
    if head in ("loom", "$LOOM") or head.endswith("/loom"):
        return words[1:]
    if head.endswith("python") and words[1:3] == ["-m", "loom"]:
        return words[3:]
    return None


def commands_in_line(line: str) -> list[list[str]]:
    lexer = shlex.shlex(PLACEHOLDER.sub("X-1", line.replace("<<", " ")), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    return [argv for argv in map(loom_argv, segments) if argv is not None]


def stand_in(word: str) -> str:
    """A synopsis' placeholder (``ID``, ``N``, ``NAME=VALUE``) as a value it stands for."""
    if word in ("N", "S", "K", "RATE"):
        return "1"
    return re.sub(r"[A-Z][A-Z_]*", "X-1", word) if re.fullmatch(r"[A-Z][A-Z_]*(=[A-Z][A-Z_]*)?", word) else word


def inline_commands(text: str) -> list[list[str]]:
    """Inline ``loom ...`` spans that are command lines, not synopses with placeholders."""
    found = []
    for span in INLINE_CODE.findall(FENCE.sub("", text)):
        line = span.strip("`")
        if not line.startswith("loom ") or re.search(r"[\[\]|<>…]|\.\.\.", line):
            continue
        words = [stand_in(word) for word in shlex.split(line)]
        if not {"--help", "--version"} & set(words):
            found.append(words[1:])
    return found


@dataclass(frozen=True)
class Shown:
    page: Path
    argv: list[str]
    inline: bool


def shown_commands() -> list[Shown]:
    found: list[Shown] = []
    for page in shown_pages():
        for block in blocks(page):
            if block.lang in ("bash", "sh", "shell", "console"):
                lines = shell_lines(block.text)
                found += [Shown(page, argv, False) for line in lines for argv in commands_in_line(line)]
        found += [Shown(page, argv, True) for argv in inline_commands(page.read_text(encoding="utf-8"))]
    return found


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """Parse without running: argparse's own message when the line does not parse."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as stop:
            return f"exit {stop.code}: {stderr.getvalue().strip()}"
    return None


def command_error(parser: argparse.ArgumentParser, shown: Shown) -> str | None:
    """Prose naming a command (```loom status``` shows ...) leaves its arguments out: an inline span
    is given stand-ins for the positionals it lacks, and the rest must parse."""
    argv = list(shown.argv)
    error = parse_error(parser, argv)
    for _ in range(4):
        choice = re.search(r"invalid choice: 'X-1' \(choose from '([^']+)'", error or "")
        if choice and shown.inline:
            argv[-1] = choice.group(1)  # the stand-in stood for one of a closed set
        elif error and shown.inline and "the following arguments are required" in error:
            argv.append("X-1")
        else:
            break
        error = parse_error(parser, argv)
    return error


# ------------------------------------------------------------------ commands the tests run

SUBCOMMANDS = ("time_command", "callback_command", "dlq_command", "localstack_command")
# A test runs a command by calling the CLI with its words: loom(state, "time", "advance", ...) in
# the e2e tests, main([...]) or loom(capsys, ...) in the integration tests.
CALL = r"\b(?:loom|main|cli)\([^()]*?"
# Commands the tests run through the Python entry the command calls, or a script that calls it:
# the test file and the words in it that run it.
RUN_ELSEWHERE: dict[tuple[str, ...], tuple[str, str]] = {
    ("demo",): ("tests/e2e/test_demo.py", "Demo(DemoOptions("),
    ("chaos", "all"): ("tests/chaos/conftest.py", "run_all(chaos_target, names="),
    ("chaos", "soak"): ("tests/chaos/test_soak.py", "run_soak(target, 100"),
    ("console",): ("tests/integration/test_console.py", '(["console", "--port", "70000"]'),
    ("logs",): ("tests/integration/test_cli_follow.py", 'root.parse_args(["logs", *argv])'),
    ("localstack", "install"): ("tests/e2e/test_localstack_host.py", 'main(["localstack", "install"])'),
    ("localstack", "status"): ("tests/unit/test_localstack_host.py", '"localstack", "status"'),
}


def command_path(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, ...] | None:
    """The command and subcommand a line runs (``time advance``), None when it does not parse."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit:
        return None
    path = [args.command, *(getattr(args, name) for name in SUBCOMMANDS if getattr(args, name, None))]
    if args.command == "chaos":
        path.append(args.scenario if args.scenario in ("all", "soak", "list") else "<scenario>")
    return tuple(path)


def shown_paths() -> dict[tuple[str, ...], set[str]]:
    parser = build_parser()
    found: dict[tuple[str, ...], set[str]] = {}
    for shown in shown_commands():
        path = command_path(parser, shown.argv)
        if path is not None:
            found.setdefault(path, set()).add(shown.page.name)
    return found


def suite_sources() -> dict[Path, str]:
    files = sorted(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_docs.py")
    return {p: p.read_text(encoding="utf-8") for p in files}


def run_by(path: tuple[str, ...], sources: dict[Path, str]) -> list[str]:
    """The test files that call the CLI with the command's words, in order."""
    words = r"[\"'],\s*[\"']".join(map(re.escape, path))
    call = re.compile(CALL + r"[\"']" + words + r"[\"']")
    return [str(p.relative_to(ROOT)) for p, text in sources.items() if call.search(text)]


# ------------------------------------------------------------------ links


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6} (.+)$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:: not ours to check here
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


# ------------------------------------------------------------------ the README


def test_the_readme_fits_its_budget_and_opens_with_the_two_commands() -> None:
    data = README.read_bytes()
    assert len(data) <= README_BUDGET, f"README.md is {len(data):,} bytes; the budget is {README_BUDGET:,}"
    assert data.startswith(README_OPENING.encode()), "README.md must open with the demo and test commands"


def test_the_readme_workflow_is_the_example_file_region() -> None:
    claimed = [b for b in blocks(README) if b.lang == "python" and CLAIM.match(b.text)]
    assert claimed, "README.md shows one workflow from a real file"
    block = claimed[0]
    claim = CLAIM.match(block.text)
    assert claim is not None and claim.group(1) == "workflows/examples.py"
    assert block.text.split("\n", 1)[1] == regions(ROOT / "workflows" / "examples.py")["readme"]


def test_every_guide_page_exists_and_the_index_links_each() -> None:
    index = (GUIDE / "index.md").read_text(encoding="utf-8")
    for page in guide_pages():
        assert page.is_file(), f"{page.relative_to(ROOT)} is missing"
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"the guide's index does not link {page.name}"


# ------------------------------------------------------------------ code shown is real


def test_a_python_block_that_names_a_file_is_that_file_or_a_marked_region() -> None:
    checked = 0
    for page in shown_pages():
        for block in blocks(page):
            if block.lang != "python":
                continue
            claim = CLAIM.match(block.text)
            # Code shown is a real file that the tests run: a block that names none is made up.
            assert claim is not None, f"{page.name} shows Python that is no file's: {block.text[:80]!r}"
            source = ROOT / claim.group(1)
            assert source.is_file(), f"{page.name} shows {claim.group(1)}, which does not exist"
            text = source.read_text(encoding="utf-8")
            body = block.text[claim.end() :]
            shown = body == text or body in regions(source).values()
            assert shown, f"{page.name}'s block differs from {claim.group(1)}"
            checked += 1
    assert checked >= 1


def test_every_loom_command_shown_parses_with_the_cli_parser() -> None:
    parser = build_parser()
    commands = shown_commands()
    assert len(commands) >= 30, f"only {len(commands)} command lines found: the scanner lost them"
    failures = [
        f"{shown.page.relative_to(ROOT)}: loom {shlex.join(shown.argv)} -> {error}"
        for shown in commands
        if (error := command_error(parser, shown)) is not None
    ]
    assert not failures, "\n".join(failures)


def test_every_command_shown_is_run_by_a_test() -> None:
    """Parsing is not running: each command the docs show (``loom time advance``, ``loom dlq
    redrive``...) is run by some test, through the CLI or the Python entry the command calls."""
    paths = shown_paths()
    assert len(paths) >= 20, f"only {len(paths)} commands found: the scanner lost them"
    sources = suite_sources()
    missing = []
    for path, pages in sorted(paths.items()):
        if path in RUN_ELSEWHERE:
            where, words = RUN_ELSEWHERE[path]
            if words not in sources.get(ROOT / where, ""):
                missing.append(f"loom {' '.join(path)} ({', '.join(sorted(pages))}): {where} no longer has {words!r}")
        elif not run_by(path, sources):
            missing.append(f"loom {' '.join(path)} ({', '.join(sorted(pages))}): no test runs it")
    assert not missing, "\n".join(missing)
    assert set(RUN_ELSEWHERE) <= set(paths), "an entry for a command the docs no longer show"


def test_the_run_by_scan_sees_a_call_and_not_a_mention() -> None:
    sources = {
        ROOT / "tests" / "a.py": 'code, out, _ = loom(capsys, "time", "advance", "2h")',
        ROOT / "tests" / "b.py": 'text = "loom time advance 2h"  # prose, not a call',
        ROOT / "tests" / "c.py": 'assert main(["dlq", "redrive", "--all"]) == 0',
    }
    assert run_by(("time", "advance"), sources) == ["tests/a.py"]
    assert run_by(("dlq", "redrive"), sources) == ["tests/c.py"]
    assert run_by(("time", "reset"), sources) == []


def test_the_command_scanner_reads_what_a_shell_would() -> None:
    line = 'AWS_ENDPOINT_URL=http://x .venv/bin/loom up --emulator aws && echo "$T" | loom callback succeed -  # x'
    assert commands_in_line(line) == [["up", "--emulator", "aws"], ["callback", "succeed", "-"]]
    assert commands_in_line(".venv/bin/python -m loom chaos soak --seed 1") == [["chaos", "soak", "--seed", "1"]]
    assert commands_in_line(".venv/bin/loom status <id>") == [["status", "X-1"]]
    assert list(shell_lines("a \\\n  b\ncat <<'EOF'\nloom nonsense\nEOF\nc")) == ["a    b", "cat <<'EOF'", "c"]
    spans = "`loom status ID`, `loom up --workers N`, `loom up [-d]`, `loom.testing`, `loom up --env A=B`"
    assert inline_commands(spans) == [["status", "X-1"], ["up", "--workers", "1"], ["up", "--env", "X-1=X-1"]]
    parser = build_parser()
    assert parse_error(parser, ["no-such-command"]) is not None
    assert command_error(parser, Shown(README, ["status"], inline=True)) is None
    assert command_error(parser, Shown(README, ["status"], inline=False)) is not None
    assert command_error(parser, Shown(README, ["status", "--no-such-flag"], inline=True)) is not None


@pytest.mark.parametrize("page", [README, ROOT / "CONTRIBUTING.md", *guide_pages()], ids=lambda p: p.name)
def test_every_script_named_exists(page: Path) -> None:
    named = set(SCRIPT.findall(page.read_text(encoding="utf-8")))
    missing = sorted(name for name in named if not (ROOT / name.removeprefix("./")).is_file())
    assert not missing, f"{page.name} names scripts that do not exist: {missing}"


# ------------------------------------------------------------------ links


@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_the_link_checker_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: yes\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-code-heading-yes) [ok](#here) [gone](missing.md) [bad](other.md#nope)\n"
        "`[not a link](missing.md)` [web](https://example.com/x)\n\n## Here\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading #nope"]
