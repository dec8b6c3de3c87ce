"""The demo plays the payment provider: it answers the token of the attempt the execution waits
on, and a 410 (that attempt ended, e.g. its submit was retried under load) is not an error: the
next poll answers the new attempt's token. A default-tier run at load 8 once failed on exactly
that 410."""

from __future__ import annotations

import io
from typing import Any

import pytest

from loom.cli import demo as demo_module
from loom.cli.demo import Demo, DemoOptions
from loom.local.emulator.client import ApiError

INBOX = {
    "p1:1.1": {"kind": "payment_request", "amount": 12, "callback_token": "old-token"},
    "p1:1.2": {"kind": "payment_request", "amount": 12, "callback_token": "new-token"},
}


class FakeLedger:
    def __init__(self, client: Any, table: str) -> None:
        pass

    def effects(self, execution_id: str) -> dict[str, dict[str, Any]]:
        return INBOX


class FakeStack:
    api = None
    refs = {"Table": "t"}

    def client(self, name: str) -> None:
        return None


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def fake_ok(api: Any, method: str, path: str, body: Any = None) -> Any:
        calls.append(path)
        if "old-token" in path:
            raise ApiError(410, {"error": {"code": "wait_ended"}})
        return {"step": 1, "attempt": 2}

    monkeypatch.setattr(demo_module, "DynamoLedger", FakeLedger)
    monkeypatch.setattr(demo_module, "ok", fake_ok)
    return calls


def _answer(attempt: int) -> tuple[bool, str]:
    out = io.StringIO()
    demo = Demo(DemoOptions(chaos=False), out)
    done = demo.answer_callback(FakeStack(), "payment_webhook", {"id": "p1", "current_step": 1, "attempt": attempt})  # type: ignore[arg-type]
    return done, out.getvalue()


def test_the_token_of_the_attempt_waited_on_is_answered(posted: list[str]) -> None:
    done, text = _answer(2)
    assert done and posted == ["/callbacks/new-token/succeed"]
    assert "-> 200" in text and "new-token" not in text


def test_a_410_for_an_ended_attempt_is_retried_not_raised(posted: list[str]) -> None:
    done, text = _answer(1)
    assert not done and posted == ["/callbacks/old-token/succeed"]
    assert "has ended (410)" in text and "old-token" not in text


def test_no_request_for_the_attempt_yet_means_ask_again(posted: list[str]) -> None:
    done, _ = _answer(3)
    assert not done and posted == []
