"""A keyed table drawn line by line, for feeds that change most rows every second.

DataTable re-renders every cell of a row through its Padding/Styled pipeline after any update,
and keys its caches on an update counter: a GPU table whose utilisation, memory, power and
sparklines change every second paid for all of it once a second. Here each row is one ``Strip``
built when its cells change (a few segments: pad, text, pad per column) and cached by what
decides it; drawing a frame crops cached strips. What it offers is what the GPU table needs: a
fixed header, a row cursor (arrows, Home/End, PgUp/PgDn, click), scrolling, column layouts that
fit the terminal's width, and ``row_count`` / ``get_cell`` as DataTable names them; and for the
server table, :class:`LineTable.RowSelected` on Enter or a click on the cursor's row, as
DataTable's ``RowSelected``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.color import Color, ColorParseError
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tunedeck.widgets._fmt import theme_color

#: a cell: (its text, a theme colour name or "")
Cell = tuple[str, str]


class ColumnLayouts:
    """Columns that fit a terminal's width: ``COLUMNS`` are every column a row carries,
    ``LAYOUTS`` say which of them fit a width (first whose minimum width fits wins), with
    narrower widths and shorter labels, as nvitop does: abbreviations first, then the history
    columns go."""

    COLUMNS: Sequence[tuple[str, str, int]] = ()
    #: (minimum terminal width, column keys (None: all), {key: (label, width)} overrides)
    LAYOUTS: Sequence[tuple[int, tuple[str, ...] | None, dict[str, tuple[str, int]]]] = ()
    #: index into LAYOUTS of the layout in use (0: the widest)
    layout_index: int = 0

    def _layout_for(self, width: int) -> tuple[int, list[tuple[str, str, int]]]:
        base = {k: (label, w) for k, label, w in self.COLUMNS}
        for i, (min_w, keys, over) in enumerate(self.LAYOUTS):
            if width >= min_w or i == len(self.LAYOUTS) - 1:
                spec = {**base, **over}
                return i, [(k, *spec[k]) for k in (keys or tuple(base))]
        return 0, list(self.COLUMNS)

    @property
    def compact(self) -> bool:
        """True in the narrowest layout (cells use their short forms)."""
        return bool(self.LAYOUTS) and self.layout_index == len(self.LAYOUTS) - 1


class LineTable(ColumnLayouts, ScrollView, can_focus=True):
    """Rows of ``Cell`` tuples by key, in the order :meth:`_apply` is given (see module doc)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"line-table--header", "line-table--cursor"}
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header { background-tint: $foreground 5%; }
        }
        & > .line-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .line-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    #: cursor keys as DataTable's (no description: the keys overlay leaves cursor keys out)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", show=False),
        Binding("down", "cursor(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "cursor_to(0)", show=False),
        Binding("end", "cursor_to(-1)", show=False),
        Binding("ctrl+home", "cursor_to(0)", show=False),  # DataTable's keys for the first and last row
        Binding("ctrl+end", "cursor_to(-1)", show=False),
        Binding("enter", "select_cursor", show=False),
    ]

    class RowSelected(Message):
        """Enter, or a click on the row the cursor is on (DataTable's ``RowSelected``)."""

        def __init__(self, table: "LineTable", cursor_row: int, row_key: str) -> None:
            self.table = table
            self.cursor_row = cursor_row
            """The row selected (0: the first below the header)."""
            self.row_key = row_key
            """The key of the row selected."""
            super().__init__()

        @property
        def control(self) -> "LineTable":
            return self.table

    cursor_row: reactive[int] = reactive(0)
    """The row the cursor is on (0: the first below the header)."""

    #: padding either side of a cell, as DataTable's ``cell_padding``
    PAD = 1

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self._order: list[str] = []
        self._index = {k: i for i, (k, _, _) in enumerate(self.COLUMNS)}
        #: the columns shown now (key, label, width)
        self.shown_columns: list[tuple[str, str, int]] = list(self.COLUMNS)
        #: full-width strips by what decides them (row cells or the header, cursor, styles)
        self._strips: LRUCache[tuple[Any, ...], Strip] = LRUCache(256)
        self._styles: tuple[Style, Style, Style, str] | None = None
        #: theme colour styles by (theme, name)
        self._colours: dict[tuple[str, str], Style | None] = {}
        #: (size, scroll x, scroll y) while a frame is drawn
        self._frame: tuple[Size, int, int] | None = None

    # ------------------------------------------------------------------ data
    @property
    def row_count(self) -> int:
        return len(self._order)

    def row_keys(self) -> list[str]:
        """The rows' keys, top to bottom."""
        return list(self._order)

    def get_cell(self, row_key: str, column_key: str) -> Text:
        """A cell as DataTable would hold it: its text in its theme colour."""
        plain, color = self._cells[row_key][self._index[column_key]]
        return Text(plain, style=theme_color(self, color) if color else "", no_wrap=True, end="")

    def _apply(self, rows: Sequence[tuple[str, Sequence[Cell]]]) -> None:
        """Show ``rows`` (key, every column's cell) in this order; repaints only changed rows."""
        order = [key for key, _ in rows]
        new = {key: tuple(cells) for key, cells in rows}
        if order != self._order:
            self._order, self._cells = order, new
            self._resize()
            self.cursor_row = min(self.cursor_row, max(0, len(order) - 1))
            self.refresh()
            return
        changed = [i for i, key in enumerate(order) if self._cells.get(key) != new[key]]
        self._cells = new
        if not changed:
            return
        top, (width, height) = round(self.scroll_y), self.size
        for i in changed:
            y = i - top + 1
            if 1 <= y < height:
                self.refresh(Region(0, y, width, 1))

    # ---------------------------------------------------------------- layout
    def on_mount(self) -> None:
        self.layout_index, self.shown_columns = self._layout_for(self.app.size.width)
        self._resize()

    def fit(self, width: int) -> bool:
        """Choose the layout for a terminal ``width``; True when it changed (rows redrawn)."""
        index, cols = self._layout_for(width)
        if cols == self.shown_columns and index == self.layout_index:
            return False
        self.layout_index, self.shown_columns = index, cols
        self._refill()
        self._resize()
        self.refresh()
        return True

    def _refill(self) -> None:
        """Rebuild the rows from the last data for the new columns (subclasses keep it)."""

    def _resize(self) -> None:
        width = sum(w + 2 * self.PAD for _, _, w in self.shown_columns)
        self.virtual_size = Size(width, len(self._order) + 1)
        self.refresh(layout=True)

    # ---------------------------------------------------------------- cursor
    def watch_cursor_row(self, old: int, new: int) -> None:
        top = round(self.scroll_y)
        for row in (old, new):
            y = row - top + 1
            if 1 <= y < self.size.height:
                self.refresh(Region(0, y, self.size.width, 1))
        self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1 - (self.scrollbar_size_horizontal or 0))
        top = round(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        if self._order:
            self.cursor_row = max(0, min(len(self._order) - 1, self.cursor_row + delta))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_cursor_to(self, row: int) -> None:
        if self._order:
            self.cursor_row = row % len(self._order)

    def action_select_cursor(self) -> None:
        if 0 <= self.cursor_row < len(self._order):
            self.post_message(self.RowSelected(self, self.cursor_row, self._order[self.cursor_row]))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and offset.y >= 1:
            row = round(self.scroll_y) + offset.y - 1
            if 0 <= row < len(self._order):
                again = row == self.cursor_row
                self.cursor_row = row
                if again:  # as DataTable: a click on the highlighted row selects it
                    self.action_select_cursor()

    # --------------------------------------------------------------- drawing
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None  # focus, theme or CSS changed: styles read again on the next frame

    def _frame_styles(self) -> tuple[Style, Style, Style, str]:
        if self._styles is None:
            base = self.rich_style
            self._styles = (
                base,
                base + self.get_component_rich_style("line-table--header"),
                base + self.get_component_rich_style("line-table--cursor"),
                self.app.theme,
            )
        return self._styles

    def _colour(self, name: str) -> Style | None:
        """The style of a theme colour name (None: no colour), kept per theme."""
        key = (self.app.theme, name)
        if key not in self._colours:
            value = theme_color(self, name) if name else ""
            try:
                self._colours[key] = Style(color=Color.parse(value).rich_color) if value else None
            except ColorParseError:
                self._colours[key] = None
        return self._colours[key]

    def _line(self, cells: Sequence[Cell], style: Style, cursor: bool, width: int) -> Strip:
        """A row as few segments as its colours allow: cells and pads of the row's own style are
        one run of text (every later step, Textual's line styles, its colour filter and the
        compositor's cuts, goes segment by segment)."""
        pad = " " * self.PAD
        segs: list[Segment] = []
        run: list[str] = []
        for key, _, w in self.shown_columns:
            plain, color = cells[self._index[key]]
            colour = None if cursor or not color else self._colour(color)
            if colour is None:
                run += (pad, set_cell_size(plain, w), pad)
                continue
            run.append(pad)
            segs += [Segment("".join(run), style), Segment(set_cell_size(plain, w), style + colour)]
            run = [pad]
        used = sum(w + 2 * self.PAD for _, _, w in self.shown_columns)
        if width > used:
            run.append(" " * (width - used))
        if run:
            segs.append(Segment("".join(run), style))
        return Strip(segs, max(width, used))

    def render_lines(self, crop: Region) -> list[Strip]:
        # the size and scroll offsets once a frame: Textual computes them on every read, and
        # that cost more than drawing a cached line
        self._frame = (self.size, round(self.scroll_x), round(self.scroll_y))
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        base, header, cursor_style, theme = self._frame_styles()
        size, scroll_x, scroll_y = self._frame or (self.size, round(self.scroll_x), round(self.scroll_y))
        width = max(size.width, self.virtual_size.width)
        if y == 0:
            key: tuple[Any, ...] = ("header", tuple(self.shown_columns), width, header, theme)
            strip = self._strips.get(key)
            if strip is None:
                labels = {k: (label, "") for k, label, _ in self.shown_columns}
                strip = self._line([labels.get(k, ("", "")) for k, _, _ in self.COLUMNS], header, True, width)
                self._strips[key] = strip
        else:
            row = scroll_y + y - 1
            if not 0 <= row < len(self._order):
                return Strip.blank(size.width, base)
            cells = self._cells[self._order[row]]
            on_cursor = row == self.cursor_row
            style = cursor_style if on_cursor else base
            key = (cells, tuple(self.shown_columns), width, style, on_cursor, theme)
            strip = self._strips.get(key)
            if strip is None:
                strip = self._line(cells, style, on_cursor, width)
                self._strips[key] = strip
        return strip.crop(scroll_x, scroll_x + size.width)
