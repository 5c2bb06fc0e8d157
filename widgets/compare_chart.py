"""Overlay chart of two runs' output tok/s over time (plotext), for the A/B view.

Draws in ``render()`` only (plotext keeps global state), calls
``limit_size(False, False)`` after every ``clear_figure()`` (the plotext
size trap), and takes its colours from the app theme.
"""

from __future__ import annotations

from typing import Any, Sequence

import plotext as plt
from rich.text import Text
from textual.widget import Widget

from tunedeck.widgets._axes import x_ticks, y_axis


class CompareChart(Widget):
    """``set_series(a_label, a, b_label, b)`` with tok/s per 1-s bucket for each side."""

    DEFAULT_CSS = """
    CompareChart { height: 14; min-height: 8; }
    """

    def __init__(self, title: str = "output tok/s over time", **kw: Any) -> None:
        super().__init__(**kw)
        self.title = title
        self.series: tuple[tuple[str, tuple[float, ...]], ...] = ()
        """(label, values) per side, as last set."""

    def set_series(
        self, a_label: str, a: Sequence[float], b_label: str, b: Sequence[float], title: str | None = None
    ) -> None:
        self.series = ((a_label, tuple(a)), (b_label, tuple(b)))
        if title:
            self.title = title
        self.refresh()

    def reset(self, title: str | None = None) -> None:
        """No series (a new A/B started, or the last one produced none)."""
        self.series = ()
        if title:
            self.title = title
        self.refresh()

    def _color(self, name: str, fallback: str) -> str:
        try:
            v = self.app.theme_variables.get(name, "")
        except Exception:  # noqa: BLE001
            v = ""
        if isinstance(v, str) and v.startswith("#") and len(v) == 7:
            return f"{int(v[1:3], 16)},{int(v[3:5], 16)},{int(v[5:7], 16)}"
        return fallback

    def render(self) -> Text:
        w, h = max(20, self.size.width), max(5, self.size.height)
        if not any(vals for _, vals in self.series):
            return Text(f"{self.title}: no per-request samples to chart yet", style="dim")
        plt.clear_figure()
        plt.limit_size(False, False)
        plt.plotsize(w, h)
        plt.theme("clear")
        colors = [self._color("primary", "cyan"), self._color("warning", "orange")]
        for (label, vals), col in zip(self.series, colors):
            if vals:
                c = tuple(int(x) for x in col.split(",")) if "," in col else col
                plt.plot(list(range(len(vals))), list(vals), label=label, color=c, marker="braille")
        top = max((max(vals) for _, vals in self.series if vals), default=1.0)
        low = min((min(vals) for _, vals in self.series if vals), default=0.0)
        # from zero (the gap at its true size), with room above for the legend
        rows = h - 5  # the title, the frame, the x ticks and the x label
        ax = y_axis(low, top + (top - min(0.0, low)) * 0.4, rows)
        if ax.rows < rows:
            plt.plotsize(w, h - (rows - ax.rows))
        ax.draw_y(plt)
        longest = max(len(vals) for _, vals in self.series)
        xa = x_ticks(0.0, max(1.0, longest - 1.0), w - max(len(t) for t in ax.labels) - 3)
        xa.draw_x(plt)
        plt.title(self.title)
        plt.xlabel("seconds")
        return Text.from_ansi(plt.build())


__all__ = ["CompareChart"]
