"""Stored errors: bounded in bytes, head and tail kept, tracebacks cut in the middle."""

from __future__ import annotations

import pytest

from engine.error_report import BRIEF, FULL, error_info, frames, one_line
from engine.limits import history_item_size, truncate_middle, utf8_len

pytestmark = pytest.mark.unit


def recurse(n: int) -> None:
    if n == 0:
        raise RuntimeError("deep")
    recurse(n - 1)


@pytest.mark.parametrize("text", ["a" * 5000, "€" * 5000, "ab€" * 3000])
def test_truncate_middle_keeps_head_and_tail_within_the_bound(text: str) -> None:
    cut = truncate_middle(text, 1024)
    assert utf8_len(cut) <= 1024
    assert cut[:10] == text[:10] and cut[-10:] == text[-10:]
    assert f"{utf8_len(text)} bytes" in cut


def test_short_text_is_untouched() -> None:
    assert truncate_middle("short", 1024) == "short"


def test_a_deep_traceback_keeps_the_outermost_and_the_innermost_frames() -> None:
    try:
        recurse(300)
    except RuntimeError as exc:
        listed = frames(exc, 2048)
        info = error_info(exc)
    assert listed[0]["function"] == "test_a_deep_traceback_keeps_the_outermost_and_the_innermost_frames"
    assert listed[-1]["function"] == "recurse"
    assert any("cut_frames" in f for f in listed)
    assert utf8_len(str(listed)) < 2048 + 200
    assert utf8_len(str(info)) < 4096


def test_brief_detail_has_no_traceback_and_a_short_message() -> None:
    try:
        raise ValueError("x" * 5000)
    except ValueError as exc:
        info = error_info(exc, BRIEF)
        full = error_info(exc, FULL)
    assert "traceback" not in info and utf8_len(info["message"]) <= 256
    assert "traceback" in full and utf8_len(full["message"]) <= 1024


def test_one_line_names_the_cause_and_where() -> None:
    info = {
        "type": "KeyError",
        "message": "'user'",
        "traceback": [{"file": "app/flows.py", "line": 3, "function": "f"}],
    }
    assert one_line(info) == "KeyError: 'user' (at app/flows.py:3 in f)"
    assert one_line(None) == ""


def test_the_history_bound_grows_with_attempts_and_slower_after_full_detail() -> None:
    first = history_item_size("{}", 1)
    tenth = history_item_size("{}", 10)
    eleventh = history_item_size("{}", 11)
    assert tenth - first == 9 * 4096 and eleventh - tenth == 640
