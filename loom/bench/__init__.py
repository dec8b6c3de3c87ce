"""The benchmark's machinery: what a step costs in AWS requests, capacity units and time.

``scripts/bench.py`` is the command line. The stack is the embedded emulator
(moto's server in a child process) with the worker and sweeper handlers called
in this process, fed by the local stack's own SQS event source emulator, so
botocore's event hooks see every request: the handlers', the sweeper's and the
event source's polling.
"""
