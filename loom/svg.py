"""Small inline SVG charts for the kit's HTML reports (chaos, bench): no display, no download.

Three shapes only: spans on a time axis, grouped bars, lines on x/y axes. Every text
that came from data is escaped; each chart carries a <title> and ``role="img"`` so a
screen reader says what it shows. Colours pass WCAG AA against white for the text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

# Dark enough for AA contrast (>= 4.5:1) against white, told apart by hue too.
PALETTE = ("#1f5fa8", "#b3261e", "#1b7a3d", "#7a4a00", "#6a3d9a", "#00616b")
KIND_COLOUR = {"run": "#5f6368", "fault": "#b3261e", "recovery": "#1b7a3d"}
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _open(width: int, height: int, title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}" {FONT}>'
        f"<title>{esc(title)}</title>"
    )


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """0 and round steps up to at least ``high``."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [round(i * step, 10) for i in range(math.ceil(high / step) + 1)]


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:g}"


def spans(rows: Sequence[Mapping[str, object]], total: float, title: str, width: int = 520) -> str:
    """One lane per span (``kind``: run, fault, recovery; ``label``; ``start``/``end`` in
    seconds), its label above it; a span with no length is drawn as a diamond."""
    left, right, lane, top = 16, 24, 26, 4
    total = max(total, max((float(str(r.get("end", 0))) for r in rows), default=0.0), 1e-9)
    scale = (width - left - right) / total
    height = top + lane * len(rows) + 24
    parts = [_open(width, height, title)]
    for i, r in enumerate(rows):
        start, end = float(str(r.get("start", 0))), float(str(r.get("end", 0)))
        colour = KIND_COLOUR.get(str(r.get("kind")), PALETTE[0])
        x, y = left + start * scale, top + i * lane + 13  # y: the bar's top; its label sits above
        label = f"{r.get('label', '')} ({_num(start)}s" + (f" - {_num(end)}s)" if end > start else ")")
        if end > start:
            tag = "rect"
            shape = (
                f'<rect x="{x:.1f}" y="{y}" width="{max(2.0, (end - start) * scale):.1f}" height="9" fill="{colour}">'
            )
        else:  # a moment: a diamond
            tag = "path"
            shape = f'<path d="M{x:.1f} {y - 1} l5.5 5.5 l-5.5 5.5 l-5.5 -5.5 z" fill="{colour}">'
        parts.append(f"{shape}<title>{esc(label)}</title></{tag}>")
        anchor = "end" if x > width * 0.6 else "start"  # keep the label inside the picture
        text_x = min(x, width - right) if anchor == "end" else x
        parts.append(f'<text x="{text_x:.1f}" y="{y - 3}" text-anchor="{anchor}" fill="#202124">{esc(label)}</text>')
    axis_y = top + lane * len(rows) + 4
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}" stroke="#5f6368"/>')
    for t in nice_ticks(total, 4):
        if t <= total:
            x = left + t * scale
            parts.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle" fill="#3c4043">{_num(t)}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars(groups: Mapping[str, Mapping[str, float]], title: str, unit: str, width: int = 800, height: int = 280) -> str:
    """Grouped bars: one group per measure (``groups[measure][series] = value``)."""
    series = list(dict.fromkeys(s for g in groups.values() for s in g))  # in the order given
    left, bottom, top = 56, 40, 44
    plot_h = height - bottom - top
    high = max((v for g in groups.values() for v in g.values()), default=1.0)
    ticks = nice_ticks(high)
    scale = plot_h / ticks[-1]
    slot = (width - left - 8) / max(1, len(groups))
    bar_w = max(4.0, (slot - 12) / max(1, len(series)))
    parts = [_open(width, height, title), _legend(series, left, 14)]  # legend on top, the unit under it
    parts += _y_axis(ticks, scale, left, top, plot_h, width, unit)
    for gi, (measure, values) in enumerate(groups.items()):
        x0 = left + gi * slot + 6
        for si, name in enumerate(series):
            value = values.get(name)
            if value is None:
                continue
            h = value * scale
            x, y = x0 + si * bar_w, top + plot_h - h
            tip = f"{measure}, {name}: {value:g} {unit}"
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[si % len(PALETTE)]}"><title>{esc(tip)}</title></rect>'
            )
        middle = x0 + len(series) * bar_w / 2
        y = height - bottom + 16
        parts.append(f'<text x="{middle:.1f}" y="{y}" text-anchor="middle" fill="#202124">{esc(measure)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def lines(
    series: Mapping[str, Sequence[tuple[float, float]]],
    title: str,
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 280,
) -> str:
    """Lines over a log-10 x axis (sizes that grow by tens), linear y from 0."""
    points = [p for s in series.values() for p in s if p[0] > 0]
    left, bottom, top = 56, 44, 44
    plot_w, plot_h = width - left - 32, height - bottom - top
    lo = math.floor(math.log10(min((p[0] for p in points), default=1)))
    hi = max(lo + 1, math.ceil(math.log10(max((p[0] for p in points), default=10))))
    ticks = nice_ticks(max((p[1] for p in points), default=1.0))
    y_scale = plot_h / ticks[-1]

    def at(x: float, y: float) -> tuple[float, float]:
        return left + (math.log10(x) - lo) / (hi - lo) * plot_w, top + plot_h - y * y_scale

    parts = [_open(width, height, title), _legend(list(series), left, 14)]
    parts += _y_axis(ticks, y_scale, left, top, plot_h, width, y_label)
    for e in range(lo, hi + 1):
        x, _ = at(10.0**e, 0)
        parts.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" fill="#3c4043">{_num(10.0**e)}</text>'
        )
    parts.append(f'<text x="{left + plot_w / 2 - 40:.1f}" y="{height - 6}" fill="#202124">{esc(x_label)}</text>')
    for i, (name, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        xy = [(at(x, y), x, y) for x, y in sorted(pts) if x > 0]
        path = " ".join(f"{px:.1f},{py:.1f}" for (px, py), _, _ in xy)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for (px, py), x, y in xy:
            tip = f"{name}: {y:g} at {_num(x)}"
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"><title>{esc(tip)}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _legend(names: Sequence[str], x: float, y: float) -> str:
    out = []
    for i, name in enumerate(names):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x:.0f}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.0f}" y="{y}" fill="#202124">{esc(name)}</text>')
        x += 24 + 7 * len(name)
    return "".join(out)


def _y_axis(
    ticks: list[float], scale: float, left: float, top: float, plot_h: float, width: float, unit: str
) -> list[str]:
    out = []
    for t in ticks:
        y = top + plot_h - t * scale
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 8}" y2="{y:.1f}" stroke="#dadce0"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#3c4043">{_num(t)}</text>')
    out.append(f'<text x="4" y="{top - 12}" fill="#202124">{esc(unit)}</text>')  # under the legend
    return out
