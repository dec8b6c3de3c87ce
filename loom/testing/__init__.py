"""Test workflows in-process: a virtual clock that skips every timer, faults on demand.

See loom/testing/README.md.
"""

from loom.testing.memory import InMemoryStore
from loom.testing.queue import VirtualQueue
from loom.testing.runner import Backend, StillRunning, WorkerDied, WorkflowTest, run_workflow

__all__ = ["Backend", "InMemoryStore", "StillRunning", "VirtualQueue", "WorkerDied", "WorkflowTest", "run_workflow"]
