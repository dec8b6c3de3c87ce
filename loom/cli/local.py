"""``loom up``, ``loom down``, ``loom time``, ``loom demo``: the local loop."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loom import stack_settings, stackfile
from loom.cli import console
from loom.cli.demo import Demo, DemoOptions
from loom.cli.output import error
from loom.console.app import serve_stack
from loom.local import private, procs
from loom.local.emulator import clock as offset_clock
from loom.local.emulator.aws import StackNotReady, stack_info
from loom.local.emulator.backends import EmulatorError
from loom.local.emulator.snapshot import SnapshotError
from loom.local.lambdas.package import PackageError
from loom.local.lambdas.reload import SourceWatcher
from loom.local.stack import REGION, LocalStack, PortTaken, StackOptions

DETACH_TIMEOUT = 180.0


UP_DESCRIPTION = """\
Start the local stack: an AWS emulator with template.yaml's table and queues, and the
template's three functions (worker, sweeper, control plane) in local processes, fed the
way Lambda feeds them (SQS event source, schedule, Function URL).

The data is kept in the state dir (--state-dir, $LOOM_STATE_DIR, default ./.loom): a
restart of `loom up` finds its executions again; --fresh starts empty. The --parameter values
and $SOURCES a stack started with are remembered there too (stack_settings.json): a restart
without them reuses them and says so (NAME= forgets one, --forget-parameters all). Endpoints and pids
go to <state dir>/stack.json, where `loom` and the chaos kit find them. A web console is
served on 127.0.0.1 (its URL, with a session token, is printed with the endpoints). In the foreground,
Ctrl-C stops everything; with -d it runs in the background until `loom down`.
"""


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="where the stack keeps stack.json, its data and logs (default: $LOOM_STATE_DIR, else ./.loom)",
    )


def register(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="start the local stack (emulator + the template's three functions)",
        description=UP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument(
        "--emulator",
        choices=("embedded", "localstack", "aws"),
        default="embedded",
        help="embedded: moto in a child process (no Docker); localstack: a LocalStack that answers, else "
        "compose.yaml's (Docker), else host mode (`loom localstack install`); "
        "aws: target a deployed stack (--stack) instead of running anything (default embedded)",
    )
    up.add_argument(
        "--localstack-dynamodb",
        choices=("auto", "localstack", "embedded"),
        default="auto",
        help="with --emulator localstack: whose DynamoDB. auto: LocalStack's, except a host-mode LocalStack "
        "without DynamoDB Local (offline), where the embedded emulator serves it on --port; localstack: "
        "LocalStack's (host mode fetches DynamoDB Local on first use, online); embedded: the embedded emulator's",
    )
    up.add_argument("--host", default="127.0.0.1", help="address the emulator and control plane listen on")
    up.add_argument("--port", type=int, default=5230, help="embedded emulator port (0: any free port)")
    up.add_argument("--api-port", type=int, default=5231, help="control plane port (0: any free port)")
    up.add_argument(
        "--console-port",
        type=int,
        default=None,
        help="web console port on 127.0.0.1, whatever --host says (0: any free port; default 5232, "
        "or a free one when 5232 is taken)",
    )
    up.add_argument("--no-console", action="store_true", help="do not serve the web console")
    up.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes (the worker's concurrency); default: the template's ReservedConcurrentExecutions / "
        "ScalingConfig.MaximumConcurrency, else 2 (an approximation). A number here overrides the template",
    )
    up.add_argument(
        "--sqs-standard-chaos",
        type=_rate,
        nargs="?",
        const=0.1,
        default=0.0,
        metavar="RATE",
        help="deliver step messages like a standard queue: shuffled batches, and at RATE (default 0.1) "
        "messages held back to a later batch or delivered twice",
    )
    up.add_argument("--sqs-chaos-seed", type=int, default=0, help="seed of --sqs-standard-chaos's decisions")
    up.add_argument("--tick", type=float, default=None, help="seconds between sweeper runs (default: the template's)")
    up.add_argument(
        "--visibility-timeout",
        type=int,
        default=None,
        help="the step queue's visibility timeout and the heartbeat's extension (seconds; template: 60 and 20)",
    )
    up.add_argument(
        "--timeout", action="append", default=[], metavar="FUNCTION=SECONDS", help="override a function's Timeout"
    )
    up.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for every function"
    )
    up.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a template parameter override, remembered in the state dir for the next `loom up` "
        "(NAME= forgets one; $SOURCES is remembered the same way)",
    )
    up.add_argument(
        "--forget-parameters",
        action="store_true",
        help="forget the parameters and SOURCES the last `loom up` here ran with; only this command line counts",
    )
    up.add_argument("--endpoint-url", default=None, help="LocalStack's endpoint (default http://localhost:4566)")
    up.add_argument("--stack", default=None, help="--emulator aws: the CloudFormation stack name")
    up.add_argument("--region", default=None, help="AWS region of the resources (default us-east-1 locally)")
    up.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="the stack's log level"
    )
    up.add_argument("--log-file", default=None, help="write function and emulator output here")
    up.add_argument("-d", "--detach", action="store_true", help="run in the background; return once it answers")
    up.add_argument(
        "-v", "--verbose", action="store_true", help="print why each function runs as many processes as it does"
    )
    # The background supervisor `-d` starts: its output is stack.log, which must hold no secret.
    up.add_argument("--detached-supervisor", action="store_true", help=argparse.SUPPRESS)
    up.add_argument("--fresh", action="store_true", help="forget the data kept in the state dir and start empty")
    up.add_argument(
        "--reload", action="store_true", help="restart the function processes when their source code changes"
    )
    up.add_argument(
        "--watch",
        action="append",
        default=[],
        metavar="DIR",
        help="with --reload: another directory of code to watch (the stack's own packages always are)",
    )
    add_state_dir(up)
    up.set_defaults(func=cmd_up)

    down = sub.add_parser(
        "down",
        help="stop the local stack started by `loom up`",
        description="Stop the local stack: its supervisor, emulator and function processes. Only processes whose "
        "pid, start time and command line match stack.json are ever signalled.",
    )
    down.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait before killing what is left (default 30)"
    )
    add_state_dir(down)
    down.set_defaults(func=cmd_down)

    tm = sub.add_parser(
        "time",
        help="local time travel: move every function's clock",
        description="Move the running local stack's functions' clock (at most 10 years from real time).",
    )
    add_state_dir(tm)
    tsub = tm.add_subparsers(dest="time_command", metavar="ACTION", help="advance, show or reset")
    tsub.required = True
    adv = tsub.add_parser("advance", help="add DURATION (90s, 15m, 2h, 1d) to the functions' clock")
    adv.add_argument("duration", help="90s, 15m, 2h, 1d, 1h30m or a number of seconds")
    adv.set_defaults(func=cmd_time_advance)
    tsub.add_parser("show", help="print the offset and the functions' time").set_defaults(func=cmd_time_show)
    tsub.add_parser("reset", help="back to real time").set_defaults(func=cmd_time_reset)

    demo = sub.add_parser(
        "demo",
        help="run the example workflows end to end on a fresh embedded stack",
        description="Run the example workflows end to end on a fresh embedded stack, then the chaos table.",
    )
    demo.add_argument("--tick", type=float, default=0.5, help="seconds between sweeper runs")
    demo.add_argument("--workers", type=int, default=2, help="worker processes")
    demo.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the workflows")
    demo.add_argument("--no-chaos", action="store_true", help="skip the chaos table")
    demo.add_argument("--keep-state", action="store_true", help="keep the demo's state dir and logs")
    demo.set_defaults(func=cmd_demo)


# ---------------------------------------------------------------------- helpers


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is between 0 and 1, not {value}")
    return value


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"loom: error: {what} must be NAME=VALUE, not {item!r}")
        out[name] = value
    return out


def _answers(url: str | None) -> bool:
    if not url:
        return False
    host_port = url.split("//", 1)[-1].split("/", 1)[0]
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def concurrency_line(plans: dict[str, dict[str, Any]], *, verbose: bool = False) -> str:
    """Each function's process count in one short line; why each count is what it is (the
    template's cap, an override, an approximation) is --verbose's, and the log's ``stack.concurrency``."""
    sizes = ", ".join(f"{name.removesuffix('Function')} {plan.get('processes')}" for name, plan in plans.items())
    # ConcurrencyPlan.approximate: any count the template's cap did not set.
    guessed = sum(1 for plan in plans.values() if plan.get("source") != "template")
    if not guessed:
        return f"{sizes} (the template's caps)"
    return f"{sizes} ({guessed} approximate{'' if verbose else '; -v says why'})"


def _print_endpoints(info: dict[str, Any], out: Any = None, *, secrets: bool = True, verbose: bool = False) -> None:
    """What the stack is; ``secrets=False`` for a log file: the console's URL without its token;
    ``verbose``: the reasons behind the short lines too."""
    out = out or sys.stderr
    out.write(f"loom: {info.get('emulator')} stack up (supervisor pid {info.get('supervisor_pid')})\n")
    checked = " (SigV4 + IAM: the stack file's emulator_credentials)" if info.get("emulator_credentials") else ""
    out.write(f"  emulator (AWS_ENDPOINT_URL): {info.get('aws_endpoint_url')}{checked}\n")
    for service, url in (info.get("aws_endpoints") or {}).items():
        out.write(f"  {service} (AWS_ENDPOINT_URL_{service.upper()}): {url}\n")
    localstack = info.get("localstack") or {}
    if localstack.get("mode") == "host":
        out.write(
            f"  localstack:                  started LocalStack {localstack.get('version')} in host mode "
            f"(pid {localstack.get('pid')}, venv {localstack.get('venv')}), log {localstack.get('log')}\n"
        )
    elif localstack.get("mode"):
        how = "started by docker compose" if localstack["mode"] == "docker" else "already running, left running"
        out.write(f"  localstack:                  {how}\n")
    if localstack.get("dynamodb_note"):
        out.write(f"  dynamodb:                    {localstack['dynamodb_note']}\n")
    signing = " (AWS_IAM: SigV4 with the stack file's key)" if info.get("control_plane_credentials") else ""
    out.write(f"  control plane:               {info.get('control_plane_url')}{signing}\n")
    if info.get("console_url"):
        url = str(info["console_url"])
        shown = url if secrets else url.split("#", 1)[0].split("?", 1)[0] + " (its token: in the stack file)"
        out.write(f"  console:                     {shown}\n")
    out.write(f"  table:                       {info.get('table')}\n")
    out.write(f"  step queue:                  {info.get('queue_url')}\n")
    out.write(f"  dead-letter queue:           {info.get('dlq_url')}\n")
    out.write(f"  worker pids:                 {info.get('worker_pids')}\n")
    package = info.get("package") or {}
    if package:
        out.write(f"  function package (SOURCES):  {' '.join(package.get('sources', []))}\n")
    plans = info.get("concurrency") or {}
    if plans:
        out.write(f"  processes:                   {concurrency_line(plans, verbose=verbose)}\n")
    for function, plan in plans.items() if verbose else ():
        out.write(f"    {function}: {plan.get('note')}\n")
    if info.get("sqs_standard_chaos"):
        out.write(f"  standard-queue delivery:     reorder/duplicate at rate {info['sqs_standard_chaos']}\n")
    out.write(f"  stack file:                  {stackfile.path()}\n")
    out.flush()


# ---------------------------------------------------------------------- up / down


class Progress:
    """``loom: waiting for …`` on stderr, then a line every few seconds while the wait lasts."""

    def __init__(self, what: str, every: float = 3.0) -> None:
        self.what, self.every = what, every
        self.t0 = time.monotonic()
        self._next = self.t0 + every
        sys.stderr.write(f"loom: {what}...\n")
        sys.stderr.flush()

    def tick(self, detail: str = "") -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            sys.stderr.write(f"  still waiting: {now - self.t0:.0f}s{', ' + detail if detail else ''}\n")
            sys.stderr.flush()


def _end_leftovers(info: dict[str, Any]) -> None:
    """The previous stack died without `loom down`: end what is provably left of it."""
    sys.stderr.write(f"loom: {stackfile.not_running_message(info)}\n")
    ended = procs.signal_owned(info.get("processes"), signal.SIGKILL)
    if ended:
        sys.stderr.write(f"loom: ended {len(ended)} leftover processes of that stack: {ended}\n")
    stackfile.remove()


def cmd_up(args: argparse.Namespace) -> int:
    current = stackfile.read()
    if current and current.get("supervisor_pid"):
        if stackfile.supervisor_running(current):
            error(f"a stack is already running (supervisor pid {current['supervisor_pid']}); run `loom down` first")
            return 1
        _end_leftovers(current)
    if args.emulator == "aws":
        return _up_aws(args)
    try:
        sources = _remembered(args)
    except stack_settings.SettingsError as exc:
        error(str(exc))
        return 1
    if args.detach:
        return _up_detached(args, sources)
    return _up_foreground(args, sources)


def _remembered(args: argparse.Namespace) -> tuple[str, ...] | None:
    """This command line over what the last `loom up` here ran with (loom/stack_settings.py):
    ``args.parameter`` becomes the whole set, and the SOURCES to build from is returned. The
    background supervisor is given the set already resolved: it takes it as it is."""
    given = _pairs(args.parameter, "--parameter")
    if args.detached_supervisor:
        return tuple(os.environ.get("SOURCES", "").split()) or None
    state = stackfile.state_dir()
    if args.forget_parameters:
        stack_settings.forget(state)
    saved = None if args.forget_parameters else stack_settings.read(state)
    resolved = stack_settings.resolve(saved, given, os.environ.get("SOURCES"), forget=args.forget_parameters)
    line = stack_settings.reuse_line(resolved, stack_settings.path(state))
    if line:
        sys.stderr.write(line + "\n")
    args.parameter = [f"{k}={v}" for k, v in sorted(resolved.settings.parameters.items())]
    return resolved.settings.sources


def _up_aws(args: argparse.Namespace) -> int:
    if not args.stack:
        error("--emulator aws needs --stack NAME (the deployed CloudFormation stack)")
        return 2
    try:
        info = stack_info(args.stack, args.region)
    except StackNotReady as exc:
        error(str(exc))
        return 1
    stackfile.write(info)
    sys.stderr.write(f"loom: targeting deployed stack {args.stack} in {info['region']}\n")
    sys.stderr.write(f"  control plane: {info['control_plane_url']} (requests are SigV4-signed)\n")
    sys.stderr.write(f"  table: {info['table']}\n  step queue: {info['queue_url']}\n  dlq: {info['dlq_url']}\n")
    return 0


def _options(args: argparse.Namespace, log_stream: Any = None, sources: tuple[str, ...] | None = None) -> Any:
    return StackOptions(
        emulator=args.emulator,
        host=args.host,
        port=args.port,
        api_port=args.api_port,
        workers=args.workers,
        tick=args.tick,
        state_dir=stackfile.state_dir(),
        sqs_standard_chaos=args.sqs_standard_chaos,
        sqs_chaos_seed=args.sqs_chaos_seed,
        env=_pairs(args.env, "--env"),
        timeouts={k: float(v) for k, v in _pairs(args.timeout, "--timeout").items()},
        queue_visibility_timeout=args.visibility_timeout,
        parameters=_pairs(args.parameter, "--parameter"),
        sources=sources,
        region=args.region or REGION,
        endpoint_url=args.endpoint_url,
        localstack_dynamodb=args.localstack_dynamodb,
        log_file=Path(args.log_file) if args.log_file else None,
        log_stream=log_stream,
        persist=True,
        fresh=args.fresh,
        console_port=None if args.no_console else (5232 if args.console_port is None else args.console_port),
        console_port_fallback=args.console_port is None,
        console_factory=serve_stack,
    )


def _up_foreground(args: argparse.Namespace, sources: tuple[str, ...] | None = None) -> int:
    relay = None
    if console.configure(args.log_level, sys.stdout) and not args.log_file:
        relay = console.ConsoleRelay(sys.stdout).start()
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        # Reading template.yaml can fail too (a schedule EventBridge rejects): a clear error, not a trace.
        stack = LocalStack(_options(args, relay.stream if relay else None, sources))
    except (OSError, KeyError, ValueError) as exc:
        error(f"the stack did not start: {exc}")
        return 1
    watcher = None
    try:
        try:
            stack.start()
        except (PortTaken, SnapshotError) as exc:
            error(str(exc))
            return 1
        except (EmulatorError, PackageError, OSError, KeyError, ValueError) as exc:
            error(f"the stack did not start: {exc}")
            return 1
        # Only a stack that started is worth coming back to: a failed start remembers nothing.
        stack_settings.write(stack_settings.Settings(_pairs(args.parameter, "--parameter"), sources), stack.state_dir)
        if stack.restored:
            sys.stderr.write(
                f"loom: kept {stack.restored['items']} items and {stack.restored['messages']} messages "
                f"from {stack.state_file} (--fresh starts empty)\n"
            )
            if stack.restored["skipped"]:
                sys.stderr.write(
                    f"loom: not in this template, not restored: {stack.restored['skipped']} "
                    f"(the saved state is kept in {stack.restored['backup']})\n"
                )
        _print_endpoints(
            stack.info, secrets=not args.detached_supervisor, verbose=args.verbose or args.detached_supervisor
        )
        if args.reload:
            watcher = SourceWatcher(stack.source_dirs(args.watch), stack.reload_functions).start()
            sys.stderr.write(f"loom: --reload watches {', '.join(map(str, watcher.roots))}\n")
        sys.stderr.write("loom: Ctrl-C or `loom down` stops it\n")
        while not stop.wait(0.5):
            pass
    finally:
        if watcher is not None:
            watcher.stop()
        stack.stop()
        if relay is not None:
            relay.close()
    return 0


def _up_detached(args: argparse.Namespace, sources: tuple[str, ...] | None = None) -> int:
    state = private.private_dir(stackfile.state_dir())
    log_path = Path(args.log_file).resolve() if args.log_file else state / "stack.log"
    argv = _rebuild_argv(args)
    env = {**os.environ, "LOOM_STATE_DIR": str(state)}
    if sources:
        env["SOURCES"] = " ".join(sources)  # the remembered list, when the shell has none
    with private.open_append(log_path, binary=True) as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loom.cli.local", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # survives the terminal; `loom down` stops it
        )
    progress = Progress(f"starting the stack in the background (supervisor pid {proc.pid}, log {log_path})")
    deadline = time.monotonic() + DETACH_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = _tail(log_path)
            said = [line for line in tail.splitlines() if line.startswith("loom: error:")]
            if said:  # the supervisor explained itself: that line, not the whole log
                sys.stderr.write("\n".join(said[-1:]) + "\n")
                return 1
            error(f"the stack exited with status {proc.returncode}; last lines of {log_path}:")
            sys.stderr.write(tail)
            return 1
        info = stackfile.read(state)
        if info and info.get("supervisor_pid") == proc.pid and _answers(info.get("control_plane_url")):
            _print_endpoints(info, verbose=args.verbose)
            sys.stderr.write(f"loom: running in the background, logs in {log_path}; `loom down` stops it\n")
            return 0
        progress.tick("functions starting" if info else "emulator starting")
        time.sleep(0.2)
    error(f"the stack did not answer within {DETACH_TIMEOUT:.0f}s; stopping it (logs in {log_path})")
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    return 1


def _rebuild_argv(args: argparse.Namespace) -> list[str]:
    argv = ["up", "--detached-supervisor", "--emulator", args.emulator, "--host", args.host, "--port", str(args.port)]
    argv += ["--localstack-dynamodb", args.localstack_dynamodb]
    argv += ["--api-port", str(args.api_port), "--log-level", args.log_level]
    if args.no_console:
        argv += ["--no-console"]
    elif args.console_port is not None:
        argv += ["--console-port", str(args.console_port)]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    if args.sqs_standard_chaos:
        argv += ["--sqs-standard-chaos", str(args.sqs_standard_chaos), "--sqs-chaos-seed", str(args.sqs_chaos_seed)]
    if args.tick is not None:
        argv += ["--tick", str(args.tick)]
    if args.visibility_timeout is not None:
        argv += ["--visibility-timeout", str(args.visibility_timeout)]
    for flag, values in (
        ("--timeout", args.timeout),
        ("--env", args.env),
        ("--parameter", args.parameter),
        ("--watch", [str(Path(w).resolve()) for w in args.watch]),
    ):
        for value in values:
            argv += [flag, value]
    for flag, value in (("--endpoint-url", args.endpoint_url), ("--region", args.region)):
        if value:
            argv += [flag, value]
    if args.log_file:
        argv += ["--log-file", str(Path(args.log_file).resolve())]
    argv += [
        flag for flag, on in (("--fresh", args.fresh), ("--reload", args.reload), ("--verbose", args.verbose)) if on
    ]
    return argv


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)\n"
    return "\n".join(text[-lines:]) + "\n"


def cmd_down(args: argparse.Namespace) -> int:
    info = stackfile.read()
    if info is None:
        sys.stderr.write("loom: no stack is running here (no stack file)\n")
        return 0
    supervisor = info.get("supervisor_pid")
    if not supervisor:  # --emulator aws: nothing runs locally
        stackfile.remove()
        sys.stderr.write("loom: forgot the deployed stack target\n")
        return 0
    known = info.get("processes") or {}
    if not stackfile.supervisor_running(info):
        _end_leftovers(info)
        return 0
    os.kill(int(supervisor), signal.SIGTERM)
    progress = Progress(f"stopping the stack (supervisor pid {supervisor})")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and (left := procs.owned(known)):
        progress.tick(f"{len(left)} processes left")
        time.sleep(0.1)
    left = procs.owned(known)
    if left:
        # The supervisor did not finish in time: these are provably its own processes.
        sys.stderr.write(f"loom: processes {left} still running after {args.timeout:.0f}s; killing them\n")
        procs.signal_owned({str(p): known[str(p)] for p in left}, signal.SIGKILL)
    stackfile.remove()
    sys.stderr.write(f"loom: stack stopped (supervisor pid {supervisor})\n")
    return 0


# ---------------------------------------------------------------------- time


def _offset_file(*, running: bool) -> Path:
    """The running stack's clock file; ``running`` refuses when no stack is up to see a move."""
    info = stackfile.read()
    if info and info.get("emulator") == "aws":
        raise SystemExit("loom: error: time travel is local only; the deployed stack keeps real time")
    if running and not info:
        raise SystemExit("loom: error: no local stack is running here: `loom up` first (the clock is the stack's)")
    if running and info and not stackfile.supervisor_running(info):
        raise SystemExit(f"loom: error: {stackfile.not_running_message(info)}")
    if info and info.get("clock_offset_file"):
        return Path(info["clock_offset_file"])
    return stackfile.state_dir() / offset_clock.FILENAME


def _show(path: Path) -> None:
    offset = offset_clock.read_offset(path)
    moment = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() + offset))
    sign = "+" if offset >= 0 else "-"
    print(f"clock offset {sign}{offset_clock.format_duration(abs(offset))} ({offset:.0f}s); functions' time {moment}")


def cmd_time_advance(args: argparse.Namespace) -> int:
    try:
        seconds = offset_clock.parse_duration(args.duration)
        path = _offset_file(running=True)
        offset_clock.advance(path, seconds)
    except ValueError as exc:
        error(str(exc))
        return 2
    _show(path)
    # The stack's sweeper watches the clock file: it runs now, so what fell due in the jump
    # (a sleep's end, a scheduled workflow's firing) starts without waiting for the next tick.
    print("the sweeper runs now: `loom list` shows what the jump made due (a schedule fires once per jump)")
    return 0


def cmd_time_show(args: argparse.Namespace) -> int:
    try:
        _show(_offset_file(running=False))
    except ValueError as exc:
        error(str(exc))
        return 1
    return 0


def cmd_time_reset(args: argparse.Namespace) -> int:
    path = _offset_file(running=False)
    offset_clock.reset(path)
    _show(path)
    return 0


# ---------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    options = DemoOptions(
        tick=args.tick,
        workers=args.workers,
        timeout=args.timeout,
        chaos=not args.no_chaos,
        keep_state=args.keep_state,
    )
    return Demo(options).run()


def main(argv: list[str] | None = None) -> int:
    """The local commands alone: what ``loom up --detach`` runs as the background supervisor."""
    parser = argparse.ArgumentParser(prog="loom", description="Loom's local loop.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    if getattr(args, "state_dir", None):
        os.environ["LOOM_STATE_DIR"] = str(Path(args.state_dir).resolve())
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
