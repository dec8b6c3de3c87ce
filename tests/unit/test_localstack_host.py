"""Host-mode LocalStack: its install record, interpreter and environment (the process: e2e/test_localstack_host.py)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from loom.cli import main
from loom.local.emulator import localstack_host

pytestmark = pytest.mark.unit


def _fake_install(home: Path, **stamp: object) -> Path:
    venv = localstack_host.venv_dir(home)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    record = {"version": localstack_host.LOCALSTACK_VERSION, "requirements": list(localstack_host.REQUIREMENTS)}
    (venv / localstack_host.STAMP).write_text(json.dumps({**record, **stamp}))
    return venv


def test_only_a_finished_install_of_this_version_and_these_pins_counts(tmp_path: Path) -> None:
    assert localstack_host.installed(tmp_path / "none") is None
    venv = _fake_install(tmp_path / "ok")
    found = localstack_host.installed(tmp_path / "ok")
    assert found is not None and found.python == venv / "bin" / "python" and found.python.is_absolute()
    _fake_install(tmp_path / "old", version="4.13.0")
    assert localstack_host.installed(tmp_path / "old") is None
    _fake_install(tmp_path / "pins", requirements=["localstack-core==4.14.0"])
    assert localstack_host.installed(tmp_path / "pins") is None
    half = _fake_install(tmp_path / "half")
    (half / localstack_host.STAMP).unlink()  # pip died half way: no stamp
    assert localstack_host.installed(tmp_path / "half") is None


def test_the_not_installed_message_names_the_command_and_the_place(tmp_path: Path) -> None:
    said = localstack_host.not_installed_message(tmp_path)
    assert "`loom localstack install`" in said and str(localstack_host.venv_dir(tmp_path)) in said


def test_an_interpreter_that_is_not_313_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    if sys.version_info[:2] == localstack_host.PYTHON_VERSION:
        pytest.skip("this interpreter is 3.13 itself")
    monkeypatch.setenv("LOOM_LOCALSTACK_PYTHON", sys.executable)
    with pytest.raises(localstack_host.HostModeError, match=r"is not a Python 3\.13 interpreter"):
        localstack_host.find_python()


def test_home_follows_the_environment_then_the_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOOM_LOCALSTACK_HOME", str(tmp_path / "ls"))
    assert localstack_host.localstack_home() == tmp_path / "ls"
    monkeypatch.delenv("LOOM_LOCALSTACK_HOME")
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path / "state"))
    assert localstack_host.localstack_home() == tmp_path / "state" / "localstack"


def test_host_mode_keeps_to_its_data_dir_and_port(tmp_path: Path) -> None:
    env = localstack_host.host_environment(tmp_path, 4599, ["sqs", "kms", "sqs"])
    assert env["GATEWAY_LISTEN"] == "127.0.0.1:4599"
    assert env["OVERRIDE_IN_DOCKER"] == "0" and env["DNS_ADDRESS"] == "0"
    assert env["FILESYSTEM_ROOT"].startswith(str(tmp_path)) and env["CONFIG_DIR"].startswith(str(tmp_path))
    assert env["SERVICES"] == "kms,sqs"


def test_each_port_keeps_to_a_data_dir_of_its_own_and_another_ports_is_removed_at_stop(tmp_path: Path) -> None:
    home = tmp_path / "ls"
    installation = localstack_host.Installation(
        venv=home / "venv", python=home / "venv" / "bin" / "python", version="4.14.0", requirements=()
    )
    default = localstack_host.data_dir(home, localstack_host.DEFAULT_PORT)
    assert default == home / "data"
    other, third = localstack_host.data_dir(home, 4599), localstack_host.data_dir(home, 4600)
    assert len({default, other, third}) == 3
    assert localstack_host.host_environment(other, 4599, ["sqs"])["FILESYSTEM_ROOT"] != (
        localstack_host.host_environment(default, 4566, ["sqs"])["FILESYSTEM_ROOT"]
    )
    for where in (default, other):
        (where / "filesystem").mkdir(parents=True)
    localstack_host.HostLocalStack(installation, other, 4599, ["sqs"], tmp_path / "o.log").stop()
    localstack_host.HostLocalStack(installation, default, 4566, ["sqs"], tmp_path / "d.log").stop()
    assert not other.exists() and (default / "filesystem").is_dir()
    # A directory given by hand is never a scratch one, whatever the port.
    (tmp_path / "mine").mkdir()
    localstack_host.HostLocalStack(installation, tmp_path / "mine", 4599, ["sqs"], tmp_path / "m.log").stop()
    assert (tmp_path / "mine").is_dir()


def _closed_port() -> int:
    """A loopback port nothing listens on: bound, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_loom_localstack_status_says_where_it_is_installed_and_whether_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("LOOM_LOCALSTACK_HOME", str(tmp_path / "none"))
    assert main(["localstack", "status", "--endpoint-url", endpoint]) == 0
    out = capsys.readouterr().out
    assert "host mode: not installed (loom localstack install)" in out
    assert f"{endpoint}: no LocalStack answers" in out
    venv = _fake_install(tmp_path / "ok")
    monkeypatch.setenv("LOOM_LOCALSTACK_HOME", str(tmp_path / "ok"))
    assert main(["localstack", "status", "--endpoint-url", endpoint]) == 0
    assert f"host mode: installed in {venv}" in capsys.readouterr().out
