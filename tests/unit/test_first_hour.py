"""Frictions a new user met in the first hour (issue #25): each has its fix tested here or
beside the code it touched (test_local_imports.py, test_cli.py, test_waits_api.py; friction 2's
control plane, CLI and callback answers in integration/test_unregistered_workflow.py, its console
line in e2e/test_console_browser.py; the bootstrap warning in integration/test_packaging.py)."""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import signal
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine import Registry, progress, step, workflow
from engine.errors import CallbackTimeout, SignalTimeout
from engine.retry import RetryPolicy, decide, for_wait, retries_timeouts
from engine.state import Execution, Status, StepRecord
from engine.workflow import wait_for_callback
from loom import stack_settings, stackfile
from loom.cli import follow
from loom.cli import local as local_cli
from loom.testing import WorkflowTest

README = Path(__file__).resolve().parents[2] / "loom" / "testing" / "README.md"


def _reg() -> Registry:
    reg = Registry()

    def hello(ctx: Any) -> dict[str, Any]:
        return {"greeting": f"hello {ctx.data['name']}"}

    workflow("first_hour", registry=reg)(type("FirstHour", (), {"steps": [step(hello)]}))
    return reg


def test_an_execution_calls_its_context_output_as_the_api_and_the_cli_do() -> None:
    with WorkflowTest(_reg()) as t:
        ex = t.run(t.start("first_hour", {"name": "ada"}))
        assert ex is not None and ex.output == {"name": "ada", "greeting": "hello ada"}
        assert ex.output is ex.context


def test_the_testing_readme_lists_fields_an_execution_and_a_step_record_have() -> None:
    text = README.read_text()
    execution = re.search(r"Its\s+fields: (.*?)`history` gives", text, re.S)
    record = re.search(r"`history` gives one `StepRecord` per step:(.*?)\n\n", text, re.S)
    assert execution and record, "the README lists the fields"
    named = set(re.findall(r"`(\w+)`", execution.group(1))) - {"COMPLETED", "FAILED", "COMPENSATED", "WAITING"}
    named -= {"run", "execution", "run_workflow", "Execution", "output"}
    assert {"id", "status", "error", "input", "context"} <= named
    assert all(hasattr(Execution, f) or f in Execution.__dataclass_fields__ for f in named), named
    assert hasattr(Execution, "output")
    fields = set(re.findall(r"`(\w+)`", record.group(1))) - {"outcome", "started_at", "finished_at", "retry_delay"}
    assert fields and fields <= set(StepRecord.__dataclass_fields__), fields


def test_no_stack_found_says_where_it_looked_and_how_to_point_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOM_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    message = stackfile.no_stack_message()
    assert f"looked for {tmp_path / '.loom' / 'stack.json'}, from the current directory's .loom" in message
    assert "LOOM_STATE_DIR" in message and "--state-dir" in message


PLANS = {
    "WorkerFunction": {"processes": 2, "source": "default", "note": "2 process(es): the template sets neither " * 3},
    "SweeperFunction": {"processes": 1, "source": "template", "note": "1 process(es), as in AWS (Reserved...=1)"},
    "ControlPlaneFunction": {"processes": 2, "source": "default", "note": "2 process(es): an approximation " * 3},
}


def test_up_tells_concurrency_in_one_short_line_and_the_reasons_only_when_verbose() -> None:
    out = io.StringIO()
    local_cli._print_endpoints({"concurrency": PLANS}, out)
    lines = [line for line in out.getvalue().splitlines() if "process" in line or "concurrency" in line]
    assert lines == ["  processes:                   Worker 2, Sweeper 1, ControlPlane 2 (2 approximate; -v says why)"]
    assert len(lines[0]) <= 100
    verbose = io.StringIO()
    local_cli._print_endpoints({"concurrency": PLANS}, verbose, verbose=True)
    text = verbose.getvalue()
    assert all(f"    {name}: {plan['note']}" in text for name, plan in PLANS.items())
    assert "-v says why" not in text


def test_up_verbose_survives_detach() -> None:
    parser = argparse.ArgumentParser(prog="loom")
    local_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["up", "--verbose"])
    assert args.verbose and "--verbose" in local_cli._rebuild_argv(args)
    assert not parser.parse_args(["up"]).verbose


def test_watch_counts_from_the_stacks_clock_and_a_time_jump_gets_a_new_page_in_a_pipe() -> None:
    t = [1000.0]
    pace = follow.Pace(now=lambda: t[0], monotonic=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    nap = {"kind": "sleeping", "reason": "sleeping until x", "until_epoch": 1000.0 + 3 * 86400, "step": 0}
    body = {"id": "n", "steps": [], "pending": [], "state": nap}
    skews = [0.0, 0.0, 86400.0, 86400.0]  # `loom time advance 1d` between the second and third look

    class Client:
        def __init__(self) -> None:
            self.looks = 0

        def history(self, execution_id: str) -> dict[str, Any]:
            self.looks += 1
            if self.looks > len(skews):
                return {"id": "n", "steps": [], "pending": [], "state": {"kind": "completed", "reason": "completed"}}
            return {**body, "read_at_epoch": t[0] + skews[self.looks - 1]}

    out = io.StringIO()  # not a terminal: a page per change, not per tick
    args = argparse.Namespace(id="n", interval=1.0, traceback=False)
    assert follow.watch(Client(), args, pace, out) == 0  # type: ignore[arg-type]
    pages = out.getvalue().split("\n\n")
    assert len(pages) == 3, "the first page, the page after the jump, the end"
    assert "(in 3d00h)" in pages[0] and "stack's clock" not in pages[0]
    assert "(in 1d23h)" in pages[1], "counted from the stack's clock, a day later"
    assert "the stack's clock is +1d00h from yours" in pages[1]
    assert pages[2].startswith("n  COMPLETED")


def test_the_watch_clock_runs_on_between_answers_with_the_skew_it_last_saw() -> None:
    t = [50.0]
    clock = follow.StackClock(follow.Pace(now=lambda: t[0]))
    clock.observe({"read_at_epoch": 3650.0})
    t[0] = 60.0
    assert clock.now() == 3660.0 and clock.jumps == 1
    clock.observe({"read_at_epoch": 3661.0})  # a second's latency is no jump
    assert clock.jumps == 1 and clock.note().startswith("(the stack's clock is +1h00m")
    clock.observe({})  # an older control plane: the skew seen last stays
    assert clock.now() == 3661.0


def _approval_reg(retry: RetryPolicy | None = None) -> Registry:
    reg = Registry()
    approval = wait_for_callback("approve", timeout=timedelta(days=3), retry=retry)
    # The workflow's default policy (six attempts) is what a first workflow gets.
    workflow("three_day_approval", registry=reg)(type("Approval", (), {"steps": [approval]}))
    return reg


def test_a_three_day_callback_wait_lasts_three_days_under_the_default_policy() -> None:
    with WorkflowTest(_approval_reg()) as t:
        t.start("three_day_approval", {}, execution_id="a1")
        assert t.run("a1").status.value == "WAITING"
        began = t.clock.now()
        ex = t.run("a1", skip_waits=True)
        assert ex.status.value == "FAILED" and ex.error["type"] == "CallbackTimeout"
        assert t.clock.now() - began == pytest.approx(3 * 86400, abs=120), "one wait, not six"
        [record] = t.history("a1")
        assert [a.error["type"] for a in record.attempts] == ["CallbackTimeout"]
        step_info = t.engine.registry.get("three_day_approval").describe()["steps"][0]
        assert step_info["timeout_retried"] is False and step_info["retry"]["max_attempts"] == 6


def test_a_wait_that_names_its_retry_is_asked_again() -> None:
    with WorkflowTest(_approval_reg(RetryPolicy(max_attempts=2, base=1, jitter="none"))) as t:
        t.start("three_day_approval", {}, execution_id="a2")
        ex = t.run("a2", skip_waits=True)
        assert ex.status.value == "FAILED"
        [record] = t.history("a2")
        assert [a.error["type"] for a in record.attempts] == ["CallbackTimeout", "CallbackTimeout"]
        assert t.engine.registry.get("three_day_approval").describe()["steps"][0]["timeout_retried"] is True


def test_a_waits_body_still_retries_under_the_workflows_policy_but_its_timeout_does_not() -> None:
    policy = for_wait(RetryPolicy(max_attempts=6))
    rng = random.Random(0)
    assert decide(policy, CallbackTimeout("late"), 1, rng).reason == "no_retry_on"
    assert decide(policy, SignalTimeout("late"), 1, rng).reason == "no_retry_on"
    assert decide(policy, ConnectionError("mail server"), 1, rng).retry, "a failing submit is retried"
    assert for_wait(policy) is policy and not retries_timeouts(policy)


# ---------------------------------------------------------------- friction 2: a restart comes back the same


def test_the_command_line_wins_over_the_remembered_settings_and_an_empty_value_forgets() -> None:
    saved = stack_settings.Settings(
        {"WorkflowModules": "workflows,myapp.flows", "Stage": "dev"}, ("engine", "/p/myapp")
    )
    kept = stack_settings.resolve(saved, {}, None)
    assert kept.settings == saved
    assert kept.reused == ("Stage=dev", "WorkflowModules=workflows,myapp.flows", "SOURCES=engine /p/myapp")
    moved = stack_settings.resolve(saved, {"Stage": "prod", "WorkflowModules": ""}, "engine functions")
    assert moved.settings == stack_settings.Settings({"Stage": "prod"}, ("engine", "functions"))
    assert moved.reused == () and moved.forgotten == ("WorkflowModules",)
    fresh = stack_settings.resolve(saved, {"Stage": "prod"}, None, forget=True)
    assert fresh.settings == stack_settings.Settings({"Stage": "prod"}, None) and fresh.reused == ()
    assert stack_settings.reuse_line(fresh, Path("/s")) is None


def test_the_settings_file_is_owner_only_and_a_broken_one_is_a_clear_error(tmp_path: Path) -> None:
    written = stack_settings.write(stack_settings.Settings({"A": "1"}, ("engine",)), tmp_path)
    assert written == tmp_path / "stack_settings.json" and stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert stack_settings.read(tmp_path) == stack_settings.Settings({"A": "1"}, ("engine",))
    written.write_text('{"parameters": {"A": 1}}')
    with pytest.raises(stack_settings.SettingsError, match="--forget-parameters"):
        stack_settings.read(tmp_path)
    written.write_text("{not json")
    with pytest.raises(stack_settings.SettingsError, match=str(written)):
        stack_settings.read(tmp_path)
    assert stack_settings.read(tmp_path / "none") is None


class _Started:
    """A LocalStack that starts at once and records what it was given; ``stop`` ends it."""

    given: list[Any] = []

    def __init__(self, options: Any) -> None:
        self.options, self.restored, self.info = options, None, {}
        self.state_dir = options.state_dir
        _Started.given.append(options)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Stopped:
    """``loom up``'s wait for Ctrl-C, already over."""

    def set(self) -> None:
        pass

    def wait(self, timeout: float) -> bool:
        return True


def _up(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    parser = argparse.ArgumentParser(prog="loom")
    local_cli.register(parser.add_subparsers(dest="command"))
    code = local_cli.cmd_up(parser.parse_args(["up", "--no-console", *argv]))
    return code, _Started.given[-1] if _Started.given else None, capsys.readouterr().err


@pytest.fixture
def restartable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("SOURCES", raising=False)
    monkeypatch.setattr(local_cli, "LocalStack", _Started)
    monkeypatch.setattr(local_cli, "threading", argparse.Namespace(Event=_Stopped))
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # _up_foreground installs its own handlers
    monkeypatch.setattr(local_cli, "_print_endpoints", lambda *a, **k: None)
    _Started.given = []
    return tmp_path


def test_a_restart_without_its_parameters_reuses_them_and_says_so_in_one_line(
    restartable: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCES", f"engine functions workflows {restartable}/myapp")
    code, options, err = _up(capsys, "--parameter", "WorkflowModules=workflows,myapp.flows")
    assert code == 0 and "reusing" not in err
    assert stat.S_IMODE(os.stat(restartable / "stack_settings.json").st_mode) == 0o600
    monkeypatch.delenv("SOURCES")
    code, options, err = _up(capsys)  # the restart that lost in-flight work before
    assert code == 0 and dict(options.parameters) == {"WorkflowModules": "workflows,myapp.flows"}
    assert options.sources == ("engine", "functions", "workflows", f"{restartable}/myapp")
    [line] = [x for x in err.splitlines() if "reusing" in x]
    assert "WorkflowModules=workflows,myapp.flows" in line and "SOURCES=engine functions" in line
    assert str(restartable / "stack_settings.json") in line and "--forget-parameters" in line
    code, options, err = _up(capsys, "--parameter", "WorkflowModules=")
    assert dict(options.parameters) == {} and "forgot WorkflowModules" in err
    code, options, err = _up(capsys)
    assert dict(options.parameters) == {}, "the forgotten parameter stays forgotten"
    assert options.sources == ("engine", "functions", "workflows", f"{restartable}/myapp")
    code, options, err = _up(capsys, "--forget-parameters")
    assert options.sources is None and stack_settings.read(restartable) == stack_settings.Settings({}, None)


def test_a_failed_start_remembers_nothing_and_a_detached_start_hands_the_settings_on(
    restartable: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(_Started):
        def start(self) -> None:
            raise OSError("port taken")

    stack_settings.write(
        stack_settings.Settings({"WorkflowModules": "myapp.flows"}, ("engine", "/p/myapp")), restartable
    )
    monkeypatch.setattr(local_cli, "LocalStack", Broken)
    code, _, err = _up(capsys, "--parameter", "WorkflowModules=other")
    assert code == 1 and "port taken" in err
    assert stack_settings.read(restartable) == stack_settings.Settings(
        {"WorkflowModules": "myapp.flows"}, ("engine", "/p/myapp")
    )
    handed: list[tuple[list[str], Any]] = []
    monkeypatch.setattr(
        local_cli, "_up_detached", lambda args, sources: handed.append((local_cli._rebuild_argv(args), sources)) or 0
    )
    assert _up(capsys, "-d")[0] == 0
    [(argv, sources)] = handed
    assert argv[argv.index("--parameter") + 1] == "WorkflowModules=myapp.flows" and sources == ("engine", "/p/myapp")
    assert "--forget-parameters" not in argv


def test_a_blocked_execution_says_whether_its_workflow_changed_shape_or_is_not_registered() -> None:
    base = {"id": "b", "workflow": "shop", "status": Status.BLOCKED, "current_step": 2, "version": 3}
    base |= {"input": {}, "context": {}, "created_at": 0.0, "updated_at": 0.0, "workflow_version": 1}
    gone = Execution(**base, blocked={"reason": "workflow_not_registered", "from": "SLEEPING", "since": 0.0})
    assert progress.state(gone, None, 0.0).reason == (
        "blocked on step 2: workflow_not_registered, this deployment has no version of 'shop' "
        "(register it again and it resumes)"
    )
    changed = Execution(**base, blocked={"reason": "definition_changed", "from": "SLEEPING", "since": 0.0})
    assert "definition_changed" in progress.state(changed, None, 0.0).reason
