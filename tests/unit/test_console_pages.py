"""Every console page is its own main content inside the one shared layout."""

from __future__ import annotations

import re

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
