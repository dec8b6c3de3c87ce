"""Loom's chaos kit: each failure mode of the design, injected from outside, with its invariants checked.

Run one scenario with ``python -m chaos.<name>`` or ``loom chaos <name>``, all of
them with ``loom chaos all``, and a randomised mix with ``loom chaos soak``.
See chaos/README.md for one page per scenario.
"""

SCENARIOS = (
    "duplicate_delivery",
    "crash_mid_step",
    "crash_after_checkpoint",
    "visibility_timeout",
    "poison_step",
    "concurrent_sweep",
    "lost_timer",
    "throttling",
    "callback_race",
    "signal_race",
    "child_crash",
    "saga_compensation",
    "fanout_join",
    "fanout_batch",
    "composite_saga",
    "schedule_overlap",
    "redeploy",
)
