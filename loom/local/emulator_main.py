"""moto's server in its own process, for the embedded emulator.

Prints ``{"port": N}`` on stdout once it listens (so port 0 works without a
race), then serves until stdin closes or a signal arrives. Every process of the
stack talks to this one server, so they all share its state.

    python -m loom.local.emulator_main --host 127.0.0.1 --port 0
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from moto.moto_server.threaded_moto_server import ThreadedMotoServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loom.local.emulator_main")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request is noise here
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    sys.stdout.write(json.dumps({"host": host, "port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    # The supervisor holds our stdin: when it goes away, for whatever reason, so do we.
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
