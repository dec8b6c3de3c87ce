"""The chaos table, its JSON, and a JUnit XML report for CI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.scenario import FAIL, SKIP, Result

COLUMNS = ("scenario", "fault", "injected", "observed", "invariant", "result", "recovery")
WIDTHS = (22, 30, 36, 46, 34, 6, 9)


def _fmt_recovery(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line or not lines:
        lines.append(line)
    return lines


def render_table(results: Sequence[Result]) -> str:
    """One row per scenario; long cells wrap inside their column."""
    sep = "+" + "+".join("-" * (w + 2) for w in WIDTHS) + "+"
    out = [sep, "|" + "|".join(f" {c:<{w}} " for c, w in zip(COLUMNS, WIDTHS, strict=True)) + "|", sep]
    for r in results:
        invariant = r.reason.splitlines()[0] if r.status == SKIP and r.reason else r.invariant
        if r.status == FAIL and r.violations:
            invariant = f"{r.violations[0]}" + (f" (+{len(r.violations) - 1} more)" if len(r.violations) > 1 else "")
        cells = [r.name, r.fault, r.injected, r.observed, invariant, r.status, _fmt_recovery(r.recovery_seconds)]
        wrapped = [_wrap(str(c), w) for c, w in zip(cells, WIDTHS, strict=True)]
        for i in range(max(len(w) for w in wrapped)):
            row = [w[i] if i < len(w) else "" for w in wrapped]
            out.append("|" + "|".join(f" {c:<{w}} " for c, w in zip(row, WIDTHS, strict=True)) + "|")
        out.append(sep)
    passed = sum(r.status == "PASS" for r in results)
    failed = sum(r.status == FAIL for r in results)
    skipped = sum(r.status == SKIP for r in results)
    out.append(f"{passed} passed, {failed} failed, {skipped} skipped")
    out.extend(_failures(results))
    return "\n".join(out)


def _failures(results: Sequence[Result]) -> list[str]:
    """Every failed scenario again, whole, below the totals: a CI log is often read from its tail,
    and a row in the table's middle keeps only its first violation, wrapped."""
    lines: list[str] = []
    for r in results:
        if r.status != FAIL:
            continue
        lines.append(f"FAILED {r.name}: observed {r.observed or '-'}")
        lines.extend(f"  violation: {v}" for v in r.violations or ["failed"])
        lines.extend(f"  the machine stood still: {stall}" for stall in r.evidence.get("stalls", []))
        lines.extend(f"  {line}" for line in r.reason.splitlines()[-12:])
    return lines


def to_json(results: Sequence[Result], extra: dict[str, Any] | None = None) -> str:
    doc: dict[str, Any] = {"results": [r.to_dict() for r in results], **(extra or {})}
    doc["ok"] = all(r.passed for r in results)
    return json.dumps(doc, indent=2, default=str)


def write_junit(results: Sequence[Result], path: Path | str, suite: str = "loom-chaos") -> Path:
    suite_el = ET.Element(
        "testsuite",
        name=suite,
        tests=str(len(results)),
        failures=str(sum(r.status == FAIL for r in results)),
        skipped=str(sum(r.status == SKIP for r in results)),
        time=f"{sum(r.duration_seconds for r in results):.2f}",
    )
    for r in results:
        case = ET.SubElement(suite_el, "testcase", classname=f"chaos.{r.name}", name=r.name)
        case.set("time", f"{r.duration_seconds:.2f}")
        if r.status == SKIP:
            ET.SubElement(case, "skipped", message=r.reason[:500])
        elif r.status == FAIL:
            failure = ET.SubElement(case, "failure", message=(r.violations or ["failed"])[0][:500])
            failure.text = "\n".join(r.violations) + ("\n\n" + r.reason if r.reason else "")
        out = ET.SubElement(case, "system-out")
        out.text = json.dumps(
            {
                k: v
                for k, v in r.to_dict().items()
                if k in ("injected", "observed", "invariant", "recovery_seconds", "evidence")
            },
            default=str,
            indent=1,
        )
    root = ET.Element("testsuites")
    root.append(suite_el)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)
    return target
