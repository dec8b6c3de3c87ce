"""`loom up` and `loom chaos` flags for local fidelity: concurrency from the template, standard-queue delivery."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from chaos import cli as chaos_cli
from loom.cli import local as local_cli

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loom")
    sub = parser.add_subparsers(dest="command")
    local_cli.register(sub)
    chaos_cli.register(sub)
    return parser.parse_args(list(argv))


def test_up_leaves_concurrency_to_the_template_unless_told() -> None:
    assert local_cli._options(parse("up")).workers is None
    assert local_cli._options(parse("up", "--workers", "3")).workers == 3


@pytest.mark.parametrize(
    ("argv", "rate"),
    [((), 0.0), (("--sqs-standard-chaos",), 0.1), (("--sqs-standard-chaos", "0.3"), 0.3)],
)
def test_up_sqs_standard_chaos_reaches_the_stack_options(argv: tuple[str, ...], rate: float) -> None:
    opts = local_cli._options(parse("up", *argv, "--sqs-chaos-seed", "9"))
    assert (opts.sqs_standard_chaos, opts.sqs_chaos_seed) == (rate, 9)


def test_a_rate_outside_zero_to_one_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parse("up", "--sqs-standard-chaos", "1.5")


def test_detach_keeps_the_flags() -> None:
    argv = local_cli._rebuild_argv(parse("up", "--sqs-standard-chaos", "0.2", "--sqs-chaos-seed", "4"))
    assert argv[argv.index("--sqs-standard-chaos") + 1] == "0.2"
    assert argv[argv.index("--sqs-chaos-seed") + 1] == "4"
    assert "--workers" not in argv  # the template decides in the background supervisor too
    assert "--workers" in local_cli._rebuild_argv(parse("up", "--workers", "2"))


def test_the_endpoints_say_when_concurrency_is_an_approximation() -> None:
    out = io.StringIO()
    info = {
        "concurrency": {
            "WorkerFunction": {"processes": 2, "source": "default", "note": "2 process(es): ... an approximation"}
        },
        "sqs_standard_chaos": 0.1,
    }
    local_cli._print_endpoints(info, out, verbose=True)
    text = out.getvalue()
    assert "WorkerFunction: 2 process(es): ... an approximation" in text
    assert "standard-queue delivery" in text and "0.1" in text


def test_chaos_takes_the_option_and_refuses_it_for_a_running_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("chaos", "duplicate_delivery", "--sqs-standard-chaos").sqs_standard_chaos == 0.1
    args = parse("chaos", "duplicate_delivery", "--running", "--sqs-standard-chaos", "0.2")
    assert chaos_cli.run(args) == 2
    assert "loom up --sqs-standard-chaos" in capsys.readouterr().err


def test_up_refuses_a_schedule_eventbridge_rejects_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import signal

    from loom import template

    real_load = template.load

    def bad_schedule(path: Path | str = template.TEMPLATE) -> dict:
        doc = real_load(path)
        doc["Resources"]["SweeperFunction"]["Properties"]["Events"]["Tick"]["Properties"]["Schedule"] = "rate(5 minute)"
        return doc

    monkeypatch.setattr(template, "load", bad_schedule)
    monkeypatch.setenv("LOOM_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # _up_foreground installs its own handlers
    assert local_cli._up_foreground(parse("up", "--port", "0", "--api-port", "0")) == 1
    err = capsys.readouterr().err
    assert "the stack did not start" in err and "EventBridge rejects 'rate(5 minute)'" in err
    assert not list(tmp_path.glob("stack.json"))  # nothing started, nothing left behind


def test_chaos_all_only_runs_the_named_scenarios_in_the_tables_order(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(chaos_cli, "run_all", lambda names, **kw: ran.append(names) or [])
    args = parse("chaos", "all", "--only", "poison_step,duplicate_delivery")
    assert chaos_cli.run(args) == 0
    assert ran == [["duplicate_delivery", "poison_step"]]
    assert chaos_cli.run(parse("chaos", "poison_step", "--only", "poison_step")) == 2
    with pytest.raises(SystemExit):
        parse("chaos", "all", "--only", "duplicate_delivery,no_such_scenario")
