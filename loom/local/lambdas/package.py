"""The functions' deployment package, built the way ``sam build`` builds it with our Makefile.

In AWS a function sees its package in the task root (the Makefile's ``SOURCES``
plus the packages of requirements.txt) and the python3.12 runtime's own boto3
set. Locally each function process gets exactly that and nothing of the
development venv:

- a *task root*: each ``SOURCES`` entry copied (``cp -R`` semantics, no
  ``__pycache__``), plus the installed distributions that requirements.txt
  names, with their dependencies, copied file by file from this environment;
  then compiled to bytecode once, by the interpreter the functions run under
  (``compile_task_root``);
- a *runtime dir*: the bootstrap (``loom/local/lambdas/runtime.py``) and links to the
  runtime's own boto3, botocore, s3transfer, jmespath, dateutil, urllib3, six.

Both are cached under the state dir by a hash of their content, so an
unchanged tree costs one hash and a changed one a copy of a few hundred KB.
"""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from loom.local import private
from loom.template import ROOT

MAKEFILE = ROOT / "Makefile"
REQUIREMENTS = ROOT / "requirements.txt"
BOOTSTRAP = Path(__file__).resolve().with_name("runtime.py")
# What the python3.12 Lambda runtime puts on sys.path besides the standard library.
RUNTIME_DISTRIBUTIONS = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "urllib3", "six")
FORMAT = "loom-package-2"  # bump when the layout changes: old caches are then rebuilt
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


class PackageError(RuntimeError):
    """The deployment package cannot be built as configured (bad SOURCES, missing requirement)."""


@dataclass(frozen=True)
class FunctionPackage:
    task_root: Path  # LAMBDA_TASK_ROOT: what `sam build` puts in the function's artifact
    runtime_dir: Path  # LAMBDA_RUNTIME_DIR: the bootstrap and the runtime's boto3
    sources: tuple[str, ...]  # the SOURCES entries, as configured

    @property
    def bootstrap(self) -> Path:
        return self.runtime_dir / "bootstrap.py"


# ---------------------------------------------------------------------- what goes in


def makefile_sources(makefile: Path = MAKEFILE) -> tuple[str, ...]:
    """The Makefile's default ``SOURCES ?= ...``: the one place the default list is written."""
    match = re.search(r"^SOURCES\s*\?=\s*(.+)$", makefile.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise PackageError(f"{makefile} has no `SOURCES ?= ...` line")
    return tuple(match.group(1).split())


def configured_sources(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``$SOURCES`` when set (make's ``?=`` takes it from the environment too), else the Makefile's."""
    env = os.environ if env is None else env
    value = env.get("SOURCES", "").split()
    return tuple(value) if value else makefile_sources()


def resolve_sources(entries: Sequence[str], root: Path = ROOT) -> tuple[Path, ...]:
    """Each entry as make sees it: relative to the Makefile's directory, or absolute."""
    paths: list[Path] = []
    names: dict[str, str] = {}
    for entry in entries:
        path = Path(entry) if Path(entry).is_absolute() else root / entry
        if not path.exists():
            raise PackageError(
                f"SOURCES names {entry!r}, which does not exist ({path}); relative entries are relative to "
                f"{root}, as for `sam build`: use an absolute path for code elsewhere"
            )
        if path.name in names:
            raise PackageError(f"SOURCES entries {names[path.name]!r} and {entry!r} would both be {path.name}/")
        names[path.name] = entry
        paths.append(path.resolve())
    return tuple(paths)


def _requirements(path: Path) -> list[Requirement]:
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise PackageError(f"{path.name}: {line!r} is not a requirement the local build understands") from exc
    return out


def requirement_distributions(path: Path = REQUIREMENTS) -> list[metadata.Distribution]:
    """The installed distributions requirements.txt needs, dependencies included (as pip would install)."""
    wanted = [r for r in _requirements(path) if r.marker is None or r.marker.evaluate()]
    seen: dict[str, metadata.Distribution] = {}
    while wanted:
        req = wanted.pop()
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError as exc:
            raise PackageError(
                f"{path.name} needs {req}, which is not installed here: `pip install '{req}'` into this "
                "environment (the local build copies it instead of downloading it)"
            ) from exc
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            raise PackageError(f"{path.name} needs {req}; this environment has {dist.version}")
        seen[key] = dist
        for dep in dist.requires or []:
            sub = Requirement(dep)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                wanted.append(sub)
    return [seen[k] for k in sorted(seen)]


def _dist_entries(dist: metadata.Distribution) -> Iterator[tuple[PurePosixPath, Path]]:
    """(path inside site-packages, installed file) for every file of a distribution."""
    for item in dist.files or []:
        rel = PurePosixPath(str(item))
        if rel.parts[0] == ".." or _SKIP_DIRS.intersection(rel.parts) or rel.suffix in _SKIP_SUFFIXES:
            continue  # scripts outside site-packages, bytecode
        yield rel, Path(str(dist.locate_file(item)))


def _source_files(path: Path) -> Iterator[tuple[PurePosixPath, Path]]:
    if path.is_file():
        yield PurePosixPath(path.name), path
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(_SKIP_SUFFIXES):
                continue
            full = Path(dirpath) / name
            yield PurePosixPath(path.name, full.relative_to(path).as_posix()), full


# ---------------------------------------------------------------------- building


def _digest(files: Sequence[tuple[PurePosixPath, Path]], extra: str) -> str:
    h = hashlib.sha256(f"{FORMAT}\n{extra}\n".encode())
    for rel, full in files:
        h.update(f"{rel}\n".encode())
        h.update(full.read_bytes())
    return h.hexdigest()[:20]


def _materialize(target: Path, fill: Callable[[Path], None]) -> Path:
    """Build into a scratch dir next to ``target``, then rename: a cache entry is whole or absent."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        fill(scratch)
        os.replace(scratch, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _copy_private(source: Path, dest: Path) -> None:
    # The state dir's files are owner-only (loom.local.private); the functions run as the same user.
    shutil.copyfile(source, dest)
    os.chmod(dest, private.FILE_MODE)


def _copy_all(files: Sequence[tuple[PurePosixPath, Path]], into: Path) -> None:
    for rel, full in files:
        dest = into / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_private(full, dest)


def _prune(cache: Path, prefix: str, keep: Path) -> None:
    """Old builds of this state dir go (only one stack runs per state dir)."""
    for old in cache.glob(f"{prefix}-*"):
        if old != keep and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def build_task_root(cache: Path, sources: Sequence[Path], requirements: Path = REQUIREMENTS) -> Path:
    files = [f for src in sources for f in _source_files(src)]
    for dist in requirement_distributions(requirements):
        files.extend(_dist_entries(dist))
    key = _digest(files, "task")
    target = _materialize(cache / f"task-{key}", lambda d: _fill_task_root(files, d))
    _prune(cache, "task", target)
    return target


def _fill_task_root(files: Sequence[tuple[PurePosixPath, Path]], into: Path) -> None:
    _copy_all(files, into)
    compile_task_root(into)


def compile_task_root(root: Path) -> None:
    """Each module's bytecode, written once at build next to the copied source.

    The task root is read-only to the functions (``-B``), as on AWS, so without it every
    function process compiled the whole package as it started: a fifth of a worker's cold
    start (0.2 s of about 1 s), and the chaos kit's faults cost a cold start each, hundreds in
    a soak. Same interpreter, same source (a timestamp pyc is ignored if a file changes), so
    what runs is what ran before; a module that does not compile gets no bytecode and fails
    at import, as it did. Owner-only, as everything in the state dir (loom.local.private).
    """
    compileall.compile_dir(str(root), quiet=2, workers=1)
    for cache in root.rglob("__pycache__"):
        os.chmod(cache, private.DIR_MODE)
        for compiled in cache.iterdir():
            os.chmod(compiled, private.FILE_MODE)


def _link_runtime(into: Path, dists: Sequence[metadata.Distribution]) -> None:
    _copy_private(BOOTSTRAP, into / "bootstrap.py")
    for dist in dists:
        tops = {rel.parts[0] for rel, _ in _dist_entries(dist)}
        for top in sorted(tops):
            source = Path(str(dist.locate_file(top)))
            with contextlib.suppress(FileExistsError):
                os.symlink(source, into / top)


def build_runtime_dir(cache: Path) -> Path:
    try:
        dists = [metadata.distribution(name) for name in RUNTIME_DISTRIBUTIONS]
    except metadata.PackageNotFoundError as exc:
        raise PackageError(f"the runtime's {exc.args[0]} is not installed in this environment") from exc
    # The runtime's libraries are linked, not copied: their RECORD files stand in for their content.
    stamp = "".join(f"{d.metadata['Name']}=={d.version}:{d.read_text('RECORD') or ''}" for d in dists)
    key = _digest([(PurePosixPath("bootstrap.py"), BOOTSTRAP)], stamp)
    target = _materialize(cache / f"runtime-{key}", lambda d: _link_runtime(d, dists))
    _prune(cache, "runtime", target)
    return target


def build(
    state_dir: Path, sources: Sequence[str] | None = None, *, requirements: Path = REQUIREMENTS, root: Path = ROOT
) -> FunctionPackage:
    """The package every function of the stack runs from (the Makefile builds the same one for each)."""
    entries = tuple(sources) if sources is not None else configured_sources()
    cache = Path(state_dir) / "build"
    return FunctionPackage(
        task_root=build_task_root(cache, resolve_sources(entries, root), requirements),
        runtime_dir=build_runtime_dir(cache),
        sources=entries,
    )
