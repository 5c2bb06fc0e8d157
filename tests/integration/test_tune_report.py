"""A real campaign's result through `tunedeck report`: `tunedeck tune --demo` (the simulator on
the demo host) over two candidates writes its JSON, and the report renders it as HTML and
Markdown with the ranking, the Pareto frontier chart and the winner's changes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.clifix import tune_small
from tests.integration.test_tune_demo import base, run_cli  # noqa: F401  (the base profile fixture)

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def test_report_renders_a_real_campaign_result(base: str, tmp_path: Path):
    out = tmp_path / "tune.json"
    vary = ("--vary", "flags.attention-backend=triton,flashinfer")
    r = run_cli("tune", base, "--demo", *vary, *tune_small(out), timeout=360)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(out.read_text())
    names = [c["name"] for c in rep["candidates"]]
    assert len(names) == 2 and rep["winner"] in names
    html_path, md_path = tmp_path / "tune.html", tmp_path / "tune.md"
    r = run_cli("report", str(out), "--html", str(html_path), timeout=60)
    assert r.returncode == 0, r.stderr
    r = run_cli("report", str(out), "--markdown", str(md_path), timeout=60)
    assert r.returncode == 0, r.stderr
    html, md = html_path.read_text(), md_path.read_text()
    # the frontier: each candidate a point at its (tok/s per user, tok/s per GPU), the frontier's labelled
    front = [c for c in rep["candidates"] if c["pareto"]]
    assert front and html.count('class="point frontier"') == len(front)
    assert html.count('class="point other"') == sum(1 for c in rep["candidates"] if c["tok_s_per_user"]) - len(front)
    svg = html[html.index("Pareto frontier") :]
    svg = svg[: svg.index("</svg>")]
    for c in front:
        assert f">{c['name'][:27]}" in svg  # labelled (cut to the label's width)
    xt = [float(t.replace(",", "")) for t in re.findall(r'class="xtick"[^>]*>([^<]+)<', svg)]
    assert xt[0] == 0 and max(c["tok_s_per_user"] for c in front) <= xt[-1]  # honest axes, from 0
    assert f"Winner: {rep['winner']}" in html and "ttft_p90:200 tpot_p90:30" in html
    assert "frontier: " in md and rep["winner"] in md
    # the ranking table in rank order
    rows = re.findall(r"<tr><td>([^<]+)</td>", html[html.index("<h2") :])
    ranked = [n for n in rep["ranking"]]
    assert [r.removesuffix(" (winner)") for r in rows[: len(ranked)]] == ranked
