"""A plotext line/scatter chart as a Textual widget (style.md §2.9).

The widget receives plain data (numbers), never core objects. Data goes into
bounded deques; ``render()`` draws a copy with plotext and is triggered at
most once per second (``refresh_interval``), so a fast feed costs nothing
extra and a hidden chart costs nothing at all.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Mapping, Sequence

import plotext as plt
from rich.text import Text
from textual.widget import Widget

from tunedeck.widgets._axes import x_ticks, y_axis

_FALLBACK_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red")
_THEME_KEYS = ("primary", "accent", "success", "warning", "secondary", "error")


def _rgb(value: str | None) -> tuple[int, int, int] | None:
    if not value or not value.startswith("#") or len(value) < 7:
        return None
    try:
        return (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))
    except ValueError:
        return None


class ThroughputChart(Widget):
    """Named series of (x, y) points drawn with plotext.

    ``append(name, x, y)`` adds one point; ``set_series(name, points)``
    replaces a series. ``kind`` is ``"line"`` or ``"scatter"``.
    """

    DEFAULT_CSS = """
    ThroughputChart {
        height: 14;
        min-height: 6;
    }
    """

    def __init__(
        self,
        title: str = "",
        *,
        xlabel: str = "",
        ylabel: str = "",
        kind: str = "line",
        max_points: int = 600,
        refresh_interval: float = 1.0,
        y_from_zero: bool = True,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        if kind not in ("line", "scatter"):
            raise ValueError(f"ThroughputChart kind {kind!r}: expected 'line' or 'scatter'")
        self.title = title
        self.xlabel = xlabel
        self.ylabel = ylabel
        self.kind = kind
        self.max_points = max_points
        self.refresh_interval = refresh_interval
        #: the y axis starts at 0 (throughput): 3% noise must not look like a cliff
        self.y_from_zero = y_from_zero
        #: name → bounded (x, y) points
        self.series: dict[str, deque[tuple[float, float]]] = {}
        #: how many frames were built (tests read this)
        self.frames = 0
        #: the y range of the last frame (tests read this)
        self.y_range: tuple[float, float] | None = None
        self._dirty = False

    # ------------------------------------------------------------ data in
    def append(self, name: str, x: float, y: float) -> None:
        self.series.setdefault(name, deque(maxlen=self.max_points)).append((float(x), float(y)))
        self._dirty = True

    def set_series(self, name: str, points: Iterable[Sequence[float]]) -> None:
        d: deque[tuple[float, float]] = deque(maxlen=self.max_points)
        d.extend((float(p[0]), float(p[1])) for p in points)
        self.series[name] = d
        self._dirty = True

    def set_all(self, data: Mapping[str, Iterable[Sequence[float]]]) -> None:
        self.series.clear()
        for k, v in data.items():
            self.set_series(k, v)

    def clear(self) -> None:
        self.series.clear()
        self._dirty = True
        self.refresh()

    @property
    def point_count(self) -> int:
        return sum(len(v) for v in self.series.values())

    # ------------------------------------------------------------ drawing
    def on_mount(self) -> None:
        self.set_interval(self.refresh_interval, self._tick)

    def _tick(self) -> None:
        if self._dirty:
            self._dirty = False
            self.refresh()

    def _colors(self) -> list[object]:
        out: list[object] = []
        try:
            tv = self.app.theme_variables
        except Exception:  # noqa: BLE001 - not mounted in an app
            tv = {}
        for i, key in enumerate(_THEME_KEYS):
            c = _rgb(tv.get(key))
            out.append(c if c is not None else _FALLBACK_COLORS[i])
        return out

    def render(self) -> Text:
        w, h = self.size.width, self.size.height
        if w < 10 or h < 4:
            return Text("")
        data = {k: list(v) for k, v in self.series.items() if v}  # a copy: plotext keeps references
        if not data:
            # no axes around nothing (plotext would draw a meaningless -1..1 frame)
            t = Text()
            if self.title:
                t.append(self.title + "\n", style="bold")
            t.append("waiting for data…", style="dim")
            self.frames += 1
            return t
        plt.clear_figure()
        plt.limit_size(False, False)  # clear_figure() resets it; without it plotsize is clamped to 80 columns
        plt.plotsize(w, h)
        plt.theme("clear")
        if self.title:
            plt.title(self.title)
        if self.xlabel:
            plt.xlabel(self.xlabel)
        if self.ylabel:
            plt.ylabel(self.ylabel)
        colors = self._colors()
        all_x: list[float] = []
        all_y: list[float] = []
        labelled = len(data) > 1
        for i, (label, pts) in enumerate(data.items()):
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            all_x += xs
            all_y += ys
            color = colors[i % len(colors)]
            lab = label if labelled else None  # one series: the title says it; no legend over the data
            if self.kind == "scatter" or len(pts) == 1:
                plt.scatter(xs, ys, label=lab, color=color, marker="dot" if self.kind == "scatter" else "braille")
            else:
                plt.plot(xs, ys, label=lab, color=color, marker="braille")
        top = max(all_y)
        bottom = min(0.0, min(all_y)) if self.y_from_zero else min(all_y)
        # two series: headroom over the highest point, so the legend (top left) never covers data
        span_y = (top - bottom) or abs(top) or 1.0
        rows = h - 3 - (1 if self.title else 0) - (1 if self.xlabel or self.ylabel else 0)
        ax = y_axis(bottom, top + span_y * 0.35 if labelled else top, rows, from_zero=self.y_from_zero)
        if ax.rows < rows:
            plt.plotsize(w, h - (rows - ax.rows))  # one row less: every tick on a row of its own
        self.y_range = (ax.lo, ax.hi)
        ax.draw_y(plt)
        lo, hi = min(all_x), max(all_x)
        label_w = max(len(t) for t in ax.labels) + 1
        if lo >= 0:
            # from 0 (seconds, concurrency, tok/s): the first point (C=1) sits inside the frame
            xa = x_ticks(0.0, (hi or 1.0) * (2.0 if hi == lo else 1.04), w - label_w - 2)
        else:
            span_x = (hi - lo) or 1.0
            xa = x_ticks(lo - span_x * 0.04, hi + span_x * 0.04, w - label_w - 2)
        xa.draw_x(plt)
        self.frames += 1
        return Text.from_ansi(plt.build())
