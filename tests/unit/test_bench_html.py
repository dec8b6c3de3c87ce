"""scripts/bench.py --html: the page from fabricated results, and --from-json's errors."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from loom.bench import html

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import bench

pytestmark = pytest.mark.unit
NS = "{http://www.w3.org/2000/svg}"


def run(mode: str, sqs: float, ddb: float) -> dict:
    totals = {
        "sqs_requests_per_step": sqs,
        "dynamodb_requests_per_step": ddb,
        "wcu_per_step": {"table": 2.0, "GSI1": 1.0, "moto": 99.0},
        "rcu_per_step": {"table": 0.5},
    }
    return {"mode": mode, "totals": totals, "lambda": {"worker_invocations_per_step": 0.1}}


def result() -> dict:
    sweeper = [
        {"sleeping": n, "due": 10, "requests": 3 + n // 1000, "rcu": {"GSI1": 1.5}, "wcu": {"table": 10.0}}
        for n in (10, 1000, 10000)
    ]
    checks = [{"check": "chain <b>ok</b>", "value": 1.0, "met": True}, {"check": "x", "value": 3, "met": False}]
    return {
        "machine": {"command": "bench.py --quick", "nproc": 2, "python": "3.12", "moto": "5"},
        "runs": [run("chain", 1.0, 3.0), run("one_step", 2.0, 4.0)],
        "floor": run("floor", 0.5, 1.0),
        "sweeper": sweeper,
        "checks": checks,
    }


def test_cost_per_step_by_mode_and_the_sweeper_against_sleepers() -> None:
    page = html.render(result())
    svgs = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page)]
    assert len(svgs) == 2 and "<script" not in page and not re.search(r"(src|href)=", page)
    bars = [t.text for t in svgs[0].iter(f"{NS}title")]
    assert "SQS requests, one_step: 2 per committed step" in bars
    assert "write units, chain: 3 per committed step" in bars, "moto's own figure is left out of the sum"
    heights = {
        r.find(f"{NS}title").text: float(r.get("height"))
        for r in svgs[0].iter(f"{NS}rect")
        if r.find(f"{NS}title") is not None
    }
    assert (
        heights["DynamoDB requests, one_step: 4 per committed step"]
        == 4 * heights["DynamoDB requests, floor: 1 per committed step"]
    )
    points = [t.text for t in svgs[1].iter(f"{NS}title") if t.text.startswith("requests")]
    assert points == ["requests: 3 at 10", "requests: 4 at 1,000", "requests: 13 at 10,000"]
    xs = [float(c.get("cx")) for c in svgs[1].iter(f"{NS}circle")][:3]
    assert xs[1] - xs[0] == pytest.approx(2 * (xs[2] - xs[1]), abs=0.2), (
        "x is log-10: 10 -> 1000 is twice 1000 -> 10000"
    )
    assert "chain &lt;b&gt;ok&lt;/b&gt;" in page and "NOT met" in page


def test_a_document_that_is_not_a_bench_result_is_refused() -> None:
    with pytest.raises(ValueError, match="not a bench result"):
        html.render({"results": []})


def test_from_json_redraws_without_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps(result()))
    page = tmp_path / "out" / "bench.html"
    assert bench.main(["--from-json", str(saved), "--html", str(page)]) == 0
    assert page.read_text().count("<svg ") == 2 and f"wrote {page}" in capsys.readouterr().out
    saved.write_text('{"runs": 3}')
    assert bench.main(["--from-json", str(saved), "--html", str(page)]) == 2
    assert "is not a bench result" in capsys.readouterr().err
    saved.write_text('{"runs": [{"mode": "chain"}], "sweeper": []}')
    assert bench.main(["--from-json", str(saved), "--html", str(page)]) == 2, "a run without its totals"
    for argv, said in (
        (["--from-json", str(tmp_path / "missing.json"), "--html", str(page)], "no such file"),
        (["--from-json", str(saved)], "name it with --html"),
        (["--html", str(tmp_path)], "is a directory"),
    ):
        with pytest.raises(SystemExit):
            bench.main(argv)
        assert said in capsys.readouterr().err
