"""The template's table and queues in moto's in-process backends: built once, emptied per use.

Building them costs about a tenth of a second (two queues, a table with its index, each
through botocore); emptying them costs a millisecond. A test suite (or ``WorkflowTest``'s
moto backend) that asks for fresh resources before every test gets an empty table and empty
queues either way, the way DBOS truncates its tables per test instead of recreating the
database.

moto offers no "empty this table" call, and ``PurgeQueue`` refuses a second purge within
60 s (as SQS does), so the emptying is done on moto's backend objects: what ``PurgeQueue``
clears for a queue, every item for a table. A queue whose attributes a test changed, a
table or queue that is not the template's, or backends that a ``mock_aws()`` reset since
the last build, make the next call build again from scratch instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3

from loom.template import create_resources

# The queue attributes a test may change with SetQueueAttributes; a change means a rebuild.
_QUEUE_SETTINGS = (
    "visibility_timeout",
    "delay_seconds",
    "receive_message_wait_time_seconds",
    "message_retention_period",
    "maximum_message_size",
    "redrive_policy",
    "policy",
)


def moto_session(region_name: str) -> boto3.Session:
    """A boto3 session whose clients moto's in-process mock reaches, however early it is made.

    moto hooks botocore through the handlers a session copies when it is created, and adds its
    hook when moto is imported: a session made before that import (at a test module's import,
    say) sends to the real endpoint even inside ``mock_aws``. A suite that happened to import
    moto first hid this; a test run on its own failed on a DNS lookup.
    """
    import moto  # noqa: F401  (registers moto's botocore hook before the session copies them)

    return boto3.Session(region_name=region_name)


@contextlib.contextmanager
def moto_kept() -> Iterator[None]:
    """moto's in-process mock, started without wiping what an earlier one left and stopped
    without deleting it: the resources survive from one use to the next, to be emptied."""
    # moto is imported here, not at the top: it takes about 0.4 s, and an in-memory WorkflowTest
    # (which imports loom.testing) never needs it.
    from moto import mock_aws

    mock = mock_aws()
    mock.start(reset=False)
    try:
        yield
    finally:
        mock.stop(remove_data=False)


@dataclass(frozen=True)
class _Built:
    region: str
    refs: dict[str, Any]
    tables: dict[str, Any]  # name -> moto's Table object, as built
    queues: dict[str, Any]  # name -> moto's Queue object, as built
    settings: dict[str, tuple[Any, ...]]

    def intact(self) -> bool:
        ddb, sqs = _backends(self.region)
        return all(ddb.tables.get(n) is t for n, t in self.tables.items()) and all(
            sqs.queues.get(n) is q and _settings(q) == self.settings[n] for n, q in self.queues.items()
        )

    def empty(self) -> None:
        for table in self.tables.values():
            table.items.clear()
        for queue in self.queues.values():
            with queue._messages_lock:
                queue._messages = []
                queue._pending_messages = set()
                queue.deleted_messages = set()
                queue.last_purged_at = None


_built: dict[str, _Built] = {}


def template_resources(session: Any, *, only: bool = False) -> dict[str, Any]:
    """The template's resources in the active moto mock, empty: reused when the last call built
    them and nothing changed them since, built (through ``create_resources``) otherwise.
    ``only``: delete every other table and queue too (a test suite's isolation; a caller's own
    mock keeps its resources without it). Returns ``create_resources``'s refs."""
    region = session.region_name
    ddb, sqs = _backends(region)
    built = _built.get(region)
    if built is None or not built.intact():
        for name in set(ddb.tables) & {str(n) for n in (built.tables if built else ())}:
            ddb.delete_table(name)
        for name in set(sqs.queues) & {str(n) for n in (built.queues if built else ())}:
            sqs.delete_queue(name)
        refs = create_resources(session)
        queues = {n: sqs.queues[n] for n in _names(refs, sqs.queues)}
        tables = {n: ddb.tables[n] for n in _names(refs, ddb.tables)}
        built = _built[region] = _Built(region, refs, tables, queues, {n: _settings(q) for n, q in queues.items()})
    built.empty()  # also what a table of the same name, found and reused by create_resources, held
    if only:
        for name in set(ddb.tables) - set(built.tables):
            ddb.delete_table(name)
        for name in set(sqs.queues) - set(built.queues):
            sqs.delete_queue(name)
    return dict(built.refs)


def _names(refs: dict[str, Any], existing: dict[str, Any]) -> list[str]:
    """The names among ``existing`` that the template's refs resolve to (table names, and queue
    names as the last part of a queue URL)."""
    values = {str(v).rsplit("/", 1)[-1] for v in refs.values() if isinstance(v, str)}
    return [n for n in existing if n in values]


def _backends(region: str) -> tuple[Any, Any]:
    from moto.core.models import DEFAULT_ACCOUNT_ID  # lazily, as in moto_kept
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID][region], sqs_backends[DEFAULT_ACCOUNT_ID][region]


def _settings(queue: Any) -> tuple[Any, ...]:
    return tuple(str(getattr(queue, name, None)) for name in _QUEUE_SETTINGS)
