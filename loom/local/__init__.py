"""The local stack: template.yaml's table, queues and functions on one laptop.

``LocalStack`` (in :mod:`loom.local.stack`) is the Python API; ``loom up`` is a
thin command line over it. Functions run in separate OS processes fed by
emulators of what AWS does around them: the SQS event source mapping, the
EventBridge schedule and the Function URL. Each function process sees only its
deployment package, built as ``sam build`` builds it (:mod:`loom.local.lambdas.package`),
with a read-only task root and its MemorySize enforced.
"""
