"""Example workflows. The functions import this package (LOOM_WORKFLOW_MODULES) to register them."""

from workflows import examples, fanout, saga, scheduled, typed, versioned, waiting  # noqa: F401
