"""The emulator's part of the local kit: the AWS services a local stack stands in for.

moto's server (embedded, with the speed-ups and the checks moto lacks: IAM, DynamoDB's
request tokens, snapshots on disk) or LocalStack (its container, or host mode), the SigV4
check and client of the local Function URL, the functions' movable clock, the endpoints of
a deployed stack, and the checks that run SAM against them (``sam local``, a non-Lambda deploy).

It knows nothing of the functions it serves: :mod:`loom.local.lambdas` builds on it, never
the other way round (tests/unit/test_kit_layers.py).
"""
