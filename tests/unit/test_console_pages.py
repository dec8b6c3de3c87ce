"""Every console page is its own main content inside the one shared layout."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from loom.console.server import PAGES, STATIC, render_page


@pytest.mark.parametrize(("name", "title"), [(name, title) for _, name, title in PAGES])
def test_each_page_is_its_content_in_the_shared_layout(name: str, title: str) -> None:
    page = render_page(name, title).decode()
    assert "{{" not in page, "a placeholder of the layout was left unfilled"
    assert f"<title>{title} - Loom console</title>" in page
    assert f'<body data-page="{name}">' in page
    assert page.count('<nav aria-label="Pages">') == 1 and page.count("<main ") == 1
    assert f'<script src="/static/{name}.js"></script>' in page and (STATIC / f"{name}.js").is_file()
    content = (STATIC / "pages" / f"{name}.html").read_text()
    assert content.strip() and content in page
    assert "<nav" not in content and "<html" not in content, "the layout's parts are written once, in the layout"


def test_the_pages_folder_is_not_served_as_assets() -> None:
    from loom.console.server import ASSET

    assert ASSET.match("/static/pages/layout.html") is None
    assert all(re.fullmatch(r"[a-z]+\.html", p.name) for p in (STATIC / "pages").iterdir())


DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header chunk; a file that is not a PNG raises ValueError."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_every_screenshot_the_console_docs_show_is_a_small_png_taken_by_the_browser_tests() -> None:
    readme = (DOCS / "README.md").read_text()
    shown = re.findall(r"!\[[^\]]+\]\(([^)]+)\)\n(\S.*)", readme)
    names = [name for name, _ in shown]
    assert {"executions.png", "execution-failed.png", "workflows.png", "dlq.png", "execution-map.png"} <= set(names)
    for name, line in shown:
        data = (DOCS / name).read_bytes()
        width, height = png_size(data)
        assert width == 1400 and 600 <= height <= 900, f"{name} is {width}x{height}, not one 1400x900 window"
        assert len(data) < 400_000, f"{name} is {len(data)} bytes: one window, not a whole page"
        assert line.strip(), f"{name} has no line saying what to look at"
    assert sorted(names) == sorted(p.name for p in DOCS.glob("*.png")), "a picture is listed but missing, or unlisted"
    saved = (Path(__file__).resolve().parents[1] / "e2e" / "test_console_browser.py").read_text()
    for name in names:
        assert f'doc_shot(browser, "{name.removesuffix(".png")}"' in saved, f"no browser test takes {name}"


def test_png_size_refuses_a_file_that_is_not_a_png() -> None:
    with pytest.raises(ValueError):
        png_size(b"GIF89a" + b"\0" * 30)
