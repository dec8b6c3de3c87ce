"""The local-loop guide's stack from Python (docs/guide/local-loop.md), as a script that runs:
``python docs/examples/local_stack.py`` starts the embedded stack in a scratch directory, asks the
control plane for its workflows, moves the functions' clock an hour on, ticks the sweeper, and
stops it (tests/e2e/test_docs_examples.py runs it)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from loom.local.emulator.client import ok
from loom.local.stack import LocalStack, StackOptions

tmp = Path(tempfile.mkdtemp(prefix="loom-docs-"))
# docs:start local_stack
with LocalStack(StackOptions(port=0, api_port=0, tick=1.0, state_dir=tmp)) as stack:
    print(stack.api_url, stack.endpoint_url, sorted(stack.refs)[:3], stack.worker_pids())
    workflows = ok(stack.api, "GET", "/workflows")  # signed with the stack's own key
    stack.advance_time(3600)  # the functions' clock: an hour on
    stack.tick_sweeper()  # what EventBridge's schedule would fire
    print(len(workflows["workflows"]), "workflows;", len(stack.invocations()), "invocations")
# docs:end local_stack
shutil.rmtree(tmp)
