"""Chart axes read from the rendered chart: round ticks at equal steps (in value and on screen), a
zero line, and every point drawn on the row (and column) its value belongs to."""

from __future__ import annotations

import math
import re

import pytest
from textual.app import App, ComposeResult

from tunedeck.widgets._axes import nice_step, x_ticks, y_axis
from tunedeck.widgets.compare_chart import CompareChart
from tunedeck.widgets.throughput_chart import ThroughputChart

pytestmark = pytest.mark.timeout(60)

ROUND = {1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0}


def is_round_step(step: float) -> bool:
    m = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(m, r, rel_tol=1e-6) for r in ROUND) or math.isclose(m, 10.0, rel_tol=1e-6)


def number(label: str) -> float:
    label = label.strip()
    return float(label[:-1]) * 1000 if label.endswith("k") else float(label)


def read_axes(lines: list[str]) -> tuple[list[tuple[int, float]], list[tuple[int, float]], int, int]:
    """(y ticks as (row, value), x ticks as (column, value), the frame's left column, its bottom row)."""
    bottom = next(i for i, ln in enumerate(lines) if "└" in ln)
    left = lines[bottom].index("└")
    yt = []
    for i, ln in enumerate(lines[:bottom]):
        if len(ln) > left and ln[left] == "┤":
            yt.append((i, number(ln[:left])))
    axis = lines[bottom]
    cols = [j for j, ch in enumerate(axis) if ch == "┬"]
    labels = lines[bottom + 1]
    xt = []
    for m in re.finditer(r"\S+", labels):
        # a label is centred on (or ends at) its tick: take the nearest tick column
        mid = (m.start() + m.end() - 1) / 2
        col = min(cols, key=lambda c: abs(c - mid))
        xt.append((col, number(m.group())))
    return yt, xt, left, bottom


def check_ticks(ticks: list[tuple[int, float]], *, rows: bool = True) -> None:
    assert len(ticks) >= 2, ticks
    vals = [v for _, v in ticks]
    steps = [round(b - a, 9) for a, b in zip(vals, vals[1:])]
    assert len(set(steps)) == 1, f"uneven steps {vals}"
    assert is_round_step(abs(steps[0])), f"not a round step: {vals}"
    if rows:
        gaps = {b - a for (a, _), (b, _) in zip(ticks, ticks[1:])}
        assert len(gaps) == 1, f"ticks not evenly spaced on screen: {ticks}"


def interp(pos: list[tuple[int, float]], v: float) -> float:
    """The screen position of value ``v`` on an axis read off the chart."""
    (p0, v0), (p1, v1) = pos[0], pos[-1]
    return p0 + (v - v0) * (p1 - p0) / (v1 - v0)


BRAILLE = re.compile("[\u2801-\u28ff•]")


def check_points(lines: list[str], points: list[tuple[float, float]]) -> None:
    yt, xt, _left, bottom = read_axes(lines)
    for x, y in points:
        row = interp(sorted(yt), y)
        col = interp(xt, x)
        c = round(col)
        drawn = [
            i for i in range(bottom) if any(BRAILLE.match(lines[i][j]) for j in (c - 1, c, c + 1) if j < len(lines[i]))
        ]
        assert drawn, f"nothing drawn near column {col:.1f} for ({x}, {y})"
        nearest = min(drawn, key=lambda i: abs(i - row))
        assert abs(nearest - row) <= 1.0, f"({x}, {y}) drawn on row {nearest}, its value belongs on row {row:.1f}"


class One(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


async def rendered(chart, size: tuple[int, int]) -> list[str]:
    """The chart's lines as drawn at ``size``, with its axes read and checked (round, even)."""
    async with One(chart).run_test(size=size) as pilot:
        await pilot.pause()
        lines = chart.render().plain.split("\n")
    yt, xt, _, _ = read_axes(lines)
    check_ticks(yt)
    check_ticks(xt, rows=False)
    return lines


SWEEP = [(1, 63.6), (16, 800.0), (64, 1536.0), (128, 2370.0)]
SERIES = [(float(t), 60.0 + 7 * (t % 5) + t) for t in range(1, 31)]


@pytest.mark.parametrize("size", [(60, 14), (80, 12), (120, 20), (50, 9), (100, 16), (80, 11)])
@pytest.mark.parametrize(
    "data,kind,xlabel",
    [
        (SWEEP, "line", "concurrency"),
        (SERIES, "line", "s"),
        ([(1500.0, 60.0), (2370.0, 18.5)], "scatter", "total tok/s"),
    ],
)
async def test_throughput_chart_ticks_are_round_even_and_match_the_points(size, data, kind, xlabel):
    chart = ThroughputChart("tok/s", xlabel=xlabel, ylabel="tok/s", kind=kind)
    chart.set_series("run", data)
    lines = await rendered(chart, size)
    yt, xt, _, _ = read_axes(lines)
    assert yt[-1][1] == 0.0, "the y axis starts at zero"  # the last row is the bottom
    assert xt[0][1] == 0.0
    check_points(lines, data)


async def test_two_series_and_a_legend_still_read_true():
    chart = ThroughputChart("tok/s", xlabel="concurrency", ylabel="tok/s")
    chart.set_series("vllm", SWEEP)
    chart.set_series("sglang", [(1, 82.5), (16, 700.0), (64, 1200.0), (128, 1536.0)])
    lines = await rendered(chart, (90, 16))
    check_points(lines, SWEEP[1:])


async def test_compare_chart_axes():
    chart = CompareChart()
    chart.set_series("A", [float(v) for v in range(100, 160, 3)], "B", [float(v) for v in range(120, 200, 4)])
    lines = await rendered(chart, (80, 14))
    yt, _, _, _ = read_axes(lines)
    assert yt[-1][1] == 0.0
    check_points(lines, [(0.0, 100.0), (19.0, 157.0)])


@pytest.mark.parametrize("rows", range(2, 30))
@pytest.mark.parametrize("hi", [0.7, 1.0, 63.6, 194.6, 999.0, 2370.0, 12345.0, 1e6])
def test_y_axis_divides_its_rows(rows, hi):
    ax = y_axis(0.0, hi, rows)
    assert ax.rows in (rows, rows - 1) and ax.lo == 0.0 and ax.hi >= hi
    n = len(ax.ticks) - 1
    assert n >= 1 and (ax.rows - 1) % n == 0
    steps = {round(b - a, 9) for a, b in zip(ax.ticks, ax.ticks[1:])}
    assert len(steps) == 1 and is_round_step(steps.pop())
    assert ax.hi <= hi * 2.0  # round, not wasteful


def test_axis_edges():
    assert nice_step(0.3) == pytest.approx(0.5) and nice_step(194.6) == 200 and nice_step(2.2) == 2.5
    ax = y_axis(5.0, 5.0, 9)  # a flat series still has an axis
    assert ax.lo == 0.0 and ax.hi >= 5.0 and len(ax.ticks) >= 2
    ax = y_axis(5.0, 5.0, 9, from_zero=False)
    assert ax.lo <= 5.0 < ax.hi
    ax = y_axis(-3.0, 10.0, 9)
    assert ax.lo <= -3.0 and 0.0 in ax.ticks
    ax = y_axis(float("nan"), float("inf"), 9)
    assert ax.hi > ax.lo
    xa = x_ticks(0, 128 * 1.04, 60)
    assert xa.ticks[0] == 0 and xa.hi >= 128 and len(xa.ticks) <= 60 // 8 + 1
