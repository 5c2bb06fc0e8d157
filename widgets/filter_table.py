"""A list with ``/`` filter and column sort (k9s style), for the profiles and results lists.

:class:`FilterTable` keeps every row it was given and shows those matching the filter text
(case-insensitive, any cell), sorted by the column whose header was clicked (again: reversed).
:class:`TableFilter` is the search box that opens on ``/``: keys typed in the same burst as the
``/`` land in it (they are queued for the table before the box has the focus), never as commands.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Self, Sequence

from rich.text import Text
from textual import events, on
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Input

_NUM = re.compile(r"^-?\d+(?:\.\d+)?")


def sort_value(cell: Any) -> tuple[int, float, str]:
    """Numbers sort as numbers (N/A last), text as text."""
    plain = cell.plain if isinstance(cell, Text) else str(cell)
    m = _NUM.match(plain.strip())
    if m:
        return (0, float(m.group()), plain)
    return (1 if plain.strip() and plain.strip() != "N/A" else 2, 0.0, plain.lower())


class FilterTable(DataTable[Any]):
    """A DataTable over a list of rows: ``set_rows``, ``set_filter``, header click sorts."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        super().__init__(**kwargs)
        #: every row, in the given order: (key, cells)
        self.all_rows: list[tuple[str, tuple[Any, ...]]] = []
        #: the filter text ('' shows every row)
        self.filter_text = ""
        #: the column key sorted by (None: the given order) and the direction
        self.sort_column: str | None = None
        self.sort_reverse = False
        #: the rows on screen, as last shown (None: cleared since)
        self._shown: list[tuple[str, tuple[Any, ...]]] | None = None

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
        self.all_rows = [(k, tuple(c)) for k, c in rows]
        self._show()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._show()

    @property
    def shown_keys(self) -> list[str]:
        return [str(rk.value) for rk in self.rows]

    def _matches(self, cells: Sequence[Any]) -> bool:
        if not self.filter_text:
            return True
        needle = self.filter_text.lower()
        return any(needle in (c.plain if isinstance(c, Text) else str(c)).lower() for c in cells)

    def _show(self) -> None:
        keep = None
        if self.row_count and 0 <= self.cursor_row < self.row_count:
            keep = str(self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value)
        rows = [(k, c) for k, c in self.all_rows if self._matches(c)]
        if self.sort_column is not None:
            idx = [str(col.value) for col in self.columns].index(self.sort_column)
            rows.sort(key=lambda r: sort_value(r[1][idx]), reverse=self.sort_reverse)
        # rich's Text compares its text and spans, not its base style: a cell whose style can change
        # while its text stays must carry the style as a span (Text.stylize), not as ``style=``
        if rows == self._shown:
            return  # a re-read that changed nothing: no rows rebuilt, the cursor and scroll stay
        with self.app.batch_update():
            self.clear()
            for k, c in rows:
                self.add_row(*c, key=k)
            keys = [k for k, _ in rows]
            if keep in keys:
                self.move_cursor(row=keys.index(keep))
        self._shown = rows

    def clear(self, columns: bool = False) -> Self:
        self._shown = None
        return super().clear(columns)

    def sort_by(self, column: str) -> None:
        """Sort by ``column``; the same column again reverses."""
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._show()

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))


class TableFilter(Input):
    """The ``/`` box above a :class:`FilterTable` (``table``: its selector on the screen): hidden
    until :meth:`open`; what is typed filters the table at once (the ``Changed`` message still
    goes on to the screen), enter keeps the filter and goes back to the table."""

    DEFAULT_CSS = """
    TableFilter { display: none; }
    TableFilter.-open { display: block; }
    """

    last_key: events.Key | None = None

    def __init__(self, table: str, **kwargs: Any) -> None:
        kwargs.setdefault("placeholder", "filter (Enter keeps it, Esc clears)")
        kwargs.setdefault("compact", True)
        super().__init__(**kwargs)
        self.table_selector = table

    @property
    def table(self) -> FilterTable:
        return self.screen.query_one(self.table_selector, FilterTable)

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    async def _on_key(self, event: events.Key) -> None:
        self.last_key = event
        await super()._on_key(event)

    def open(self) -> None:
        self.add_class("-open")
        self.cursor_position = len(self.value)
        self.focus()

    def close(self, clear: bool) -> None:
        if clear:
            self.value = ""
        self.remove_class("-open")

    def screen_key(self, event: events.Key) -> None:
        """The ``on_key`` of a screen with this box over its table: ``/`` on the table opens the box
        at once (the keys typed after it are already queued for the table, and :meth:`route` puts
        them in the box); ``escape`` with the box open clears the filter and goes back to the table."""
        table = self.table
        if event.key == "slash" and not self.is_open and self.screen.focused is table:
            event.stop()
            event.prevent_default()
            self.open()
            return
        if self.route(event):
            return
        if event.key == "escape" and self.is_open:
            event.stop()
            self.close(clear=True)
            table.set_filter("")
            table.focus()

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        self.table.set_filter(event.value)

    @on(Input.Submitted)
    def _done(self, event: Input.Submitted) -> None:
        """Enter in the box: the filter stays, the box closes, the focus goes back to the table."""
        event.stop()
        self.close(clear=False)
        self.table.focus()

    def route(self, event: events.Key) -> bool:
        """A key queued for the table while the box is open goes into the box. True when it was
        taken."""
        if not self.is_open or event is self.last_key:
            return False
        event.stop()
        event.prevent_default()
        if event.key == "enter":
            self.post_message(self.Submitted(self, self.value))
        elif event.key == "escape":
            self.close(clear=True)
        elif event.key == "backspace":
            self.action_delete_left()
        elif event.is_printable and event.character:
            self.insert_text_at_cursor(event.character)
        return True


__all__ = ["FilterTable", "TableFilter", "sort_value"]
