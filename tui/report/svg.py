"""Charts as inline SVG: no script, no fonts, no images; text escaped.

Axes have round ticks (:func:`nice_axis`: steps of 1, 2, 2.5 or 5 times a power of ten that
cover the data), and every label is the tick's value as text. The figure scales with its box
(``viewBox``, ``width: 100%``), so it fits a phone and a printed page alike; series differ by
colour and by dash, so they stay apart in black and white.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from tunedeck.report.parts import BarChart, LineChart, ScatterChart, Series
from tunedeck.util.safety import visible

#: series colours (colour-blind safe, dark enough to print) and dash patterns
COLORS = ("#1f5fbf", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#5c5f66", "#0b7285", "#e67700")
DASHES = ("", "7 4", "2 3", "10 3 2 3")

WIDTH, HEIGHT = 640, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 46


def esc(text: object) -> str:
    """Text of any origin made safe inside HTML or SVG: controls written as visible escapes
    (``\\x1b``), then ``<>&"'`` as entities."""
    return html.escape(visible(text), quote=True)


@dataclass(frozen=True)
class Axis:
    """A linear axis from ``ticks[0]`` to ``ticks[-1]``, labelled with ``decimals`` digits."""

    ticks: tuple[float, ...]
    decimals: int

    @property
    def lo(self) -> float:
        return self.ticks[0]

    @property
    def hi(self) -> float:
        return self.ticks[-1]

    def frac(self, v: float) -> float:
        """Where ``v`` lies between the first (0) and the last tick (1)."""
        return (v - self.lo) / (self.hi - self.lo)

    def label(self, v: float) -> str:
        return f"{round(v, self.decimals) + 0.0:,.{self.decimals}f}"


def nice_axis(lo: float, hi: float, target: int = 5) -> Axis:
    """Round ticks covering [lo, hi]: about ``target`` steps of 1, 2, 2.5 or 5 x 10^k."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, target)
    e = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * 10.0**e >= raw * (1 - 1e-9):
            break
    if m == 10.0:
        m, e = 1.0, e + 1
    step = m * 10.0**e
    decimals = max(0, -e + (1 if m == 2.5 else 0))
    start = math.floor(lo / step + 1e-9)
    end = math.ceil(hi / step - 1e-9)
    ticks = tuple(round(k * step, decimals) + 0.0 for k in range(start, end + 1))
    return Axis(ticks if len(ticks) > 1 else (ticks[0], round(ticks[0] + step, decimals)), decimals)


def _y_range(series: Iterable[Series]) -> tuple[float, float] | None:
    ys = [y for s in series for _, y in s.points]
    if not ys:
        return None
    return min(0.0, min(ys)), max(0.0, max(ys))


def _f(v: float) -> str:
    return f"{v:.1f}"


def _frame(title: str, y_label: str, x_label: str, y: Axis) -> list[str]:
    """The SVG's opening, the y grid with its labels and the axis titles."""
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}" '
        'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="12">',
        f"<title>{esc(title)}</title>",
    ]
    for t in y.ticks:
        yy = TOP + ph * (1 - y.frac(t))
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{LEFT + pw}" y1="{_f(yy)}" y2="{_f(yy)}" stroke="#d0d4d9" '
            'stroke-width="1"/>'
        )
        out.append(
            f'<text class="ytick" x="{LEFT - 6}" y="{_f(yy + 4)}" text-anchor="end" fill="#333">{esc(y.label(t))}</text>'
        )
    out.append(
        f'<text x="14" y="{_f(TOP + ph / 2)}" text-anchor="middle" fill="#333" '
        f'transform="rotate(-90 14 {_f(TOP + ph / 2)})">{esc(y_label)}</text>'
    )
    out.append(f'<text x="{_f(LEFT + pw / 2)}" y="{HEIGHT - 6}" text-anchor="middle" fill="#333">{esc(x_label)}</text>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{TOP + ph}" y2="{TOP + ph}" stroke="#333" stroke-width="1"/>')
    return out


def _x_ticks(x_axis: Axis) -> list[str]:
    """A numeric x axis: a tick and its label at each of the axis's round values."""
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out: list[str] = []
    for t in x_axis.ticks:
        xx = LEFT + pw * x_axis.frac(t)
        out.append(f'<line x1="{_f(xx)}" x2="{_f(xx)}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#333"/>')
        out.append(
            f'<text class="xtick" x="{_f(xx)}" y="{TOP + ph + 16}" text-anchor="middle" fill="#333">'
            f"{esc(x_axis.label(t))}</text>"
        )
    return out


def _category_ticks(categories: Sequence[str]) -> tuple[list[str], list[float]]:
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(1, len(categories))
    xs = [LEFT + pw * (i + 0.5) / n for i in range(n)]
    every = max(1, math.ceil(n / 12))  # at most a dozen labels
    out = [
        f'<text class="xtick" x="{_f(x)}" y="{TOP + ph + 16}" text-anchor="middle" fill="#333">{esc(c)}</text>'
        for i, (x, c) in enumerate(zip(xs, categories))
        if i % every == 0
    ]
    return out, xs


def line_svg(chart: LineChart) -> str:
    """``chart`` as an SVG document fragment."""
    rng = _y_range(chart.series)
    y = nice_axis(*(rng or (0.0, 1.0)))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(chart.title, chart.y_label, chart.x_label, y)
    if chart.categories:
        ticks, xs = _category_ticks(chart.categories)
        out += ticks

        def px(v: float) -> float:
            i = min(len(xs) - 1, max(0, int(v)))
            return xs[i]
    else:
        all_x = [x for s in chart.series for x, _ in s.points] or [0.0, 1.0]
        x_axis = nice_axis(min(0.0, min(all_x)), max(all_x), target=6)
        out += _x_ticks(x_axis)

        def px(v: float) -> float:
            return LEFT + pw * x_axis.frac(v)

    for s in chart.series:
        if not s.points:
            continue
        color = COLORS[s.color % len(COLORS)]
        dash = DASHES[s.dash % len(DASHES)]
        pts = [(px(x), TOP + ph * (1 - y.frac(v))) for x, v in s.points]
        d = " ".join(f"{'M' if i == 0 else 'L'}{_f(a)} {_f(b)}" for i, (a, b) in enumerate(pts))
        attrs = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<path class="series" d="{d}" fill="none" stroke="{color}" stroke-width="2"{attrs}>'
            f"<title>{esc(s.name)}</title></path>"
        )
        if len(pts) <= 40:
            out += [f'<circle cx="{_f(a)}" cy="{_f(b)}" r="3" fill="{color}"/>' for a, b in pts]
    if rng is None:
        out.append(f'<text x="{_f(LEFT + pw / 2)}" y="{_f(TOP + ph / 2)}" text-anchor="middle">no data</text>')
    out.append("</svg>")
    return "\n".join(out)


def bar_svg(chart: BarChart) -> str:
    rng = _y_range(chart.series)
    y = nice_axis(*(rng or (0.0, 1.0)))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = _frame(chart.title, chart.y_label, "", y)
    ticks, xs = _category_ticks(chart.categories)
    out += ticks
    n = max(1, len(chart.categories))
    group = pw / n * 0.7
    k = max(1, len(chart.series))
    bw = group / k
    y0 = TOP + ph * (1 - y.frac(0.0))
    for j, s in enumerate(chart.series):
        color = COLORS[s.color % len(COLORS)]
        for x, v in s.points:
            i = int(x)
            if not 0 <= i < len(xs):
                continue
            left = xs[i] - group / 2 + j * bw
            top = TOP + ph * (1 - y.frac(v))
            out.append(
                f'<rect class="bar" x="{_f(left + 1)}" y="{_f(min(top, y0))}" width="{_f(bw - 2)}" '
                f'height="{_f(abs(y0 - top))}" fill="{color}"><title>{esc(s.name)}: {esc(f"{v:,.6g}")}</title></rect>'
            )
    out.append("</svg>")
    return "\n".join(out)


#: the longest point label drawn on a scatter chart (the whole name is its tooltip and in the legend)
LABEL_CHARS = 28
#: the frontier's colour, and the others' (grey)
FRONTIER_COLOR, OTHER_COLOR = COLORS[0], COLORS[5]


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "\u2026"


def scatter_svg(chart: ScatterChart) -> str:
    """``chart`` as an SVG fragment: both axes from 0 with round ticks, the frontier's points
    joined in x order and labelled with their names, the others as dotted rings."""
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    pts = [p for p in chart.points if math.isfinite(p.x) and math.isfinite(p.y)]
    x_axis = nice_axis(0.0, max((p.x for p in pts), default=1.0), target=6)
    y = nice_axis(0.0, max((p.y for p in pts), default=1.0))
    out = _frame(chart.title, chart.y_label, chart.x_label, y)
    out += _x_ticks(x_axis)

    def at(x: float, v: float) -> tuple[float, float]:
        return LEFT + pw * x_axis.frac(x), TOP + ph * (1 - y.frac(v))

    front = sorted((p for p in pts if p.frontier), key=lambda p: (p.x, -p.y))
    if len(front) > 1:
        d = " ".join(f"{'M' if i == 0 else 'L'}{_f(a)} {_f(b)}" for i, (a, b) in enumerate(at(p.x, p.y) for p in front))
        out.append(
            f'<path class="frontier" d="{d}" fill="none" stroke="{FRONTIER_COLOR}" stroke-width="2">'
            "<title>the Pareto frontier</title></path>"
        )
    for p in pts:
        a, b = at(p.x, p.y)
        tip = f"<title>{esc(p.name)}: {esc(f'{p.x:,.6g}')} {esc(chart.x_label)}, {esc(f'{p.y:,.6g}')} {esc(chart.y_label)}</title>"
        if p.frontier:
            out.append(
                f'<circle class="point frontier" cx="{_f(a)}" cy="{_f(b)}" r="4" fill="{FRONTIER_COLOR}">{tip}</circle>'
            )
            right = a > LEFT + pw * 0.6
            lx = a - 7 if right else a + 7
            ly = max(TOP + 10.0, b - 7)
            out.append(
                f'<text class="plabel" x="{_f(lx)}" y="{_f(ly)}" text-anchor="{"end" if right else "start"}" '
                f'fill="#111">{esc(_short(p.name))}</text>'
            )
        else:
            out.append(
                f'<circle class="point other" cx="{_f(a)}" cy="{_f(b)}" r="4" fill="none" stroke="{OTHER_COLOR}" '
                f'stroke-width="1.5" stroke-dasharray="2 2">{tip}</circle>'
            )
    if not pts:
        out.append(f'<text x="{_f(LEFT + pw / 2)}" y="{_f(TOP + ph / 2)}" text-anchor="middle">no data</text>')
    out.append("</svg>")
    return "\n".join(out)


def swatch_svg(color: int, dash: int, *, bar: bool = False, ring: bool = False) -> str:
    """A legend's sample of a series' line (or bar colour, or a scatter chart's dotted ring)."""
    c = COLORS[color % len(COLORS)]
    if ring:
        return (
            f'<svg class="swatch" viewBox="0 0 24 12" width="24" height="12"><circle cx="12" cy="6" r="4" '
            f'fill="none" stroke="{c}" stroke-width="1.5" stroke-dasharray="2 2"/></svg>'
        )
    if bar:
        return f'<svg class="swatch" viewBox="0 0 24 12" width="24" height="12"><rect width="24" height="12" fill="{c}"/></svg>'
    d = DASHES[dash % len(DASHES)]
    attrs = f' stroke-dasharray="{d}"' if d else ""
    return (
        f'<svg class="swatch" viewBox="0 0 24 12" width="24" height="12">'
        f'<line x1="0" x2="24" y1="6" y2="6" stroke="{c}" stroke-width="2.5"{attrs}/></svg>'
    )


__all__ = ["COLORS", "DASHES", "Axis", "bar_svg", "esc", "line_svg", "nice_axis", "scatter_svg", "swatch_svg"]
