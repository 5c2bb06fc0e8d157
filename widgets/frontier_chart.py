"""The Pareto frontier of a tuning campaign (plotext): tok/s per user (x) against tok/s per GPU
(y), both axes from 0 with round ticks (:mod:`tunedeck.widgets._axes`). The frontier's points are joined
in x order and labelled with their number in the candidates table; the others are dots.

Draws in ``render()`` only (plotext keeps global state), calls ``limit_size(False, False)``
after every ``clear_figure()``, takes its colours from the app theme.
"""

from __future__ import annotations

from typing import Any, Sequence

import plotext as plt
from rich.text import Text
from textual.widget import Widget

from tunedeck.widgets._axes import x_ticks, y_axis


class FrontierChart(Widget):
    """``show(points)``: (label, tok/s per user, tok/s per GPU, on the frontier) per candidate."""

    DEFAULT_CSS = """
    FrontierChart { height: 16; min-height: 8; }
    """

    TITLE = "Pareto frontier: tok/s per user (x) vs tok/s per GPU (y)"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.points: tuple[tuple[str, float, float, bool], ...] = ()
        """As last shown."""

    def show(self, points: Sequence[tuple[str, float, float, bool]]) -> None:
        pts = tuple(points)
        if pts != self.points:
            self.points = pts
            self.refresh()

    def _color(self, name: str, fallback: str) -> Any:
        v = self.app.theme_variables.get(name, "")
        if isinstance(v, str) and v.startswith("#") and len(v) == 7:
            return (int(v[1:3], 16), int(v[3:5], 16), int(v[5:7], 16))
        return fallback

    def render(self) -> Text:
        w, h = max(20, self.size.width), max(6, self.size.height)
        if not self.points:
            return Text(f"{self.TITLE}: no candidate measured yet", style="dim")
        plt.clear_figure()
        plt.limit_size(False, False)
        plt.plotsize(w, h)
        plt.theme("clear")
        rows = h - 5  # the title, the frame, the x ticks and the x label
        ax = y_axis(0.0, max(p[2] for p in self.points) * 1.1, rows)
        if ax.rows < rows:
            plt.plotsize(w, h - (rows - ax.rows))
        xa = x_ticks(0.0, max(p[1] for p in self.points) * 1.1, w - max(len(t) for t in ax.labels) - 3)
        front = sorted((p for p in self.points if p[3]), key=lambda p: p[1])
        others = [p for p in self.points if not p[3]]
        primary, muted = self._color("primary", "cyan"), self._color("foreground-muted", "gray")
        if others:
            plt.scatter([p[1] for p in others], [p[2] for p in others], color=muted, marker="dot", label="others")
        if front:
            plt.plot([p[1] for p in front], [p[2] for p in front], color=primary, marker="braille", label="frontier")
            plt.scatter([p[1] for p in front], [p[2] for p in front], color=primary, marker="●")
            dx = (xa.hi - xa.lo) / max(1, w - 8) * 2  # two columns right of its point
            for label, x, y, _ in front:
                plt.text(label, x + dx, y, color=primary, alignment="left")
        ax.draw_y(plt)
        xa.draw_x(plt)
        plt.title(self.TITLE)
        plt.xlabel("tok/s per user")
        return Text.from_ansi(plt.build())


__all__ = ["FrontierChart"]
