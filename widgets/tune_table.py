"""A tuning campaign's candidates: number, name, state, capacity at the SLO and, with room,
tok/s per user, tok/s per GPU and the step being measured.

Renders an immutable :class:`tunedeck.ab.tuneview.TuneSnapshot`; rows are keyed by candidate, so a new
snapshot updates cells in place. The base's name stands in full, the others by their changes
(``+attention-backend=fa3``); ``*`` marks a candidate on the Pareto frontier, bold the best so far.

Nothing an operator needs is cut at the right edge: a name longer than the room the other columns
leave wraps at its changes (:func:`wrap_name`), and ``compact`` (a narrow terminal) keeps only
number, name, state and capacity, the rest of the highlighted candidate in :meth:`TuneTable.detail`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from tunedeck.ab.tuneview import CandidateView, TuneSnapshot

#: the columns: (key, label)
COLUMNS = (
    ("n", "#"),
    ("name", "candidate"),
    ("state", "state"),
    ("capacity", "capacity"),
    ("per_user", "tok/s/user"),
    ("per_gpu", "tok/s/GPU"),
    ("step", "step"),
)
#: a narrow terminal's columns (the others are in the detail line)
COMPACT = ("n", "name", "state", "capacity")
STATE_STYLE = {
    "queued": "dim",
    "starting": "yellow",
    "measuring": "bold yellow",
    "done": "green",
    "failed": "bold red",
    "dropped": "dim",
    "skipped": "dim red",
    "not measured": "yellow",
}
#: a name never wraps narrower than this
MIN_NAME = 12


def wrap_name(name: str, width: int) -> list[str]:
    """``name`` in lines of at most ``width`` characters, broken after a ``+`` or ``,`` (between
    the changes) where it can be, inside a change only where one is longer than a line."""
    if width < 1 or len(name) <= width:
        return [name]
    lines = [""]
    for part in re.split(r"(?<=[+,])", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
        while len(lines[-1]) > width:
            head, rest = lines[-1][:width], lines[-1][width:]
            lines[-1:] = [head, rest]
    return lines


class TuneTable(DataTable[Any]):
    """One keyed row per candidate of a :class:`TuneSnapshot`."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(zebra_stripes=True, cursor_type="row", **kw)
        self.snapshot: TuneSnapshot | None = None
        """The snapshot shown (None before the first one)."""
        self.compact = False
        """Number, name, state and capacity only (a narrow terminal)."""
        self._name_width = 0

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label in COLUMNS:
            if not self.compact or key in COMPACT:
                self.add_column(label, key=key)

    # ------------------------------------------------------------------ cells
    @staticmethod
    def short_name(snap: TuneSnapshot, c: CandidateView) -> str:
        """The base's name in full; the others are the base with changes: their changes say which one."""
        base = snap.candidates[0].name if snap.candidates else ""
        if c.name != base and base and c.name.startswith(base + "+"):
            return c.name[len(base) :]
        return c.name

    @staticmethod
    def _step(c: CandidateView) -> str:
        note = c.note[len(c.name) + 1 :].lstrip(": ") if c.note.startswith(c.name) else c.note
        return c.step or note

    def _cells(self, snap: TuneSnapshot, i: int, c: CandidateView) -> dict[str, Any]:
        mark = "*" if c.pareto else " "
        name = "\n".join(wrap_name(mark + self.short_name(snap, c), self._name_width))
        return {
            "n": str(i),
            "name": Text(name, style="bold" if c.name == snap.best else ""),
            "state": Text(c.state, style=STATE_STYLE.get(c.state, "")),
            "step": Text(self._step(c)),
            "capacity": "-" if c.capacity is None else f"{c.capacity:.0f}",
            "per_user": "-" if c.tok_s_per_user is None else f"{c.tok_s_per_user:.1f}",
            "per_gpu": "-" if c.tok_s_per_gpu is None else f"{c.tok_s_per_gpu:.1f}",
        }

    def _room(self, snap: TuneSnapshot) -> int:
        """The name's width: what the columns before the last one (the step, which may be cut)
        leave of the table's width; 0 (no wrapping) before the table has one."""
        width = self.scrollable_content_region.width
        if width <= 0:
            return 0
        keys = [k for k, _ in COLUMNS if k != "name" and (not self.compact or k in COMPACT)]
        if not self.compact:
            keys.remove("step")
        cells = [self._cells(snap, i, c) for i, c in enumerate(snap.candidates, 1)]
        used = 0
        for key in keys:
            label = dict(COLUMNS)[key]
            used += max([len(label), *(len(str(cl[key])) for cl in cells)]) + 2 * self.cell_padding
        return max(MIN_NAME, width - used - 2 * self.cell_padding)

    # ------------------------------------------------------------------ show
    def show(self, snap: TuneSnapshot, *, compact: bool = False) -> None:
        """Show ``snap``: changed cells updated, new candidates added; ``compact`` (a narrow
        terminal): number, name, state and capacity only."""
        name_width = self._room(snap)
        relaid = compact != self.compact or name_width != self._name_width
        self.snapshot, self.compact, self._name_width = snap, compact, name_width
        columns = [k for k, _ in COLUMNS if not compact or k in COMPACT]
        with self.app.batch_update():
            if relaid:
                cursor = self.cursor_row
                self.clear(columns=True)
                self._add_columns()
            for i, c in enumerate(snap.candidates, 1):
                cells = self._cells(snap, i, c)
                if c.name not in self.rows:
                    height = str(cells["name"]).count("\n") + 1
                    self.add_row(*(cells[k] for k in columns), key=c.name, height=height)
                    continue
                for key in columns:
                    if str(self.get_cell(c.name, key)) != str(cells[key]):
                        self.update_cell(c.name, key, cells[key])
            if relaid and self.row_count:
                self.move_cursor(row=min(cursor, self.row_count - 1))

    def on_resize(self, event: events.Resize) -> None:
        if self.snapshot is not None and self._room(self.snapshot) != self._name_width:
            self.show(self.snapshot, compact=self.compact)

    def detail(self) -> Text:
        """The highlighted candidate in full: its name and what the compact table leaves out."""
        snap = self.snapshot
        if snap is None or not snap.candidates or not self.row_count:
            return Text()
        i = min(max(self.cursor_row, 0), len(snap.candidates) - 1)
        c = snap.candidates[i]
        t = Text()
        t.append(f"#{i + 1} ", style="bold")
        t.append(c.name, style="bold" if c.name == snap.best else "")
        if c.name == snap.best:
            # a partial campaign's best is of the candidates it measured, not the winner
            lead = {"running": "best so far", "partial": "best of the measured"}.get(snap.status, "winner")
            t.append(f" ({lead})", style="bold")
        cells = self._cells(snap, i + 1, c)
        parts = [f"{label} {cells[key]}" for key, label in COLUMNS if key in ("per_user", "per_gpu")]
        step = self._step(c)
        if step:
            parts.append(step)
        t.append("\n  " + " · ".join(parts), style="dim")
        return t


__all__ = ["COLUMNS", "COMPACT", "STATE_STYLE", "TuneTable", "wrap_name"]
