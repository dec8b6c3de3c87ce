"""A handler module that reports what its execution environment's init saw.

It looks at ``sys.modules`` before it imports anything of the runtime, and draws a random
number and an id at import, so a test can tell a fork of the template (boto3 already there,
the draws still its own) from a fresh interpreter.
"""

from __future__ import annotations

import os
import random
import stat
import sys
import uuid
from typing import Any

PRELOADED = "boto3" in sys.modules  # before this module's own import of it, below
DRAWN = [random.random(), uuid.uuid4().hex]  # what a module draws at init is its environment's own

import boto3  # noqa: E402  # after the look at sys.modules, on purpose

VERSION = boto3.__version__


def handler(event: Any, context: Any) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "session": os.getsid(0),
        "preloaded": PRELOADED,
        "drawn": DRAWN,
        "stdin_is_pipe": stat.S_ISFIFO(os.fstat(0).st_mode),
        "argv": sys.argv[1:],
    }
