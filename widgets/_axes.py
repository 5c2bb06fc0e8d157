"""Honest chart axes: round ticks at equal steps, each tick on a row of its own.

plotext places a tick label on the row its value maps to, rounded. With a plot of ``rows``
rows spanning ``lo..hi``, ticks ``step`` apart land ``(rows - 1) * step / (hi - lo)`` rows
apart: a whole number only when the number of steps divides ``rows - 1``. :func:`y_axis`
picks the step (1, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k) and the number of steps so that it does; where
``rows - 1`` has no usable divisor it gives up one row. So a label reads as a figure
(``200``, not ``194.6``), the steps are equal on screen as in value, and a point drawn on
a labelled row has that label's value (within the row's own height).

Every chart of the dashboard (bench, sweep, A/B, timelines) takes its axes from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: the mantissas of a round step along x (a label every few columns: 1, 2, 2.5, 5 read best)
X_MANTISSAS = (1.0, 2.0, 2.5, 5.0, 10.0)
#: along y, where the number of steps must divide the plot's rows, 3, 4, 6 and 8 are allowed too
#: (0, 600, 1200, 1800, 2400 is as round a scale, and ends far nearer the data than 0 .. 4000)
Y_MANTISSAS = (1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
#: width of the y tick labels of :func:`short_number`
LABEL_W = 6


def nice_step(x: float, mantissas: tuple[float, ...] = X_MANTISSAS) -> float:
    """The smallest step of ``mantissas`` x 10^k (1, 2, 2.5 or 5) that is >= ``x`` (> 0)."""
    if not x > 0 or not math.isfinite(x):
        return 1.0
    e = 10.0 ** math.floor(math.log10(x))
    for m in mantissas:
        if m * e >= x * (1 - 1e-9):
            return m * e
    return 10 * e


def nice_ceil(x: float) -> float:
    """The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k that is >= ``x`` (> 0): a round
    top for an axis whose ticks are only its ends."""
    if not x > 0 or not math.isfinite(x):
        return 1.0
    e = 10.0 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= x * (1 - 1e-9):
            return m * e
    return 10 * e


def short_number(v: float) -> str:
    """A tick label of at most :data:`LABEL_W` characters (``1.2k``, ``875``, ``0.5``)."""
    a = abs(v)
    if a >= 99_950:
        s = f"{v / 1000:.0f}k"
    elif a >= 9_995:
        s = f"{v / 1000:.1f}k".replace(".0k", "k")
    elif a >= 100 or v == int(v):
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}".rstrip("0").rstrip(".")
    else:
        s = f"{v:.2f}".rstrip("0").rstrip(".")
    return s[:LABEL_W]


@dataclass(frozen=True)
class Axis:
    """An axis from ``lo`` to ``hi`` with ``ticks`` (round, equal steps, both ends included);
    ``rows``: the plot rows to draw it on (the rows asked for, or one less)."""

    lo: float
    hi: float
    ticks: tuple[float, ...]
    rows: int

    @property
    def labels(self) -> list[str]:
        return [short_number(t) for t in self.ticks]

    def draw_y(self, plt: Any) -> None:
        """This axis as the y axis of a plotext figure (``plt``): its limits and ticks."""
        plt.ylim(self.lo, self.hi)
        plt.yticks(list(self.ticks), self.labels)

    def draw_x(self, plt: Any) -> None:
        """This axis as the x axis of a plotext figure (``plt``): its limits and ticks."""
        plt.xlim(self.lo, self.hi)
        plt.xticks(list(self.ticks), self.labels)


def _fit(lo: float, hi: float, n: int) -> tuple[float, float]:
    """(bottom, step) of ``n`` round steps covering ``lo..hi``."""
    step = nice_step((hi - lo) / n, Y_MANTISSAS)
    while True:
        bottom = math.floor(lo / step + 1e-9) * step
        if bottom + n * step >= hi * (1 - 1e-9) - 1e-12:
            return bottom, step
        step = nice_step(step * 1.001, Y_MANTISSAS)


def y_axis(lo: float, hi: float, rows: int, *, from_zero: bool = True, most: int = 6, shrink: bool = True) -> Axis:
    """The y axis for data from ``lo`` to ``hi`` on a plot of ``rows`` rows.

    ``from_zero``: the axis starts at 0 (or below, for negative data): a 3% difference must
    not look like a cliff. At most ``most`` ticks, at least two rows apart on a plot of five
    rows or more. ``shrink``: one row less may be used (a strip that must keep its height
    says False, and gets only its two ends where its rows allow no equal steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if from_zero:
        lo = min(0.0, lo)
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    best: tuple[float, int, int, float, float] | None = None  # (top, -n, -r, bottom, step)
    for r in (rows, rows - 1) if shrink else (rows,):
        if r < 2:
            continue
        most_n = min(most - 1, (r - 1) // 2 if r >= 5 else r - 1)
        for n in range(max(1, most_n), 0, -1):
            if (r - 1) % n:
                continue
            if n == 1 and r >= 5 and shrink:
                continue  # only the two ends on a tall plot: try one row less first
            bottom, step = _fit(lo, hi, n)
            cand = (bottom + n * step, -n, -r, bottom, step)
            if best is None or cand < best:
                best = cand
        if best is not None:
            break
    if best is None:  # one or two rows: the ends
        top = nice_ceil(hi) if lo == 0 else hi
        return Axis(lo, top, (lo, top) if rows >= 2 else (top,), max(1, rows))
    top, neg_n, neg_r, bottom, step = best
    n = -neg_n
    ticks = tuple(_round(bottom + i * step, step) for i in range(n + 1))
    return Axis(ticks[0], ticks[-1], ticks, -neg_r)


def x_ticks(lo: float, hi: float, width: int, *, spacing: int = 10) -> Axis:
    """Round x ticks from ``lo`` (floored) to past ``hi``, a label every ``spacing`` columns or more."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    most = max(1, width // spacing)
    step = nice_step((hi - lo) / most)
    while True:
        bottom = math.floor(lo / step + 1e-9) * step
        n = math.ceil((hi - bottom) / step - 1e-9)
        if n <= most:
            break
        step = nice_step(step * 1.001)
    n = max(1, n)
    ticks = tuple(_round(bottom + i * step, step) for i in range(n + 1))
    return Axis(ticks[0], ticks[-1], ticks, 0)


def _round(v: float, step: float) -> float:
    """``v`` without float noise (0.30000000000000004 → 0.3), to the step's own precision."""
    digits = max(0, 3 - math.floor(math.log10(step))) if step > 0 else 6
    r = round(v, digits)
    return 0.0 if r == 0 else r


__all__ = [
    "LABEL_W",
    "X_MANTISSAS",
    "Y_MANTISSAS",
    "Axis",
    "nice_ceil",
    "nice_step",
    "short_number",
    "x_ticks",
    "y_axis",
]
