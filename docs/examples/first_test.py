"""The README's and the testing guide's first test, as a file that runs: ``python docs/examples/first_test.py``."""

from __future__ import annotations

import workflows  # noqa: F401  # registers the example workflows, order_fulfillment among them

# docs:start first_test
from loom.testing import WorkflowTest

test = WorkflowTest()
eid = test.start("order_fulfillment", {"order_id": "A-1", "amount": 42})
assert test.run(eid).status.value == "COMPLETED"  # the hour-long sleep took no time
# docs:end first_test
print(f"order_fulfillment {eid}: COMPLETED")
