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

from loom import stackfile
from loom.cli.output import error
from loom.local import clock as offset_clock

DETACH_TIMEOUT = 180.0


def register(sub: Any) -> None:
    up = sub.add_parser("up", help="start the local stack (emulator + the template's three functions)")
    up.add_argument("--emulator", choices=("embedded", "localstack", "aws"), default="embedded")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=5230, help="embedded emulator port (0: any free port)")
    up.add_argument("--api-port", type=int, default=5231, help="control plane port (0: any free port)")
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
        "--visibility-timeout", type=int, default=None, help="override the step queue's visibility timeout (seconds)"
    )
    up.add_argument(
        "--timeout", action="append", default=[], metavar="FUNCTION=SECONDS", help="override a function's Timeout"
    )
    up.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment for every function"
    )
    up.add_argument("--parameter", action="append", default=[], metavar="NAME=VALUE", help="template parameter")
    up.add_argument("--endpoint-url", default=None, help="LocalStack's endpoint (default http://localhost:4566)")
    up.add_argument("--stack", default=None, help="--emulator aws: the CloudFormation stack name")
    up.add_argument("--region", default=None)
    up.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    up.add_argument("--log-file", default=None, help="write function and emulator output here")
    up.add_argument("-d", "--detach", action="store_true", help="run in the background; return once it answers")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop the local stack started by `loom up`")
    down.add_argument("--timeout", type=float, default=30.0)
    down.set_defaults(func=cmd_down)

    tm = sub.add_parser("time", help="local time travel: move every function's clock")
    tsub = tm.add_subparsers(dest="time_command", metavar="ACTION")
    tsub.required = True
    adv = tsub.add_parser("advance", help="add DURATION (90s, 15m, 2h, 1d) to the functions' clock")
    adv.add_argument("duration")
    adv.set_defaults(func=cmd_time_advance)
    tsub.add_parser("show", help="print the offset and the functions' time").set_defaults(func=cmd_time_show)
    tsub.add_parser("reset", help="back to real time").set_defaults(func=cmd_time_reset)

    demo = sub.add_parser("demo", help="run the example workflows end to end on a fresh embedded stack")
    demo.add_argument("--tick", type=float, default=0.5, help="seconds between sweeper runs")
    demo.add_argument("--workers", type=int, default=2)
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


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _print_endpoints(info: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stderr
    out.write(f"loom: {info.get('emulator')} stack up (supervisor pid {info.get('supervisor_pid')})\n")
    out.write(f"  emulator (AWS_ENDPOINT_URL): {info.get('aws_endpoint_url')}\n")
    out.write(f"  control plane:               {info.get('control_plane_url')}\n")
    out.write(f"  table:                       {info.get('table')}\n")
    out.write(f"  step queue:                  {info.get('queue_url')}\n")
    out.write(f"  dead-letter queue:           {info.get('dlq_url')}\n")
    out.write(f"  worker pids:                 {info.get('worker_pids')}\n")
    for function, plan in (info.get("concurrency") or {}).items():
        out.write(f"  concurrency of {function}: {plan.get('note')}\n")
    if info.get("sqs_standard_chaos"):
        out.write(f"  standard-queue delivery:     reorder/duplicate at rate {info['sqs_standard_chaos']}\n")
    out.write(f"  stack file:                  {stackfile.path()}\n")
    out.flush()


# ---------------------------------------------------------------------- up / down


def cmd_up(args: argparse.Namespace) -> int:
    current = stackfile.read()
    if current and pid_alive(current.get("supervisor_pid")):
        error(f"a stack is already running (supervisor pid {current['supervisor_pid']}); run `loom down` first")
        return 1
    if args.emulator == "aws":
        return _up_aws(args)
    if args.detach:
        return _up_detached(args)
    return _up_foreground(args)


def _up_aws(args: argparse.Namespace) -> int:
    from loom.local.aws import StackNotReady, stack_info

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


def _options(args: argparse.Namespace) -> Any:
    from loom.local.stack import REGION, StackOptions

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
        region=args.region or REGION,
        endpoint_url=args.endpoint_url,
        log_file=Path(args.log_file) if args.log_file else None,
    )


def _up_foreground(args: argparse.Namespace) -> int:
    from engine.log import configure
    from loom.local.emulator import EmulatorError
    from loom.local.stack import LocalStack

    configure(args.log_level)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        # Reading template.yaml can fail too (a schedule EventBridge rejects): a clear error, not a trace.
        stack = LocalStack(_options(args))
        stack.start()
    except (EmulatorError, OSError, KeyError, ValueError) as exc:
        error(f"the stack did not start: {exc}")
        return 1
    try:
        _print_endpoints(stack.info)
        sys.stderr.write("loom: Ctrl-C or `loom down` stops it\n")
        while not stop.wait(0.5):
            pass
    finally:
        stack.stop()
    return 0


def _up_detached(args: argparse.Namespace) -> int:
    state = stackfile.state_dir()
    state.mkdir(parents=True, exist_ok=True)
    log_path = Path(args.log_file).resolve() if args.log_file else state / "stack.log"
    argv = _rebuild_argv(args)
    env = {**os.environ, "LOOM_STATE_DIR": str(state)}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loom.cli.local", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # survives the terminal; `loom down` stops it
        )
    deadline = time.monotonic() + DETACH_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            error(f"the stack exited with status {proc.returncode}; last lines of {log_path}:")
            sys.stderr.write(_tail(log_path))
            return 1
        info = stackfile.read(state)
        if info and info.get("supervisor_pid") == proc.pid and _answers(info.get("control_plane_url")):
            _print_endpoints(info)
            sys.stderr.write(f"loom: running in the background, logs in {log_path}; `loom down` stops it\n")
            return 0
        time.sleep(0.2)
    error(f"the stack did not answer within {DETACH_TIMEOUT:.0f}s; stopping it (logs in {log_path})")
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    return 1


def _rebuild_argv(args: argparse.Namespace) -> list[str]:
    argv = ["up", "--emulator", args.emulator, "--host", args.host, "--port", str(args.port)]
    argv += ["--api-port", str(args.api_port), "--log-level", args.log_level]
    if args.workers is not None:
        argv += ["--workers", str(args.workers)]
    if args.sqs_standard_chaos:
        argv += ["--sqs-standard-chaos", str(args.sqs_standard_chaos), "--sqs-chaos-seed", str(args.sqs_chaos_seed)]
    if args.tick is not None:
        argv += ["--tick", str(args.tick)]
    if args.visibility_timeout is not None:
        argv += ["--visibility-timeout", str(args.visibility_timeout)]
    for flag, values in (("--timeout", args.timeout), ("--env", args.env), ("--parameter", args.parameter)):
        for value in values:
            argv += [flag, value]
    for flag, value in (("--endpoint-url", args.endpoint_url), ("--region", args.region)):
        if value:
            argv += [flag, value]
    if args.log_file:
        argv += ["--log-file", str(Path(args.log_file).resolve())]
    return argv


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)\n"
    return "\n".join(text[-lines:]) + "\n"


def _stack_pids(info: dict[str, Any]) -> list[int]:
    pids = [info.get("supervisor_pid"), info.get("emulator_pid"), *(info.get("worker_pids") or [])]
    for group in (info.get("function_pids") or {}).values():
        pids.extend(group)
    return sorted({int(p) for p in pids if p})


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
    pids = _stack_pids(info)
    if pid_alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if pid_alive(p)]
    if left:
        # The supervisor did not finish in time: these are its own processes, by the pids it recorded.
        sys.stderr.write(f"loom: processes {left} still running after {args.timeout:.0f}s; killing them\n")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    stackfile.remove()
    sys.stderr.write(f"loom: stack stopped (supervisor pid {supervisor})\n")
    return 0


# ---------------------------------------------------------------------- time


def _offset_file() -> Path:
    info = stackfile.read()
    if info and info.get("emulator") == "aws":
        raise SystemExit("loom: error: time travel is local only; the deployed stack keeps real time")
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
        path = _offset_file()
        offset_clock.advance(path, seconds)
    except ValueError as exc:
        error(str(exc))
        return 2
    _show(path)
    return 0


def cmd_time_show(args: argparse.Namespace) -> int:
    _show(_offset_file())
    return 0


def cmd_time_reset(args: argparse.Namespace) -> int:
    path = _offset_file()
    offset_clock.reset(path)
    _show(path)
    return 0


# ---------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from loom.local.demo import Demo, DemoOptions

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
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
