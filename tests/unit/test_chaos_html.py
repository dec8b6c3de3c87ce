"""`loom chaos ... --html`: one self-contained page from a fabricated result set (no chaos run)."""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chaos import html_report
from chaos.cli import _html_ok
from chaos.scenario import FAIL, SKIP, Result

pytestmark = pytest.mark.unit


def results() -> list[Result]:
    ok = Result("crash_mid_step", "kill -9 mid-step", "killed worker", "re-ran once", status="PASS")
    ok.started_at = 100.0
    ok.duration_seconds = 20.0
    ok.recovered(104.0, 112.5)  # fault at 4 s, recovered at 12.5 s
    ok.invariant = "3 execution(s) checked: terminal state, 1 commit/step, versions +1, effects once, none stuck"
    bad = Result("throttling", "throttle <b>", injected="<script>alert(1)</script>", status=FAIL)
    bad.started_at, bad.duration_seconds = 0.0, 30.0
    bad.span("fault", "throttle window", 2.0, 12.0)
    bad.recovered(12.0, 18.0)
    bad.invariant = "2 execution(s) checked: terminal state, effects once; 1 violation(s)"
    bad.violations = ["e1: ran 3 times & <twice>"]
    old = Result("lost_timer", "lost message", status="PASS", recovery_seconds=5.0, duration_seconds=9.0)
    skipped = Result("callback_race", "race", status=SKIP, reason="needs the local stack\nmore")
    return [ok, bad, old, skipped]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.rows = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.rows += tag == "tr"


def test_the_result_marks_its_fault_and_recovery_from_its_start() -> None:
    ok = results()[0]
    assert ok.recovery_seconds == 8.5
    assert ok.timeline == [
        {"kind": "fault", "label": "kill -9 mid-step", "start": 4.0, "end": 4.0},
        {"kind": "recovery", "label": "recovered in 8.5s", "start": 4.0, "end": 12.5},
    ]
    bad = results()[1]
    assert [m["kind"] for m in bad.timeline] == ["fault", "recovery"], "a marked fault span is not marked twice"


def test_one_row_per_scenario_self_contained_and_escaped(tmp_path: Path) -> None:
    path = html_report.write(results(), tmp_path / "out" / "report.html", now=1_796_165_520.0)
    page = path.read_text(encoding="utf-8")
    parser = Page()
    parser.feed(page)
    assert parser.rows == 1 + 4, "a header row and one row per scenario"
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert not re.search(r"(src|href)=", page), "nothing loaded from elsewhere"
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "e1: ran 3 times &amp; &lt;twice&gt;" in page and "throttle &lt;b&gt;" in page
    assert "2 passed, 1 failed, 1 skipped" in page and "2026-12-01 22:52:00Z" in page
    svgs = re.findall(r"<svg .*?</svg>", page)
    assert len(svgs) == 3, "a timeline for each scenario that ran"
    for svg in svgs:
        ET.fromstring(svg)  # well-formed XML
    first = ET.fromstring(svgs[0])
    titles = [t.text for t in first.iter("{http://www.w3.org/2000/svg}title")]
    assert "kill -9 mid-step (4s)" in titles and "recovered in 8.5s (4s - 12.5s)" in titles
    assert "8.5s" in page and "skipped: needs the local stack" in page


def test_invariants_show_their_verdict() -> None:
    page = html_report.render(results())
    ok_row, bad_row = page.split("<tr>")[2], page.split("<tr>")[3]
    assert ok_row.count("&#10003;") == 5 and "effects once" in ok_row
    assert bad_row.count("&#10007;") == 2 and 'class="violation"' in bad_row


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert _html_ok(argparse.Namespace(html=str(tmp_path / "new" / "r.html")))
    assert not _html_ok(argparse.Namespace(html=str(tmp_path)))
    assert "is a directory" in capsys.readouterr().err
