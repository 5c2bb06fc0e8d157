"""Shareable reports: the SVG axes, escaping of host text, the campaign renderer and the CLI."""

from __future__ import annotations

import math
import re

import pytest

from tunedeck.bench import store
from tunedeck.report.campaign import campaign_report
from tunedeck.report.htmlpage import to_html
from tunedeck.report.load import build
from tunedeck.report.markdown import md_text, to_markdown
from tunedeck.report.parts import LineChart, Series
from tunedeck.report.svg import BOTTOM, HEIGHT, TOP, line_svg, nice_axis

HOSTILE = "<script>alert(1)</script>\x1b]0;owned\x07[x](http://evil.example) @all #1"


# ---------------------------------------------------------------------- axes


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0, 1), (0, 927.0), (0, 1248), (0, 0.37), (12.5, 13.1), (0, 0), (0, 98_765), (-3, 41), (0, 2.5)],
)
def test_ticks_are_round_and_cover_the_data(lo, hi):
    ax = nice_axis(lo, hi)
    step = ax.ticks[1] - ax.ticks[0]
    assert ax.lo <= lo and ax.hi >= hi
    assert ax.hi - step < max(hi, lo + 1e-12) or hi == lo  # no empty step above the data
    mant = step / 10 ** math.floor(math.log10(step))
    assert round(mant, 9) in (1.0, 2.0, 2.5, 5.0)
    for t in ax.ticks:
        assert abs(t / step - round(t / step)) < 1e-6  # every tick is a multiple of the step
        assert float(ax.label(t).replace(",", "")) == pytest.approx(t)  # the label is the value
    assert 3 <= len(ax.ticks) <= 12


def test_svg_tick_labels_match_the_data_and_the_points_sit_on_the_scale():
    ys = [0.0, 384.0, 672.0, 927.5, 1248.0]
    chart = LineChart("tok/s", "s", "tok/s", (Series("A", tuple((float(i), y) for i, y in enumerate(ys))),))
    svg = line_svg(chart)
    ticks = [
        (float(y), float(label.replace(",", "")))
        for y, label in re.findall(r'<text class="ytick" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]+)</text>', svg)
    ]
    assert [t for _, t in ticks] == [0, 250, 500, 750, 1000, 1250]
    # the pixel of each tick label (less its 4-px baseline offset) maps the value linearly
    (y0, v0), (y1, v1) = ticks[0], ticks[-1]
    y0, y1 = y0 - 4, y1 - 4
    assert y0 == pytest.approx(HEIGHT - BOTTOM, abs=0.1) and y1 == pytest.approx(TOP, abs=0.1)
    path = re.search(r'<path class="series" d="([^"]+)"', svg)
    assert path
    pys = [float(p.split()[1]) for p in re.findall(r"[ML]([\d.]+ [\d.]+)", path.group(1))]
    for value, py in zip(ys, pys):
        assert py == pytest.approx(y0 + (y1 - y0) * (value - v0) / (v1 - v0), abs=0.1)


# ---------------------------------------------------------------------- escaping


def store_result(run_id: str, *, profile: str, argv: list[str], concurrency: int = 4) -> None:
    meta = {
        "model": "m",
        "target": "demo",
        "profile": profile,
        "engine": {"engine": "vllm", "version": "0.33.0"},
        "gpus": ["0, NVIDIA H100 80GB HBM3, 81559 MiB"],
        "client": {"hostname": "box", "where": "host"},
        "params": {"max_concurrency": concurrency, "input_len": 8, "output_len": 4, "endpoint": "completions"},
        "server": {"argv": argv, "env": {"HF_TOKEN": "hf_secretvalue", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
        "workload": {"name": "random", "params": {"input_len": 8}, "sha256": "ab" * 32},
    }
    samples = [
        {
            "index": i,
            "success": True,
            "ttft": 0.05 + 0.01 * i,
            "itl": [0.01, 0.01, 0.01],
            "latency": 0.08 + 0.01 * i,
            "prompt_len": 8,
            "output_tokens": 4,
            "start_time": 100.0 + 0.1 * i,
            "wall_start": 1e9 + 0.1 * i,
        }
        for i in range(8)
    ]
    with store.RunWriter(run_id, meta) as w:
        for s in samples:
            w.append(s)
        w.write_summary(store.summarize(samples, w.meta, duration=1.0))


def _hostile_html_ok(text: str) -> None:
    assert "<script" not in text.lower()
    assert "\x1b" not in text and "\x07" not in text
    assert "&lt;script&gt;" in text
    assert "href=" not in text and "src=" not in text  # nothing links or loads


def test_a_hostile_profile_and_argv_are_escaped_and_secrets_redacted():
    store_result(
        "20260101-000000-aaaaaa", profile=HOSTILE, argv=["vllm", "serve", "m", "--api-key", "sk-verysecret", HOSTILE]
    )
    rep = build("20260101-000000")
    html = to_html(rep)
    _hostile_html_ok(html)
    assert "\\x1b]0;owned\\x07" in html  # the ESC byte is shown, not acted on
    assert "sk-verysecret" not in html and "hf_secretvalue" not in html
    assert "&lt;redacted&gt;" in html
    md = to_markdown(rep)
    assert "\x1b" not in md and "sk-verysecret" not in md and "hf_secretvalue" not in md
    outside = "".join(md.split("```")[::2])  # a fenced command shows its text literally
    assert not re.search(r"(?<!\\)[<\[]", outside)  # elsewhere every < and [ is escaped
    assert "](http://" not in outside and "@all" not in outside.replace("\\@all", "")
    assert "NVIDIA H100" in html and "vllm 0.33.0" in html and "ab" * 32 in html


def test_markdown_text_is_never_markup_or_a_link():
    s = md_text("see https://evil.example and www.evil.example, <b>x</b> | y @user #12 `code` $x$")
    for raw in ("https://", "www.e", "<b>", " | ", " @user", " #12", " `code`", " $x$"):
        assert raw not in s, raw
    assert md_text("927.0") == "927.0" and md_text("1. item") == "1\\. item" and md_text("- x") == "\\- x"


# ---------------------------------------------------------------------- campaign


CAMPAIGN = {
    "campaign": "tune-20260101-0000",
    "slo": {"ttft_p90_ms": 500, "tpot_p90_ms": 50},
    "workload": {"name": "sharegpt"},
    "candidates": [
        {
            "name": "base",
            "changes": {},
            "state": "done",
            "capacity": 24,
            "single_user_tok_s": 90.5,
            "tok_s_per_gpu": 310.0,
            "startup_s": 61.2,
            "steps": [
                {"concurrency": 16, "met": True, "reasons": [], "summary": {"output_throughput": 900.0}},
                {"concurrency": 32, "met": False, "reasons": ["ttft_p90 612 > 500"], "summary": {}},
            ],
        },
        {
            "name": HOSTILE,
            "changes": {"flags.attention-backend": "triton"},
            "state": "done",
            "capacity": 40,
            "single_user_tok_s": 88.0,
            "tok_s_per_gpu": 420.0,
            "startup_s": 58.0,
            "steps": [{"concurrency": 32, "met": True, "reasons": [], "summary": {"output_throughput": 1400.0}}],
        },
    ],
    "winner": HOSTILE,
}


def test_campaign_report_ranks_the_candidates_and_escapes_their_names():
    rep = campaign_report(CAMPAIGN)
    assert rep.kind == "campaign" and rep.headline.startswith("Winner: <script>")
    html = to_html(rep)
    _hostile_html_ok(html)
    assert html.count('<svg class="chart"') >= 4  # capacity, single-user, per GPU, the steps' throughput
    assert "ttft_p90 612 &gt; 500" in html
    md = to_markdown(rep)
    assert "| base | " in md and "Capacity" in md and "\x1b" not in md
    assert "- base: C=16 900, C=32 N/A" not in md and "base: C=16 900" in md


# ---------------------------------------------------------------------- the Pareto frontier


def _frontier_campaign() -> dict:
    def cand(name: str, per_user: float, per_gpu: float, front: bool) -> dict:
        return {
            "name": name,
            "state": "measured",
            "capacity": 8,
            "tok_s_per_user": per_user,
            "tok_s_per_gpu": per_gpu,
            "pareto": front,
        }

    return {
        "campaign": "tune-x",
        "slo": ["ttft_p90:200", "tpot_p90:30"],
        "candidates": [
            cand("fast-user", 40.0, 120.0, True),
            cand(HOSTILE, 22.5, 310.0, True),
            cand("beaten", 20.0, 100.0, False),
        ],
        "winner": HOSTILE,
    }


def test_campaign_report_draws_the_pareto_frontier_joined_and_labelled_the_others_dotted():
    from tunedeck.report.parts import ScatterChart

    rep = campaign_report(_frontier_campaign())
    chart = next(p for s in rep.sections for p in s.parts if isinstance(p, ScatterChart))
    assert [(p.name, p.frontier) for p in chart.points] == [("fast-user", True), (HOSTILE, True), ("beaten", False)]
    html = to_html(rep)
    _hostile_html_ok(html)
    svg = html[html.index("Pareto frontier") :]
    svg = svg[: svg.index("</svg>")]
    # the frontier joined in the order of tok/s per user: the hostile (22.5) first, then fast-user (40)
    path = re.search(r'<path class="frontier" d="M([\d.]+) ([\d.]+) L([\d.]+) ([\d.]+)"', svg)
    assert path and float(path[1]) < float(path[3]) and float(path[2]) < float(path[4])
    assert svg.count('class="point frontier"') == 2 and svg.count('class="point other"') == 1
    assert 'stroke-dasharray="2 2"' in svg  # the other point is a dotted ring, unlabelled
    assert ">fast-user</text>" in svg and ">beaten</text>" not in svg
    xt = [float(t) for t in re.findall(r'class="xtick"[^>]*>([^<]+)<', svg)]
    yt = [float(t.replace(",", "")) for t in re.findall(r'class="ytick"[^>]*>([^<]+)<', svg)]
    assert xt[0] == 0 and yt[0] == 0 and xt[-1] >= 40 and yt[-1] >= 310  # honest axes: from 0, covering
    assert xt == list(nice_axis(0, 40, target=6).ticks) and yt == list(nice_axis(0, 310).ticks)
    md = to_markdown(rep)
    assert "frontier: " in md and "not on the frontier: beaten (20.0 tok/s per user, 100 tok/s per GPU)" in md
    assert r"ttft\_p90:200 tpot\_p90:30" in md  # the SLO as the campaign wrote it


def test_frontier_is_computed_for_a_result_without_its_flags():
    camp = _frontier_campaign()
    for c in camp["candidates"]:
        del c["pareto"]
    from tunedeck.report.campaign import frontier_chart

    chart = frontier_chart(camp["candidates"], [c["name"] for c in camp["candidates"]])
    assert chart is not None and {p.name for p in chart.points if p.frontier} == {"fast-user", HOSTILE}
