"""``loom demo`` end to end (without the chaos table): every example lands in its expected state,
the payment callback is completed from outside without its token reaching any output, and the
saga's failure is compensated in reverse order."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from loom.cli.demo import Demo, DemoOptions

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_the_demo_completes_a_callback_from_outside(tmp_path: Path) -> None:
    out = io.StringIO()
    code = Demo(DemoOptions(chaos=False, state_dir=tmp_path, keep_state=True, timeout=150), out).run()
    text = out.getvalue()
    assert code == 0, text
    assert "the provider calls back: POST /callbacks/<token>/succeed -> 200" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("payment_webhook ")]
    assert [rows[-1][0], *rows[-1][2:]] == ["payment_webhook", "COMPLETED", "COMPLETED", "PASS"]
    saga = [line.split() for line in text.splitlines() if line.startswith("order_saga ")]
    assert [saga[-1][0], *saga[-1][2:]] == ["order_saga", "COMPENSATED", "COMPENSATED", "PASS"]
    priced = [line.split() for line in text.splitlines() if line.startswith("price_lines ")]
    assert [priced[-1][0], *priced[-1][2:]] == ["price_lines", "COMPLETED", "COMPLETED", "PASS"], "one map"
    undo = [line.split()[2] for line in text.splitlines() if " undo " in line]
    assert undo == ["charge_card", "reserve_stock"], "the refund, then the release"
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    assert "/callbacks/tok:" in logs  # the control plane logged the request, redacted
    assert "lcb1." not in text and "lcb1." not in logs
