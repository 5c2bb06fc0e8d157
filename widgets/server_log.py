"""Live server log view: follow/pause, ``/`` search, n/N next/previous match,
filter to matching lines, severity colouring, bounded memory.

Feed it text lines with :meth:`ServerLog.append_lines` (any rate): they are
buffered and written to a ``Log(max_lines=…)`` in batches ~100 ms after their first line (every
500 ms while more than a screenful comes per batch), so thousands of lines per second cost one
refresh per batch, and a quiet log costs no timer at all. A ring buffer of the
last ``max_lines`` lines backs search and filter. Both the ring buffer and the view
are bounded in bytes too (``max_bytes`` each, the memory the str objects take): a log of huge
lines keeps fewer of them.
The lines come already made safe to show (``tunedeck.hostops.logfollow.LineSplitter``).
"""

from __future__ import annotations

import re
import time
from collections import deque
from typing import Iterable

from rich.cells import cell_len
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input, Static

from tunedeck.widgets.field_input import FieldInput
from tunedeck.widgets.severity_log import SeverityLog, is_probe_line, line_bytes, line_severity

#: The most memory the ring buffer's lines take (and the view's, each): a str costs what
#: ``sys.getsizeof`` says, 2 or 4 bytes a character once it holds one non-Latin-1 one (a line cut
#: with "…" is 2 bytes a character). Ten thousand lines of 300 ASCII characters fit.
MAX_BYTES = 4 * 1024 * 1024
#: seconds between batches while lines come faster than a screenful a batch: each such batch
#: scrolls (and renders again) every visible line, and nobody reads 10 screens a second
BUSY_FLUSH_S = 0.5


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
        #: the timer of the next batch (None: no line waits)
        self._flush_timer: Timer | None = None
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
        yield SeverityLog(max_lines=self.max_lines, max_bytes=self.max_bytes, id="log-view")
        yield Static("", id="log-partial")
        yield Static("", id="log-status")

    def on_mount(self) -> None:
        self._update_status()
        self._schedule_flush()

    @property
    def view(self) -> SeverityLog:
        return self.query_one("#log-view", SeverityLog)

    # ------------------------------------------------------------------ input
    def append_lines(self, lines: Iterable[str]) -> None:
        """Queue lines (without newlines); they appear at the next batch."""
        self._pending.extend(lines)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """A batch is due ``flush_interval`` after its first line (a quiet log costs no timer);
        while lines come faster than a screenful a batch, :data:`BUSY_FLUSH_S` after the last
        batch."""
        if self._flush_timer is not None or not self._pending or not self.is_mounted:
            return
        delay = self.flush_interval
        if len(self._pending) > self.size.height:
            delay = max(delay, self._flushed_at + BUSY_FLUSH_S - time.monotonic())
        self._flush_timer = self.set_timer(delay, self._flush_due, name="log-batch")

    def _flush_due(self) -> None:
        self._flush_timer = None
        self._flush()
        self._schedule_flush()  # lines that stayed (a fast log's batch not yet due)

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
            n = line_bytes(line)
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


__all__ = ["ServerLog"]
