"""Live server log view: follow/pause, ``/`` search, n/N next/previous match,
filter to matching lines, severity colouring, bounded memory.

Feed it text lines with :meth:`ServerLog.append_lines` (any rate): they are
buffered and written to a ``Log(max_lines=…)`` in batches every ~100 ms (every 500 ms
while more than a screenful comes per batch), so thousands of lines per second cost one
refresh per batch. A ring buffer of the
last ``max_lines`` lines backs search and filter. Both the ring buffer and the view
are bounded in bytes too (``max_bytes`` each, the memory the str objects take): a log of huge
lines keeps fewer of them.
The lines come already made safe to show (``tui.hostops.logfollow.LineSplitter``).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections import deque
from typing import Any, Iterable, Self

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.cache import LRUCache
from textual.css.query import NoMatches
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Log, Static

from widgets.field_input import FieldInput

_ERROR_RE = re.compile(
    r"\bERROR\b|\bCRITICAL\b|Traceback \(most recent call last\)|^\S*(?:Error|Exception)\b|"
    r"\b\w+(?:Error|Exception): |NCCL WARN|^Killed$"
)
_WARN_RE = re.compile(r"\bWARNING\b|\bWARN\b|Warning:")


#: The most memory the ring buffer's lines take (and the view's, each): a str costs what
#: ``sys.getsizeof`` says, 2 or 4 bytes a character once it holds one non-Latin-1 one (a line cut
#: with "…" is 2 bytes a character). Ten thousand lines of 300 ASCII characters fit.
MAX_BYTES = 4 * 1024 * 1024
#: a line longer than this is shown cut (the buffer keeps up to the follower's 16 KiB of it): a
#: terminal shows ~200 columns, and each shown line is rendered, styled and cached whole
SHOW_CHARS = 2048
#: rendered lines kept (Textual's Log keeps 1,024; a screen shows a few dozen)
RENDER_CACHE_LINES = 256
#: seconds between batches while lines come faster than a screenful a batch: each such batch
#: scrolls (and renders again) every visible line, and nobody reads 10 screens a second
BUSY_FLUSH_S = 0.5


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


class _LogHighlighter(Highlighter):
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


def _size(line: str) -> int:
    """What a line costs the buffers: the bytes of the str object (a 16 KiB line the follower cut
    with "… N bytes cut" takes 32 KiB, not the 16 KiB of its UTF-8)."""
    return sys.getsizeof(line)


class _SeverityLog(Log):
    """A ``Log`` that colours lines by severity and marks search matches; it holds at most
    ``max_lines`` lines and ``max_bytes`` bytes of them (the oldest go first)."""

    def __init__(self, *, max_lines: int, max_bytes: int, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, highlight=True, id=id)
        self._render_line_cache = LRUCache(RENDER_CACHE_LINES)
        self.highlighter = _LogHighlighter()
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
            n = _size(line)
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
        assert isinstance(hl, _LogHighlighter)
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


class _SearchInput(FieldInput):
    """The search box; remembers the last key it saw itself (see :meth:`ServerLog.on_key`)."""

    last_key: events.Key | None = None

    async def _on_key(self, event: events.Key) -> None:
        self.last_key = event
        await super()._on_key(event)


class ServerLog(Widget, can_focus=True):
    """A server's log output with follow, search and filter."""

    DEFAULT_CSS = """
    ServerLog {
        height: 1fr;
        layout: vertical;
    }
    ServerLog > #log-view {
        height: 1fr;
        border: none;
    }
    ServerLog > #log-search {
        display: none;
        height: 3;
    }
    ServerLog.-searching > #log-search {
        display: block;
    }
    ServerLog > #log-partial {
        height: auto;
        max-height: 1;
        display: none;
        color: $text-muted;
    }
    ServerLog.-partial > #log-partial {
        display: block;
    }
    ServerLog > #log-status {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    """

    BINDINGS = [
        Binding("slash", "search", "Search", id="log-search"),
        Binding("n", "next_match", "Next", id="log-next-match"),
        Binding("N", "previous_match", "Previous", id="log-previous-match"),
        Binding("f", "toggle_follow", "Follow/Pause", id="log-follow"),
        Binding("m", "toggle_filter", "Filter", tooltip="Show only the lines matching the search", id="log-filter"),
        Binding(
            "e",
            "first_error",
            "First error",
            tooltip="Jump to the first ERROR line (again: the next one)",
            id="log-first-error",
        ),
        Binding(
            "h", "toggle_probes", "Polls", tooltip="Show or hide the /health and /metrics access lines", id="log-probes"
        ),
        Binding("escape", "clear_search", "Clear search", show=False, id="log-clear-search"),
    ]

    class FollowChanged(Message):
        """Follow was switched on or off."""

        def __init__(self, log: "ServerLog", following: bool) -> None:
            super().__init__()
            #: the log widget
            self.log = log
            #: True when the view sticks to the end
            self.following = following

    def __init__(
        self,
        *,
        max_lines: int = 10_000,
        max_bytes: int = MAX_BYTES,
        flush_interval: float = 0.1,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.flush_interval = flush_interval
        #: every line kept (the ring buffer): at most ``max_lines`` lines and ``max_bytes`` bytes
        self.ring: deque[str] = deque()
        self._ring_sizes: deque[int] = deque()
        #: the bytes of the lines in the ring buffer
        self.ring_bytes = 0
        self._pending: list[str] = []
        #: when the last batch was written (time.monotonic())
        self._flushed_at = 0.0
        self.following = True
        self.filtering = False
        self.pattern: re.Pattern[str] | None = None
        self.query_text = ""
        self.matches: list[int] = []  # line indices in the view
        self.match_index = -1
        self.total_lines = 0
        self.partial = ""
        #: the status line's text as last shown
        self._status = ""
        #: hide the access-log lines of tunedeck's own /health and /metrics polls
        self.hide_probes = True
        #: lines hidden as polls (in the ring buffer)
        self.hidden_probes = 0
        #: the view line of the error ``e`` jumped to last
        self.error_line: int | None = None

    def compose(self) -> ComposeResult:
        yield _SearchInput(placeholder="search (regular expression; Enter to apply, Esc to clear)", id="log-search")
        yield _SeverityLog(max_lines=self.max_lines, max_bytes=self.max_bytes, id="log-view")
        yield Static("", id="log-partial")
        yield Static("", id="log-status")

    def on_mount(self) -> None:
        self.set_interval(self.flush_interval, self._flush)
        self._update_status()

    @property
    def view(self) -> _SeverityLog:
        return self.query_one("#log-view", _SeverityLog)

    # ------------------------------------------------------------------ input
    def append_lines(self, lines: Iterable[str]) -> None:
        """Queue lines (without newlines); they appear at the next batch."""
        self._pending.extend(lines)

    def set_partial(self, text: str) -> None:
        """Show an unterminated last line (a progress bar being redrawn) below the log;
        it is not part of the log until its newline arrives."""
        if text == self.partial:
            return  # at 1,000 lines a second most chunks end their lines: no repaint for nothing
        try:
            shown = self.query_one("#log-partial", Static)
        except NoMatches:  # not composed yet, or being removed
            return
        self.partial = text
        self.set_class(bool(text), "-partial")
        # one row (no wrap, at most 1 high): its text changes, its size does not
        shown.update(Text(text, style="dim", no_wrap=True, overflow="ellipsis"), layout=False)

    def append_text(self, text: str) -> None:
        self.append_lines(text.splitlines())

    def _flush(self, force: bool = False) -> None:
        if not self._pending:
            return
        now = time.monotonic()
        if not force and len(self._pending) > self.size.height and now - self._flushed_at < BUSY_FLUSH_S:
            return  # a fast log: fewer, bigger batches (see BUSY_FLUSH_S)
        self._flushed_at = now
        batch, self._pending = self._pending, []
        self._keep(batch)
        self.total_lines += len(batch)
        shown = self._visible(batch)
        if shown:
            view = self.view
            before = view.line_count
            view.write_lines(shown, scroll_end=False)
            if self.following:
                view.scroll_end(animate=False, immediate=True, x_axis=False)
            if self.pattern is not None and not self.filtering:
                # keep match indices valid after pruning, and add new matches
                pruned = before + len(shown) - view.line_count
                if pruned:
                    self.matches = [i - pruned for i in self.matches if i - pruned >= 0]
                    self.match_index = min(self.match_index, len(self.matches) - 1)
                base = view.line_count - len(shown)
                self.matches.extend(base + i for i, ln in enumerate(shown) if self.pattern.search(ln))
        self._update_status()

    def _keep(self, batch: list[str]) -> None:
        """Add ``batch`` to the ring buffer, dropping the oldest lines beyond its bounds."""
        ring, sizes = self.ring, self._ring_sizes
        for line in batch:
            n = _size(line)
            ring.append(line)
            sizes.append(n)
            self.ring_bytes += n
        while len(ring) > 1 and (len(ring) > self.max_lines or self.ring_bytes > self.max_bytes):
            ring.popleft()
            self.ring_bytes -= sizes.popleft()

    def flush_now(self) -> None:
        """Write queued lines immediately (tests, shutdown)."""
        self._flush(force=True)

    # ------------------------------------------------------------------ actions
    def action_search(self) -> None:
        self.add_class("-searching")
        inp = self.query_one("#log-search", Input)
        inp.value = self.query_text
        inp.cursor_position = len(inp.value)
        inp.focus()

    def on_key(self, event: events.Key) -> None:
        """Typing goes to the search box from the first key after ``/``.

        Keys typed in one burst after ``/`` are already queued here (the focus moves to the
        search box a moment later): while the search box is open they are handed to it instead
        of running as commands (``/Uvicorn`` must not switch to Compare on ``c``)."""
        if not self.has_class("-searching"):
            if event.key == "slash" and self.has_focus:
                event.stop()
                event.prevent_default()
                self.action_search()
            return
        inp = self.query_one("#log-search", _SearchInput)
        if event is inp.last_key:
            return  # typed into the focused search box: its own bindings apply
        event.stop()
        event.prevent_default()
        if event.key == "enter":
            self._submit_search(inp.value)
        elif event.key == "escape":
            self.action_clear_search()
        elif event.key == "backspace":
            inp.action_delete_left()
        elif event.is_printable and event.character:
            inp.insert_text_at_cursor(event.character)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_search":
            # escape only clears a search; with none it reaches the screen ("Back")
            return self.has_class("-searching") or self.pattern is not None
        return True

    def action_clear_search(self) -> None:
        self.remove_class("-searching")
        if self.pattern is not None:
            self.set_search("")
        self.focus()

    @on(Input.Submitted, "#log-search")
    def _on_search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._submit_search(event.value)

    def _submit_search(self, text: str) -> None:
        self.remove_class("-searching")
        self.set_search(text)
        self.focus()

    def set_search(self, text: str) -> None:
        """Search for ``text`` (a regular expression; plain text when it does not compile)."""
        self.query_text = text
        if not text:
            self.pattern = None
            self.filtering = False
        else:
            try:
                self.pattern = re.compile(text, re.IGNORECASE)
            except re.error:
                self.pattern = re.compile(re.escape(text), re.IGNORECASE)
        self._rebuild()
        if self.matches:
            self.match_index = -1
            self.action_next_match()
        self._update_status()

    def _visible(self, lines: list[str]) -> list[str]:
        """The lines the view shows: polls hidden (unless ``h``), the filter applied."""
        out = lines
        if self.hide_probes:
            out = [ln for ln in out if not is_probe_line(ln)]
            self.hidden_probes += len(lines) - len(out)
        if self.filtering and self.pattern is not None:
            out = [ln for ln in out if self.pattern.search(ln)]
        return out

    def _rebuild(self) -> None:
        """Rewrite the view from the ring buffer (filter changed) and recompute matches."""
        self.flush_now()
        view = self.view
        view.set_pattern(self.pattern)
        view.set_current(None)
        self.hidden_probes = 0
        lines = self._visible(list(self.ring))
        if view.line_count != len(lines) or self.filtering or self.hide_probes:
            view.clear()
            view.write_lines(lines, scroll_end=self.following)
        self.matches = (
            [i for i, ln in enumerate(view.lines) if self.pattern.search(ln)] if self.pattern is not None else []
        )
        self.match_index = -1

    def action_next_match(self) -> None:
        self._goto(1)

    def action_previous_match(self) -> None:
        self._goto(-1)

    def _goto(self, step: int) -> None:
        if not self.matches:
            self._update_status()
            return
        if self.match_index < 0:
            self.match_index = 0 if step > 0 else len(self.matches) - 1
        else:
            self.match_index = (self.match_index + step) % len(self.matches)
        self.set_following(False)
        y = self.matches[self.match_index]
        view = self.view
        view.set_current(y)
        view.scroll_to(x=self._match_x(y), y=max(0, y - view.size.height // 2), animate=False, immediate=True)
        self._update_status()

    def _match_x(self, y: int) -> int:
        """The horizontal scroll that shows line ``y``'s match: none while it fits in the view,
        else the match a third of the way in (a match past the right edge is never invisible)."""
        view = self.view
        m = self.pattern.search(view.lines[y]) if self.pattern is not None and y < len(view.lines) else None
        width = max(1, view.scrollable_content_region.width)
        if m is None or m.end() <= width:
            return 0
        view.ensure_width(cell_len(view.lines[y][: m.end()]) + 1)
        return max(0, m.start() - width // 3)

    def action_first_error(self) -> None:
        """Jump to the first ERROR line; pressed again, to the next one (wraps)."""
        self.flush_now()
        view = self.view
        errors = [i for i, ln in enumerate(view.lines) if line_severity(ln) == "error"]
        if not errors:
            self.notify("no error lines in the log", severity="information", timeout=3)
            return
        after = [i for i in errors if self.error_line is None or i > self.error_line]
        y = after[0] if after else errors[0]
        self.error_line = y
        self.set_following(False)
        view.set_current(y)
        view.scroll_to(y=max(0, y - view.size.height // 2), animate=False, immediate=True)
        self._update_status()

    def action_toggle_probes(self) -> None:
        self.hide_probes = not self.hide_probes
        self._rebuild()
        self._update_status()

    @property
    def current_match_line(self) -> int | None:
        if 0 <= self.match_index < len(self.matches):
            return self.matches[self.match_index]
        return None

    def action_toggle_follow(self) -> None:
        self.set_following(not self.following)
        if self.following:
            self.view.scroll_end(animate=False, immediate=True)

    def set_following(self, on: bool) -> None:
        if on != self.following:
            self.following = on
            self.view.auto_scroll = on
            self.post_message(self.FollowChanged(self, on))
            self._update_status()

    def action_toggle_filter(self) -> None:
        if not self.filtering and self.pattern is None:
            self.notify(
                "nothing to filter on: search first (/), then m shows only the matching lines",
                severity="warning",
                timeout=4,
            )
            return
        self.filtering = not self.filtering
        self._rebuild()
        self._update_status()

    # ------------------------------------------------------------------ status
    def _update_status(self) -> None:
        try:
            status = self.query_one("#log-status", Static)
        except NoMatches:  # not composed yet
            return
        parts = ["following" if self.following else "paused (f: follow)"]
        parts.append(
            f"{len(self.ring)} lines" + (f" of {self.total_lines}" if self.total_lines > len(self.ring) else "")
        )
        if self.pattern is not None:
            pos = f"{self.match_index + 1}/{len(self.matches)}" if self.match_index >= 0 else f"{len(self.matches)}"
            parts.append(f"/{self.query_text}  {pos} matches (n/N)")
        if self.filtering and self.pattern is not None:
            parts.append("only matching lines (m: all)")
        if self.hide_probes and self.hidden_probes:
            parts.append(f"{self.hidden_probes} /health, /metrics lines hidden (h)")
        text = "  ·  ".join(parts)
        if text != self._status:
            self._status = text
            # one row of fixed height: a new count repaints that row, not the screen's layout
            status.update(text, layout=False)

    @property
    def status_text(self) -> str:
        return str(self.query_one("#log-status", Static).content)


__all__ = ["ServerLog", "is_probe_line", "line_severity", "tag_node"]
