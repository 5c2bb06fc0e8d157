"""Stacked timeline charts on one shared time axis, and the validity findings next to them.

:class:`TimelineCharts` draws a :class:`tunedeck.timeline_model.TimelineFigure` (an immutable
snapshot: panels of lines, one value or None a second) as strips stacked in one frame:
every strip has the same width, the same x range and the same y-label width, so a
column is the same moment in all of them; only the bottom chart carries the x ticks.
A panel whose series have no value at all is one "no data" line, never a line of zeros;
a gap (a second without a row) is a gap in the line.

It receives figures only: no files, no SSH, no HTTP. plotext keeps global state, so it
builds in ``render()`` only (style.md §2.9: ``limit_size(False, False)`` after every
``clear_figure()``), at most once per ``refresh_interval`` while figures keep coming.

:class:`TimelinePanel` puts a caption above the charts and the validity findings below.
"""

from __future__ import annotations

import math
from typing import Sequence

import plotext as plt
from rich.text import Text
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Static

from tunedeck.timeline_model import Line, Panel, TimelineFigure
from tunedeck.widgets._axes import LABEL_W, nice_ceil, short_number, y_axis

#: x positions of the first plotted column: the labels and the axis character
PLOT_X0 = LABEL_W + 1
_TONE_KEYS = {"a": ("primary", "cyan"), "b": ("warning", "orange"), "limit": ("error", "red")}
_X_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


def _rgb(value: object) -> tuple[int, int, int] | None:
    if not isinstance(value, str) or not value.startswith("#") or len(value) < 7:
        return None
    try:
        return (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))
    except ValueError:
        return None


def x_step(span: float, width: int) -> int:
    """A round tick step for ``span`` seconds over ``width`` columns (a label every >= 8 columns)."""
    most = max(1, width // 8)
    for step in _X_STEPS:
        if span / step <= most:
            return step
    return _X_STEPS[-1]


def segments(values: Sequence[float | None], most: int) -> list[tuple[list[float], list[float]]]:
    """Runs of known values as (xs, ys), x = second + 1 (the moment the second closed); more
    than ``most`` points are averaged into ``most`` buckets first (a gap stays a gap)."""
    n = len(values)
    if n > most > 0:
        size = n / most
        pts: list[tuple[float, float | None]] = []
        for j in range(most):
            lo, hi = int(j * size), max(int(j * size) + 1, int((j + 1) * size))
            known = [v for v in values[lo:hi] if v is not None]
            pts.append(((lo + hi) / 2 + 0.5, sum(known) / len(known) if known else None))
    else:
        pts = [(i + 1.0, v) for i, v in enumerate(values)]
    out: list[tuple[list[float], list[float]]] = []
    xs: list[float] = []
    ys: list[float] = []
    for x, y in pts:
        if y is None:
            if xs:
                out.append((xs, ys))
            xs, ys = [], []
            continue
        xs.append(x)
        ys.append(y)
    if xs:
        out.append((xs, ys))
    return out


def y_range(panel: Panel) -> tuple[float, float]:
    """Round ends: from 0 (or the data's low end, for clocks) to a round value above the highest
    point (and the reference line), so the labels read as figures, not as 17.6 or 770."""
    vals = [v for ln in panel.lines for v in ln.values if v is not None]
    if not vals:
        return 0.0, 1.0
    lo, hi = min(vals), max(vals)
    if panel.y_from_zero:
        lo = min(0.0, lo)
        if panel.y_max is not None and hi <= panel.y_max:
            hi = panel.y_max
        else:
            hi = nice_ceil(hi * 1.05) if hi > 0 else 1.0
    else:  # the data's own range (clocks), some room on both sides; the labels say where it starts
        pad = max((hi - lo) * 0.1, abs(hi) * 0.01, 0.5)
        step = nice_ceil((hi - lo + 2 * pad) / 2)
        lo, hi = max(0.0, math.floor((lo - pad) / step) * step), math.ceil((hi + pad) / step) * step
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


class TimelineCharts(Widget):
    """``show(figure)`` draws a :class:`TimelineFigure`; ``None`` shows ``placeholder``."""

    DEFAULT_CSS = """
    TimelineCharts { height: 1fr; min-height: 8; }
    """

    def __init__(
        self,
        placeholder: str = "no timeline yet",
        *,
        refresh_interval: float = 1.0,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.placeholder = placeholder
        """What an empty widget says."""
        self.refresh_interval = refresh_interval
        """The most frames a second while figures keep coming."""
        self.figure: TimelineFigure | None = None
        """The figure shown (or about to be)."""
        self.frames = 0
        """Frames built (tests read this)."""
        self.layout_rows: dict[str, int] = {}
        """Panel key -> rows of plot it got in the last frame (0: a "no data" line); tests read this."""
        self._dirty = False

    def show(self, figure: TimelineFigure | None) -> None:
        """Show ``figure`` (drawn at the next refresh tick)."""
        self.figure = figure
        self._dirty = True

    def redraw(self) -> None:
        """Draw the current figure now."""
        self._dirty = False
        self.refresh()

    def on_mount(self) -> None:
        self.set_interval(self.refresh_interval, self._tick)

    def _tick(self) -> None:
        if self._dirty:
            self.redraw()

    def _colors(self) -> dict[str, tuple[int, int, int] | str]:
        try:
            tv = self.app.theme_variables
        except Exception:  # noqa: BLE001 - not mounted in an app
            tv = {}
        return {tone: _rgb(tv.get(key)) or fallback for tone, (key, fallback) in _TONE_KEYS.items()}

    # ------------------------------------------------------------ drawing
    def render(self) -> Text:
        fig = self.figure
        w, h = self.size.width, self.size.height
        if fig is None:
            return Text(self.placeholder, style="dim")
        if w < PLOT_X0 + 12 or h < 2:
            return Text("")
        colors = self._colors()
        panels = fig.panels
        data = [p for p in panels if p.has_data]
        self.layout_rows = {p.key: 0 for p in panels}
        self.frames += 1
        if not data:
            return self._text(
                [self._header(p, colors, w) for p in panels]
                + [Text("no timeline data yet" if fig.live else "no timeline recorded for this run", style="dim")]
            )
        budget = h - len(panels) - 2  # a header line a panel, the x axis and its labels
        k, extra = divmod(budget, len(data)) if budget > 0 else (0, 0)
        if k < 1:
            return self._text(
                [Text(f"timeline: {len(panels)} charts need at least {len(panels) + len(data) + 2} rows", style="dim")]
            )
        xmax = float(max(fig.seconds, 10))
        pw = w - PLOT_X0
        bottom = data[-1]
        out: list[Text] = []
        for p in panels:
            out.append(self._header(p, colors, w))
            if not p.has_data:
                continue
            rows = k + (1 if extra > 0 else 0)
            extra -= 1
            self.layout_rows[p.key] = rows
            out.extend(self._strip(p, colors, w, rows, xmax, pw, p is bottom))
        return self._text(out)

    @staticmethod
    def _text(lines: list[Text]) -> Text:
        t = Text("\n").join(lines)
        t.no_wrap = True
        t.overflow = "crop"
        return t

    def _header(self, p: Panel, colors: dict[str, tuple[int, int, int] | str], w: int) -> Text:
        """The panel's title, unit and legend; short labels (``A``, ``B``) when the long ones do not fit."""
        for short in (False, True):
            t = Text()
            t.append(p.title, style="bold")
            t.append(f" ({p.unit})", style="dim")
            if not p.has_data:
                t.append("  no data", style="dim italic")
                break
            for ln in p.lines:
                if (ln.tone != "limit" and len(p.lines) < 2) or (ln.tone != "limit" and not ln.has_data):
                    continue  # one series: the title names it; a side without data is said below
                c = colors[ln.tone]
                style = f"rgb({c[0]},{c[1]},{c[2]})" if isinstance(c, tuple) else str(c)
                t.append("  ━ ", style=style)
                t.append((ln.short or ln.label) if short else ln.label)
            for side in p.missing:
                t.append(f"  {side}: no data", style="dim italic")
            if t.cell_len <= w:
                break
        t.truncate(w)
        return t

    def _strip(
        self,
        p: Panel,
        colors: dict[str, tuple[int, int, int] | str],
        w: int,
        rows: int,
        xmax: float,
        pw: int,
        bottom: bool,
    ) -> list[Text]:
        lo, hi = y_range(p)
        plt.clear_figure()
        plt.limit_size(False, False)  # clear_figure() resets it; without it plotsize is clamped to 80 columns
        plt.plotsize(w, rows + (2 if bottom else 0))
        plt.theme("clear")
        for ln in self._drawn(p.lines):
            color = colors[ln.tone]
            for xs, ys in segments(ln.values, 2 * pw):
                if len(xs) == 1:
                    plt.scatter(xs, ys, color=color, marker="braille")
                else:
                    plt.plot(xs, ys, color=color, marker="braille")
        plt.xlim(0, xmax)
        # the strips line up, so each keeps its rows: equal round steps where they divide them
        ax = y_axis(lo, hi, rows, from_zero=p.y_from_zero, most=3, shrink=False)
        plt.ylim(ax.lo, ax.hi)
        plt.yticks(list(ax.ticks), [t.rjust(LABEL_W) for t in ax.labels])
        plt.yaxes(True, False)
        if bottom:
            step = x_step(xmax, pw)
            xt = list(range(0, int(xmax) + 1, step))
            plt.xaxes(True, False)
            plt.xticks(xt, [str(x) for x in xt[:-1]] + [f"{xt[-1]} s"])  # the unit on the last: no extra row
        else:
            plt.xaxes(False, False)
            plt.xticks([], [])
        built = Text.from_ansi(plt.build().rstrip("\n"))
        return list(built.split("\n"))

    @staticmethod
    def _drawn(lines: tuple[Line, ...]) -> list[Line]:
        """Reference lines first: the data is drawn over them."""
        return sorted((ln for ln in lines if ln.has_data), key=lambda ln: ln.tone != "limit")


def validity_lines(figure: TimelineFigure | None) -> Text:
    """The figure's validity findings: one line a side, then a line a finding."""
    t = Text()
    if figure is None:
        return t
    for i, note in enumerate(figure.notes):
        if i:
            t.append("\n")
        t.append(f"{note.side}: ", style="bold")
        if note.findings is None:
            t.append(
                "validity checked when the level ends"
                if figure.live
                else "validity not checked (no host-side timeline for this result)",
                style="dim",
            )
        elif not note.findings:
            t.append("valid", style="bold green")
            t.append(" (no finding)", style="dim")
        else:
            t.append(
                f"{len(note.findings)} validity finding{'s' if len(note.findings) > 1 else ''}", style="bold yellow"
            )
            for rule, evidence in note.findings:
                t.append("\n  ⚠ ", style="yellow")
                t.append(rule, style="bold")
                t.append(f": {evidence}")  # untrusted text: appended, never parsed as markup
    return t


class TimelinePanel(Widget):
    """A caption, the stacked charts and the validity findings of one figure (a plain widget, not a
    container subclass: a screen's ``> Vertical`` rule does not reach it)."""

    DEFAULT_CSS = """
    TimelinePanel { layout: vertical; height: 1fr; }
    TimelinePanel > .tl-caption { height: auto; max-height: 2; }
    TimelinePanel > TimelineCharts { height: 1fr; }
    TimelinePanel > .tl-validity { height: auto; max-height: 6; }
    """

    def __init__(
        self,
        placeholder: str = "no timeline yet",
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._placeholder = placeholder

    def compose(self) -> ComposeResult:
        yield Static("", classes="tl-caption", markup=False)
        yield TimelineCharts(self._placeholder)
        yield Static("", classes="tl-validity", markup=False)

    @property
    def charts(self) -> TimelineCharts:
        return self.query_one(TimelineCharts)

    @property
    def figure(self) -> TimelineFigure | None:
        return self.charts.figure

    def show(self, figure: TimelineFigure | None, caption: str | Text | None = None) -> None:
        """Show ``figure`` with ``caption`` above it (default: the figure's title)."""
        self.charts.show(figure)
        cap = caption if caption is not None else (figure.title if figure is not None else "")
        self.query_one(".tl-caption", Static).update(Text(cap) if isinstance(cap, str) else cap)
        self.query_one(".tl-validity", Static).update(validity_lines(figure))

    def redraw(self) -> None:
        self.charts.redraw()


__all__ = ["TimelineCharts", "TimelinePanel", "segments", "short_number", "validity_lines", "x_step", "y_range"]
