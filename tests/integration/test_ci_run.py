""".ci/run installs chromium and chromedriver (apt-get, non-interactive) when it runs as root and
they are missing, sets up .venv, installs host-mode LocalStack beside the default tier, then runs
the slow tier with the chaos table on LocalStack beside it: CI always runs the console's browser
tests, and every test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from loom.template import ROOT

pytestmark = pytest.mark.integration

TOOLS = ("bash", "dirname", "env", "cat", "mkdir")
# After the browser's install: the venv; LocalStack's install beside the default tier; the slow
# tier (with the arguments passed on) beside the chaos table on LocalStack. Either of a pair may
# log first.
BESIDE = {"scripts/install-localstack ", "scripts/test -k console"}
TABLE = ".venv/bin/loom chaos all --emulator localstack --junit reports/chaos-localstack.xml"
BESIDE_THE_SLOW_TIER = {"scripts/test --slow -k console", TABLE}
AFTER_THE_BROWSER = ["scripts/bootstrap ", *sorted(BESIDE), *sorted(BESIDE_THE_SLOW_TIER)]


def in_order(calls: list[str]) -> list[str]:
    """The calls with each pair that runs side by side in a fixed order."""
    return [calls[0], *sorted(calls[1:3]), *sorted(calls[3:5]), *calls[5:]]


def sandbox(tmp_path: Path, *, uid: int, present: tuple[str, ...]) -> tuple[Path, Path]:
    """A copy of .ci/run with stand-ins for id, apt-get, chromium, chromedriver and scripts/test."""
    repo, bin_dir, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "calls.log"
    (repo / ".ci").mkdir(parents=True)
    (repo / "scripts").mkdir()
    bin_dir.mkdir()
    shutil.copy2(ROOT / ".ci" / "run", repo / ".ci" / "run")
    stubs = {
        "id": f"echo {uid}\n",
        "apt-get": f'echo "apt-get $* DEBIAN_FRONTEND=${{DEBIAN_FRONTEND:-}}" >> {log}\n',
        **{name: "exit 0\n" for name in present},
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    for script in ("scripts/bootstrap", "scripts/test", "scripts/install-localstack", ".venv/bin/loom"):
        (repo / script).parent.mkdir(parents=True, exist_ok=True)
        (repo / script).write_text(f'#!/bin/sh\necho "{script} $*" >> {log}\n')
        (repo / script).chmod(0o755)
    for tool in TOOLS:  # only these from the system: chromium must not be found on the real PATH
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return repo, log


def run(repo: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    return subprocess.run(
        [str(tmp_path / "bin" / "bash"), str(repo / ".ci" / "run"), "-k", "console"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_as_root_without_a_browser_it_installs_chromium_then_runs_the_tests(tmp_path: Path) -> None:
    repo, log = sandbox(tmp_path, uid=0, present=())
    done = run(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("apt-get update") and calls[0].endswith("DEBIAN_FRONTEND=noninteractive")
    install = calls[1].split()
    assert install[:2] == ["apt-get", "install"] and "-y" in install and "-qq" in install
    assert {"chromium", "chromium-driver"} <= set(install)
    assert calls[1].endswith("DEBIAN_FRONTEND=noninteractive")
    assert in_order(calls[2:]) == AFTER_THE_BROWSER


def test_a_missing_driver_alone_is_installed_too(tmp_path: Path) -> None:
    repo, log = sandbox(tmp_path, uid=0, present=("chromium",))
    assert run(repo, tmp_path).returncode == 0
    assert "chromium-driver" in log.read_text()


@pytest.mark.parametrize(("uid", "present"), [(1000, ()), (0, ("chromium", "chromedriver"))])
def test_not_root_or_already_installed_installs_nothing(tmp_path: Path, uid: int, present: tuple[str, ...]) -> None:
    repo, log = sandbox(tmp_path, uid=uid, present=present)
    done = run(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    assert in_order(log.read_text().splitlines()) == AFTER_THE_BROWSER


def test_a_failing_default_tier_fails_the_run_before_the_slow_tier(tmp_path: Path) -> None:
    repo, log = sandbox(tmp_path, uid=1000, present=())
    (repo / "scripts" / "test").write_text(f'#!/bin/sh\necho "scripts/test $*" >> {log}\nexit 3\n')
    done = run(repo, tmp_path)
    assert done.returncode == 3 and in_order(log.read_text().splitlines()) == AFTER_THE_BROWSER[:3]


def test_a_failing_localstack_install_fails_the_run_before_the_slow_tier_and_shows_why(tmp_path: Path) -> None:
    repo, log = sandbox(tmp_path, uid=1000, present=())
    install = repo / "scripts" / "install-localstack"
    install.write_text(
        f'#!/bin/sh\necho "scripts/install-localstack $*" >> {log}\necho "no Python 3.13 here" >&2\nexit 4\n'
    )
    done = run(repo, tmp_path)
    assert done.returncode == 1 and in_order(log.read_text().splitlines()) == AFTER_THE_BROWSER[:3]
    assert "no Python 3.13 here" in done.stderr and "installing host-mode LocalStack failed (exit 4" in done.stderr


@pytest.mark.parametrize(("failing", "code"), [("slow", 6), ("table", 7), ("both", 6)])
def test_the_slow_tier_and_the_chaos_table_both_run_and_either_failing_fails_the_run(
    tmp_path: Path, failing: str, code: int
) -> None:
    repo, log = sandbox(tmp_path, uid=1000, present=())
    if failing in ("slow", "both"):
        (repo / "scripts" / "test").write_text(
            f'#!/bin/sh\necho "scripts/test $*" >> {log}\n[ "$1" = --slow ] && exit 6\nexit 0\n'
        )
    if failing in ("table", "both"):
        (repo / ".venv" / "bin" / "loom").write_text(
            f'#!/bin/sh\necho ".venv/bin/loom $*" >> {log}\necho "chaos: lost_timer: FAIL" \nexit 7\n'
        )
    done = run(repo, tmp_path)
    assert done.returncode == code
    assert in_order(log.read_text().splitlines()) == AFTER_THE_BROWSER
    if failing != "slow":
        assert "chaos: lost_timer: FAIL" in done.stdout
        assert "the chaos table on host-mode LocalStack failed (exit 7" in done.stderr


def test_the_real_script_is_executable_and_ends_in_the_slow_tier_beside_the_localstack_table() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    lines = [line for line in script.read_text().splitlines() if line and not line.startswith("#")]
    install = "./scripts/install-localstack > reports/install-localstack.log 2>&1 &"
    table = f"{TABLE} > reports/chaos-localstack.log 2>&1 &"
    assert lines.index("./scripts/bootstrap") < lines.index(install)
    assert lines.index(install) < lines.index('./scripts/test "$@" || status=$?')
    assert lines.index('./scripts/test "$@" || status=$?') < lines.index(table)
    assert lines.index(table) < lines.index('./scripts/test --slow "$@" || slow=$?')
    assert lines.index('./scripts/test --slow "$@" || slow=$?') < lines.index('wait "$chaos_table" || table=$?')
