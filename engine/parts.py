"""What every engine service works with: the ports, the registry, the clock and the settings.

``Engine`` (engine/runtime.py) is the one object that holds them; the services
(control, runner, sweeper) are functions of it, so a test can swap a port on the
engine and every service sees the change.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Protocol

from engine.clock import Clock
from engine.config import EngineConfig
from engine.ports import Faults, Queue, Store
from engine.workflow import Registry


class Parts(Protocol):
    registry: Registry
    store: Store
    queue: Queue
    clock: Clock
    config: EngineConfig
    faults: Faults
    services: Mapping[str, Any]
    rng: random.Random
