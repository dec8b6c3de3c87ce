"""The console's text colours pass WCAG AA (4.5:1) on the backgrounds they are drawn on, and focus
is always drawn (read from loom/console/static/app.css, so a colour change that breaks it fails)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CSS = (Path(__file__).resolve().parents[2] / "loom" / "console" / "static" / "app.css").read_text()
HEADER_BG = "#1b2633"  # header.top's background


def variables() -> dict[str, str]:
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{6})", CSS))


def luminance(hex_colour: str) -> float:
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def pairs() -> list[tuple[str, str, str]]:
    v = variables()
    out = [(f"{k}-fg on {k}-bg", v[f"{k}-fg"], v[f"{k}-bg"]) for k in ("ok", "run", "warn", "bad", "wait", "idle")]
    out += [
        ("text", v["fg"], v["bg"]),
        ("text on panels", v["fg"], v["panel"]),
        ("muted text", v["muted"], v["bg"]),
        ("muted text on panels", v["muted"], v["panel"]),
        ("links", v["link"], v["bg"]),
        ("header text", "#ffffff", HEADER_BG),
        ("primary buttons", "#ffffff", "#0b4fb3"),
        ("danger buttons", "#ffffff", "#9b1111"),
        ("error text", v["bad-fg"], v["bg"]),
    ]
    return out


@pytest.mark.parametrize(("what", "fg", "bg"), pairs(), ids=[p[0] for p in pairs()])
def test_text_contrast_passes_wcag_aa(what: str, fg: str, bg: str) -> None:
    assert contrast(fg, bg) >= 4.5, f"{what}: {fg} on {bg} is {contrast(fg, bg):.2f}:1"


def test_focus_is_drawn_and_visible_against_the_page() -> None:
    assert re.search(r":focus-visible\s*\{[^}]*outline:\s*3px solid var\(--focus\)", CSS)
    assert contrast(variables()["focus"], variables()["bg"]) >= 3.0  # non-text contrast (WCAG 1.4.11)
