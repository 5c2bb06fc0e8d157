"""GPU table (a row per GPU with sparklines), GPU process table, and bounded histories.

Widgets here only read :mod:`tunedeck.model` snapshots. Rows are keyed and
updated cell by cell (only changed cells) inside ``batch_update``; rows
are never rebuilt per tick, so cursor and scroll survive updates.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Mapping, Sequence

from rich.errors import StyleError
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.widgets import DataTable

from tunedeck.fmt import fmt, num
from tunedeck.model import GpuProcess, GpuSnapshot, GpuStatus
from tunedeck.widgets._countdown import CountdownStatic
from tunedeck.widgets._fmt import bar, gib_pair, ratio, sparkline, theme_color
from tunedeck.widgets.line_table import ColumnLayouts, LineTable

#: GpuStatus.state → what the operator reads (nvidia-smi exit codes named).
GPU_STATE_TEXT: Mapping[str, str] = {
    "ok": "",
    "starting": "connecting to nvidia-smi…",
    "driver-not-loaded": "NVIDIA driver not loaded (nvidia-smi exit 9)",
    "nvml-not-found": "NVML library missing (nvidia-smi exit 12)",
    "inforom-corrupt": "GPU infoROM corrupted (nvidia-smi exit 14)",
    "gpu-lost": "GPU lost — fell off the bus (nvidia-smi exit 15)",
    "nvml-mismatch": "driver/library version mismatch (nvidia-smi exit 18)",
    "unresponsive": "nvidia-smi unresponsive — timed out (driver hung?)",
    "no-nvidia-smi": "nvidia-smi not found on the host",
    "no-devices": "no NVIDIA GPUs found (nvidia-smi exit 6)",
    "insufficient-permissions": "insufficient permissions to query the GPUs (nvidia-smi exit 4)",
    "host-unreachable": "host unreachable — GPU data stale",
    "waiting": "waiting for the first GPU sample…",
    "no-collector": "no GPU collector for this host",
    "error": "nvidia-smi failed",
}


def gpu_state_text(status: GpuStatus, now: float | None = None) -> str:
    """One line naming what is wrong with the GPU feed ('' when all is well), with the
    retry countdown when the collector scheduled one (``GpuStatus.retry_at``, wall clock)."""
    if status.state == "ok":
        return ""
    base = GPU_STATE_TEXT.get(status.state, f"GPU feed: {status.state}")
    msg = status.message.strip().splitlines()[0] if status.message.strip() else ""
    head = msg.lower().split(" (exit")[0].strip()
    text = f"{base}: {msg}" if msg and head not in base.lower() else base
    retry_at = getattr(status, "retry_at", 0.0) or 0.0
    if retry_at:
        left = max(0, math.ceil(retry_at - (time.time() if now is None else now)))
        text += f" — retrying in {left}s" if left else " — retrying now…"
    return text


class GpuStateLine(CountdownStatic):
    """The GPU feed's state line (hidden while ``ok``), with a live retry countdown."""

    DEFAULT_CSS = """
    GpuStateLine { height: auto; padding: 0 1; display: none; color: $text-error; }
    GpuStateLine.-shown { display: block; }
    GpuStateLine.-quiet { color: $text-muted; }
    """

    status: GpuStatus | None = None
    """The status shown."""

    def set_status(self, status: GpuStatus) -> None:
        if status is self.status:
            return
        self.status = status
        self.tick()

    def text(self) -> str:
        return "" if self.status is None else gpu_state_text(self.status)

    def deadline(self) -> float | None:
        retry_at = getattr(self.status, "retry_at", 0.0) or 0.0
        return retry_at - time.time() if retry_at else None

    def shown(self, text: str) -> None:
        self.set_class(bool(text), "-shown")
        self.set_class(self.status is not None and self.status.state in ("waiting", "starting"), "-quiet")


def _gpu_key(g: GpuSnapshot) -> str:
    return f"gpu-{g.index}"


class GpuHistory:
    """Bounded utilization and memory-% histories per GPU (deques of ``maxlen``).

    Fed on every sample, visible or not; widgets read copies when they draw.
    """

    def __init__(self, maxlen: int = 60) -> None:
        self.maxlen = maxlen
        self._util: dict[str, deque[float]] = {}
        self._mem: dict[str, deque[float]] = {}

    def add(self, status: GpuStatus) -> None:
        for g in status.gpus:
            key = _gpu_key(g)
            u = num(g.utilization)
            r = ratio(g.memory_used, g.memory_total)
            self._util.setdefault(key, deque(maxlen=self.maxlen)).append(math.nan if u is None else u)
            self._mem.setdefault(key, deque(maxlen=self.maxlen)).append(math.nan if r is None else r * 100)

    def util(self, key: str) -> Sequence[float]:
        return self._util.get(key, ())

    def mem(self, key: str) -> Sequence[float]:
        return self._mem.get(key, ())

    def __len__(self) -> int:
        return len(self._util)


class _KeyedTable(ColumnLayouts, DataTable[Any]):
    """A DataTable updated by row key; writes only cells whose text changed, with the column
    layouts of :class:`ColumnLayouts` (:meth:`fit` switches)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._cells: dict[str, tuple[tuple[str, str], ...]] = {}
        #: rendered cell lines by what decides them (see :meth:`_render_cell`)
        self._lines_cache: LRUCache[tuple[Any, ...], Any] = LRUCache(2048)
        #: rendered lines by what decides them (see :meth:`_render_line`)
        self._strips: LRUCache[tuple[Any, ...], Any] = LRUCache(512)
        self._frame_style: Style | None = None
        self._index = {k: i for i, (k, _, _) in enumerate(self.COLUMNS)}
        #: the columns shown now (key, label, width)
        self.shown_columns: list[tuple[str, str, int]] = list(self.COLUMNS)

    def on_mount(self) -> None:
        self.layout_index, self.shown_columns = self._layout_for(self.app.size.width)
        for key, label, width in self.shown_columns:
            self.add_column(label, key=key, width=width)
        self.app.theme_changed_signal.subscribe(self, self._recolour)

    def fit(self, width: int) -> bool:
        """Choose the layout for a terminal ``width``; True when it changed (rows redrawn)."""
        index, cols = self._layout_for(width)
        if cols == self.shown_columns and index == self.layout_index:
            return False
        self.layout_index, self.shown_columns = index, cols
        self._cells.clear()
        self.clear(columns=True)
        for key, label, w in cols:
            self.add_column(label, key=key, width=w)
        self._refill()
        return True

    def _refill(self) -> None:
        """Rebuild the rows from the last data (subclasses keep it)."""

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        """DataTable renders every cell again after any update (its cache is keyed on an update
        counter); at 1 Hz most cells of a dashboard table did not change. Here a cell's lines are
        kept by what decides them: its place, its text and style, the width and the cursor."""
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        cells = self._cells.get(str(row_key.value)) if row_key is not None else None
        if cells is None or column_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        key = (
            row_index,
            column_index,
            cells[self._index[str(column_key.value)]],
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.app.theme,
        )
        lines = self._lines_cache.get(key)
        if lines is None:
            lines = self._plain_cell(row_index, column_index, row_key, column_key, base_style, width, cursor, hover)
            if lines is None:
                lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._lines_cache[key] = lines
        return lines

    def render_lines(self, crop: Any) -> Any:
        # the widget's style once a frame, not once a line (DataTable asks for it on every line)
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    def render_line(self, y: int) -> Any:
        if self._frame_style is None or self.fixed_rows:
            return super().render_line(y)
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.header_height if self.show_header else 0):
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, self._frame_style)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Any:
        """DataTable draws every line again after any update; here a line is kept by what decides
        it: its row's cells (or the header), the columns, the crop, the cursor and the style."""
        try:
            row_key, offset = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        content = "header" if row_key is self._header_row_key else self._cells.get(str(row_key.value))
        if content is None:
            return super()._render_line(y, x1, x2, base_style)
        key = (
            y,
            offset,
            content,
            tuple(self.shown_columns),
            x1,
            x2,
            self.size.width,
            self.cursor_coordinate,
            self.hover_coordinate,
            base_style,
            self.cursor_type,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self.app.theme,
            self.row_count,
        )
        strip = self._strips.get(key)
        if strip is None:
            strip = super()._render_line(y, x1, x2, base_style)
            self._strips[key] = strip
        return strip

    def _plain_cell(
        self,
        row_index: int,
        column_index: int,
        row_key: Any,
        column_key: Any,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
    ) -> list[list[Segment]] | None:
        """A one-row cell of a one-line left-aligned ``Text`` drawn straight to segments: what
        DataTable's Padding/Styled/render_lines pipeline gives for it, at a fraction of the cost
        (None: any other cell, drawn by DataTable itself)."""
        row = self.rows.get(row_key)
        cell = self._data.get(row_key, {}).get(column_key)
        if row is None or row.height != 1 or not isinstance(cell, Text) or not cell.no_wrap:
            return None
        if cell.justify not in (None, "default", "left") or "\n" in cell.plain or "\t" in cell.plain:
            return None
        fixed = row_index < self.fixed_rows or column_index < self.fixed_columns
        component_style, post_style = self._get_styles_to_render_cell(
            False,
            False,
            fixed,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pad = self.cell_padding
        inner = max(0, width - 2 * pad)
        console = self.app.console
        if cell.overflow not in (None, "fold", "crop") and cell.cell_len > inner:
            return None  # an ellipsis: DataTable's own path
        try:
            segs = list(cell.render(console, end=""))
            if cell.style:  # DataTable's path joins the line, which turns the base style into a span
                segs = list(Segment.apply_style(segs, console.get_style(cell.style)))
        except StyleError:  # a Textual colour ("auto 60%"): DataTable's own path knows it
            return None
        body = Segment.adjust_line_length(segs, inner, style=Style.null())
        blank = Segment(" " * pad, Style.null()) if pad else None
        line = [*([blank] if blank else []), *body, *([blank] if blank else [])]
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        return [list(Segment.apply_style(line, pre, post_style))]

    def _recolour(self, _theme: object = None) -> None:
        """Re-style every cell from the new theme's variables."""
        with self.app.batch_update():
            for key, cells in self._cells.items():
                for col, _, _ in self.shown_columns:
                    cell = cells[self._index[col]]
                    if cell[1]:
                        self.update_cell(key, col, self._text(cell))

    def _text(self, cell: tuple[str, str]) -> Text:
        plain, color = cell
        return Text(plain, style=theme_color(self, color) if color else "", no_wrap=True, end="")

    def _apply(self, rows: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> None:
        with self.app.batch_update():
            keep = set()
            added = False
            cols = [k for k, _, _ in self.shown_columns]
            for key, cells in rows:
                keep.add(key)
                old = self._cells.get(key)
                if old is None:
                    self.add_row(*(self._text(cells[self._index[c]]) for c in cols), key=key)
                    added = True
                else:
                    for col in cols:
                        i = self._index[col]
                        if cells[i] != old[i]:
                            self.update_cell(key, col, self._text(cells[i]))
                self._cells[key] = tuple(cells)
            for key in [k for k in self._cells if k not in keep]:
                self.remove_row(key)
                del self._cells[key]
            if added and len(self._cells) > 1:
                self._sort_rows()

    def _sort_rows(self) -> None:
        """Put rows in order after new ones were added (subclasses)."""


class GpuTable(LineTable):
    """One row per GPU: index, name, util, util history, memory bar, memory history,
    temperature, power draw/limit, SM clock. Drawn line by line: most of its cells change every
    second (see :mod:`tunedeck.widgets.line_table`)."""

    DEFAULT_CSS = """
    GpuTable { height: auto; max-height: 18; }
    """
    COLUMNS = (
        ("gpu", "GPU", 3),
        ("name", "Name", 16),
        ("util", "Util", 4),
        ("util_hist", "Util history", 16),
        ("mem", "Memory", 22),
        ("mem_hist", "Mem history", 16),
        ("temp", "Temp", 4),
        ("power", "Power", 9),
        ("sm", "SM clock", 8),
    )
    LAYOUTS = (
        (118, None, {}),
        (
            100,
            None,
            {
                "name": ("Name", 12),
                "util_hist": ("Util hist", 10),
                "mem": ("Memory", 20),
                "mem_hist": ("Mem hist", 10),
                "sm": ("SM", 7),
            },
        ),
        (
            0,
            ("gpu", "name", "util", "util_hist", "mem", "temp", "power", "sm"),
            {
                "name": ("Name", 9),
                "util_hist": ("Util~", 8),
                "mem": ("Memory", 16),
                "power": ("Power", 8),
                "sm": ("SM", 7),
            },
        ),
    )
    SPARK_WIDTH = 16

    def _refill(self) -> None:
        last = getattr(self, "_last", None)
        if last is not None:
            self.update_gpus(*last)

    def update_gpus(self, gpus: Sequence[GpuSnapshot], history: GpuHistory | None = None) -> None:
        self._last = (gpus, history)
        spark_w = {k: w for k, _, w in self.shown_columns}.get("util_hist", self.SPARK_WIDTH)
        bar_w = 4 if self.compact else 8
        rows = []
        for g in sorted(gpus, key=lambda g: g.index):
            key = _gpu_key(g)
            util = num(g.utilization)
            memr = ratio(g.memory_used, g.memory_total)
            temp = num(g.temperature)
            name = g.name.removeprefix("NVIDIA ").strip() or "N/A"
            uh = sparkline(history.util(key), spark_w) if history else ""
            mh = sparkline(history.mem(key), spark_w) if history else ""
            mem_text = gib_pair(g.memory_used, g.memory_total)
            mem_cell = f"{bar(memr, bar_w)} {mem_text}" if memr is not None else mem_text
            power = f"{fmt(g.power_draw)}/{fmt(g.power_limit)}W"
            if num(g.power_draw) is None and num(g.power_limit) is None:
                power = "N/A"
            cells = (
                (str(g.index), ""),
                (name, ""),
                (fmt(g.utilization, ".0f", "%"), _level(util, 50, 90)),
                (uh, "accent"),
                (mem_cell, _level(None if memr is None else memr * 100, 80, 95)),
                (mh, "secondary"),
                (fmt(g.temperature, ".0f", "°"), _level(temp, 80, 90, good="")),
                (power, ""),
                (fmt(g.clock_sm, ".0f", "MHz"), ""),
            )
            rows.append((key, cells))
        self._apply(rows)


def _level(value: float | None, warn: float, bad: float, good: str = "success") -> str:
    if value is None:
        return "text-muted"
    if value >= bad:
        return "error"
    if value >= warn:
        return "warning"
    return good


class GpuProcessTable(_KeyedTable):
    """Compute processes on the GPUs: pid, name, GPU index, memory."""

    DEFAULT_CSS = """
    GpuProcessTable { height: 1fr; }
    """
    COLUMNS = (
        ("pid", "PID", 8),
        ("gpu", "GPU", 3),
        ("memory", "Memory", 10),
        ("name", "Process", 40),
    )

    def update_processes(self, processes: Sequence[GpuProcess]) -> None:
        rows = []
        for p in sorted(processes, key=lambda p: (p.gpu_index if p.gpu_index is not None else 999, p.pid)):
            gpu = "?" if p.gpu_index is None else str(p.gpu_index)
            mem = fmt(p.used_memory, ".0f", " MiB")
            rows.append((f"{p.pid}:{p.gpu_uuid}", ((str(p.pid), ""), (gpu, ""), (mem, ""), (p.name, ""))))
        self._apply(rows)

    def _sort_rows(self) -> None:
        self.sort("gpu", "pid", key=lambda r: (r[0].plain, int(r[1].plain) if r[1].plain.isdigit() else 0))
