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
        name: str | None = None,
        id: str | None = None,  # noqa: A002 - Textual's signature
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
        #: name → bounded (x, y) points
        self.series: dict[str, deque[tuple[float, float]]] = {}
        #: how many frames were built (tests read this)
        self.frames = 0
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
        data = {k: list(v) for k, v in self.series.items()}  # a copy: plotext keeps references
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
        drawn = False
        for i, (label, pts) in enumerate(data.items()):
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            color = colors[i % len(colors)]
            if self.kind == "scatter":
                plt.scatter(xs, ys, label=label, color=color, marker="dot")
            else:
                plt.plot(xs, ys, label=label, color=color, marker="braille")
            drawn = True
        if not drawn:
            plt.text("waiting for data", 0, 0)
            plt.xlim(-1, 1)
            plt.ylim(-1, 1)
        self.frames += 1
        return Text.from_ansi(plt.build())
