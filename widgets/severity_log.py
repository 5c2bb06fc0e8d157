"""The log view under :class:`~tunedeck.widgets.server_log.ServerLog`: a ``Log`` bounded in lines and in
bytes that colours each line by its severity (and a merged log's node tags) and marks the search
matches (:class:`SeverityLog`); what a line is (:func:`line_severity`, :func:`is_probe_line`,
:func:`tag_node`)."""

from __future__ import annotations

import functools
import re
import sys
from collections import deque
from typing import Any, Iterable, Self

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Log

_ERROR_RE = re.compile(
    r"\bERROR\b|\bCRITICAL\b|Traceback \(most recent call last\)|^\S*(?:Error|Exception)\b|"
    r"\b\w+(?:Error|Exception): |NCCL WARN|^Killed$"
)
_WARN_RE = re.compile(r"\bWARNING\b|\bWARN\b|Warning:")


#: a line longer than this is shown cut (the buffer keeps up to the follower's 16 KiB of it): a
#: terminal shows ~200 columns, and each shown line is rendered, styled and cached whole
SHOW_CHARS = 2048
#: rendered lines kept (Textual's Log keeps 1,024; a screen shows a few dozen)
RENDER_CACHE_LINES = 256


#: every match of ``_ERROR_RE`` holds one of these: a line without any is not searched
_ERROR_WORDS = ("ERROR", "CRITICAL", "Traceback", "Error", "Exception", "NCCL WARN", "Killed")


def line_severity(line: str) -> str:
    """'error' | 'warning' | 'info' (by the first 200 characters)."""
    head = line[:200]
    # the words first: most lines hold none, and the expressions cost ten times more
    if any(w in head for w in _ERROR_WORDS) and _ERROR_RE.search(head):
        return "error"
    if ("WARN" in head or "Warning:" in head) and _WARN_RE.search(head):
        return "warning"
    return "info"


#: tunedeck's own polling seen in the server's access log (uvicorn / aiohttp style), two lines a second
_PROBE_RE = re.compile(r'"(?:GET|HEAD) /(?:health|health_generate|metrics|v1/models|get_model_info)(?:[ ?])[^"]*"')


def is_probe_line(line: str) -> bool:
    """True for an access-log line of a ``/health`` or ``/metrics`` poll (hidden by default)."""
    return '"' in line and _PROBE_RE.search(line[:300]) is not None


#: a line's colour by its severity (:func:`line_severity`)
_SEVERITY_STYLES = {"error": "bold red", "warning": "yellow"}


class LogHighlighter(Highlighter):
    """Whole-line severity colour plus the search matches (the current one stands out)."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None
        #: True while the line being highlighted holds the current match
        self.current = False
        #: a leading ``[tag]`` → its style (a merged log's node tags)
        self.tag_styles: dict[str, str] = {}

    def line_styles(self, plain: str) -> tuple[str | None, int, str | None]:
        """A line's own colours: the whole line's (by severity), and its leading tag's (the
        cells ``0..end``, ``end`` 0 when it has none) with its style."""
        end = plain.find("]") if self.tag_styles and plain.startswith("[") else -1
        sev = _SEVERITY_STYLES.get(line_severity(plain[end + 2 :] if end > 0 else plain))
        tag = self.tag_styles.get(tag_node(plain[1:end].strip(), self.tag_styles)) if end > 0 else None
        return sev, (end + 1 if tag else 0), tag

    def highlight(self, text: Text) -> None:
        sev, end, tag = self.line_styles(text.plain)
        if sev:
            text.stylize(sev)
        if tag:
            text.stylize(tag, 0, end)
        if self.pattern is not None:
            style = "bold black on yellow" if self.current else "reverse"
            for m in self.pattern.finditer(text.plain):
                if m.end() > m.start():
                    text.stylize(style, m.start(), m.end())
            if self.current:
                text.stylize("underline")


@functools.lru_cache(maxsize=64)
def _style(text: str) -> Style:
    return Style.parse(text)


def tag_node(tag: str, nodes: Iterable[str]) -> str:
    """The node of a member tag (``gpu-a`` or ``gpu-a:ray``), among ``nodes``: a node may hold
    colons itself (``op@10.0.0.2:2222``), so the tag is matched against the nodes, not split."""
    best = ""
    for n in nodes:
        if (tag == n or tag.startswith(n + ":")) and len(n) > len(best):
            best = n
    return best or tag


def line_bytes(line: str) -> int:
    """What a line costs the buffers: the bytes of the str object (a 16 KiB line the follower cut
    with "… N bytes cut" takes 32 KiB, not the 16 KiB of its UTF-8)."""
    return sys.getsizeof(line)


class SeverityLog(Log):
    """A ``Log`` that colours lines by severity and marks search matches; it holds at most
    ``max_lines`` lines and ``max_bytes`` bytes of them (the oldest go first)."""

    def __init__(self, *, max_lines: int, max_bytes: int, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, highlight=True, id=id)
        self._render_line_cache = LRUCache(RENDER_CACHE_LINES)
        self.highlighter = LogHighlighter()
        #: the line (index in the view) of the current match, or None
        self.current_line: int | None = None
        self.max_bytes = max_bytes
        #: the size of each line held, oldest first, and their sum
        self._sizes: deque[int] = deque()
        self.held_bytes = 0
        #: the widget's style during a render pass (see :attr:`rich_style`)
        self._pass_style: Style | None = None

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> Self:
        lines = [
            ln if len(ln) <= SHOW_CHARS else f"{ln[:SHOW_CHARS]} … {len(ln) - SHOW_CHARS} chars more" for ln in lines
        ]
        for line in lines:
            n = line_bytes(line)
            self._sizes.append(n)
            self.held_bytes += n
        super().write_lines(lines, scroll_end)
        self._forget(len(self._sizes) - len(self._lines))  # Log pruned to max_lines
        over, drop = self.held_bytes - self.max_bytes, 0
        while over > 0 and drop < len(self._sizes) - 1:
            over -= self._sizes[drop]
            drop += 1
        if drop:
            max_lines, self.max_lines = self.max_lines, len(self._lines) - drop
            try:
                self._prune_max_lines()
            finally:
                self.max_lines = max_lines
            self._forget(drop)
            self.virtual_size = Size(self._width, len(self._lines))
        return self

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]  # Log's is a thread worker
        """The width the new ``lines`` need, worked out now: ``Log`` measures them in a thread
        worker per batch (a thread hand-off and three worker messages), which cost a fast log
        more than the measuring. A printable ASCII line is as many cells as characters (the
        lines shown here are made safe: most are); any other is measured as ``Log`` does."""
        if lines:
            width = max(
                len(ln) if ln.isascii() and ln.isprintable() else cell_len(self._process_line(ln)) for ln in lines
            )
            self._update_maximum_width(updates, width)

    def ensure_width(self, cells: int) -> None:
        """Let the view scroll ``cells`` wide now: ``Log`` measures new lines in a thread, so a view
        just rebuilt (a new search) cannot yet scroll to a match near the end of a long line."""
        if cells > self._width:
            self._width = cells
            self.virtual_size = Size(cells, self.line_count)

    def _forget(self, n: int) -> None:
        for _ in range(max(0, n)):
            self.held_bytes -= self._sizes.popleft()

    def clear(self) -> Self:
        self._sizes.clear()
        self.held_bytes = 0
        return super().clear()

    def set_pattern(self, pattern: re.Pattern[str] | None) -> None:
        self.highlighter.pattern = pattern  # type: ignore[attr-defined]
        self._render_line_cache.clear()
        self.refresh()

    def set_current(self, y: int | None) -> None:
        if y != self.current_line:
            self.current_line = y
            self._render_line_cache.clear()
            self.refresh()

    @property
    def rich_style(self) -> Style:
        # Log asks for it once per line, and each time it is worked out from every ancestor's
        # styles (a quarter of the cost of a line): within one render pass it cannot change
        style = self._pass_style
        return style if style is not None else super().rich_style

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass_style = super().rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_style = None

    def _render_line_strip(self, y: int, rich_style: Any) -> Strip:
        hl = self.highlighter
        assert isinstance(hl, LogHighlighter)
        if hl.pattern is None and self.text_selection is None:
            # the common case (no search, no selection): the line's segments straight away, as
            # Text + highlighter + render would make them, at a seventh of the cost (a log
            # followed at 1,000 lines/s shows a new screenful twice a second)
            line = self._process_line(self._lines[y])
            sev, end, tag = hl.line_styles(line)
            base = rich_style + _style(sev) if sev else rich_style
            # only the characters that can be in view (each takes at least one cell): Rich keeps
            # the last 16,384 pieces it cut a line into (when a character in it is not
            # one-cell-only, e.g. "…"), and pieces of 2,000-character lines held 130 MB
            line = line[: self.scroll_offset.x + self.size.width]
            if tag:
                segments = [Segment(line[:end], base + _style(tag)), Segment(line[end:], base)]
            else:
                segments = [Segment(line, base)] if line else []
            return Strip(segments, cell_len(line))
        # Log caches rendered lines by y; the highlighter needs to know which y is current.
        self.highlighter.current = y == self.current_line  # type: ignore[attr-defined]
        try:
            return super()._render_line_strip(y, rich_style)
        finally:
            self.highlighter.current = False  # type: ignore[attr-defined]


__all__ = [
    "RENDER_CACHE_LINES",
    "SHOW_CHARS",
    "SeverityLog",
    "is_probe_line",
    "line_bytes",
    "line_severity",
    "tag_node",
]
