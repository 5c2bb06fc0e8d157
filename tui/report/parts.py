"""What a report holds: sections of tables, charts, commands and notes.

Plain immutable data with text already chosen; the renderers (:mod:`tunedeck.report.htmlpage`,
:mod:`tunedeck.report.markdown`) escape every string they are given, so text of host origin (names,
arguments, log lines) may be put here as it came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Series:
    """One line (or one colour of bars): ``points`` are (x, y); x is an index into the chart's
    categories when it has some. ``color`` and ``dash`` index the renderers' palettes."""

    name: str
    points: tuple[tuple[float, float], ...]
    color: int = 0
    dash: int = 0


@dataclass(frozen=True)
class LineChart:
    """Lines on a numeric y axis; x numeric (seconds) or, with ``categories``, the category at
    each index (concurrency levels, evenly spaced)."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    categories: tuple[str, ...] = ()


@dataclass(frozen=True)
class BarChart:
    """Grouped bars: one group per category, one bar per series (x = the category's index)."""

    title: str
    y_label: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Point:
    """One named point of a :class:`ScatterChart`; ``frontier``: on the chart's joined line."""

    name: str
    x: float
    y: float
    frontier: bool = False


@dataclass(frozen=True)
class ScatterChart:
    """Named points on two numeric axes from 0; the ``frontier`` ones are joined (in x order) and
    labelled, the others drawn as dotted rings (a Pareto frontier: tok/s per user against tok/s
    per GPU)."""

    title: str
    x_label: str
    y_label: str
    points: tuple[Point, ...]


Chart = Union[LineChart, BarChart, ScatterChart]


@dataclass(frozen=True)
class Table:
    """Rows of text; ``numeric`` holds the indexes of right-aligned columns."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[int, ...] = ()
    title: str = ""


@dataclass(frozen=True)
class Code:
    """Commands or other literal text, one line each (shown as written, never run)."""

    lines: tuple[str, ...]
    title: str = ""


@dataclass(frozen=True)
class Notes:
    """A list of sentences; ``tone`` is ``info``, ``warn`` (warnings, findings) or ``ok``."""

    items: tuple[str, ...]
    tone: str = "info"
    title: str = ""


Part = Union[LineChart, BarChart, ScatterChart, Table, Code, Notes]


@dataclass(frozen=True)
class Section:
    title: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Report:
    """A whole report: ``kind`` is ``result``, ``ab`` or ``campaign``; ``headline`` is its verdict
    or its one-line summary."""

    kind: str
    id: str
    title: str
    headline: str
    sections: tuple[Section, ...]
    generated: str = ""
    facts: tuple[tuple[str, str], ...] = field(default_factory=tuple)


__all__ = [
    "BarChart",
    "Chart",
    "Code",
    "LineChart",
    "Notes",
    "Part",
    "Point",
    "Report",
    "ScatterChart",
    "Section",
    "Series",
    "Table",
]
