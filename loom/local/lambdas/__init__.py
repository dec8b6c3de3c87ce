"""The Lambda imitation of the local kit: what AWS does around a function.

Its deployment package and bootstrap, the pool of warm processes with its concurrency, the
import check before the stack says it is up, the event sources (the SQS mapping with standard
queue delivery, asynchronous invocation for schedules, the Function URL), the events they
build, each function's execution role, and the reload on a source change.

It may use :mod:`loom.local.emulator` (the services a function calls); the emulator never
imports it (tests/unit/test_kit_layers.py).
"""
