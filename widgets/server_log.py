"""Live server log view: follow/pause, ``/`` search, n/N next/previous match,
filter to matching lines, severity colouring, bounded memory.

Feed it text lines with :meth:`ServerLog.append_lines` (any rate): they are
buffered and written to a ``Log(max_lines=…)`` in batches every ~100 ms, so
thousands of lines per second cost one refresh per batch. A ring buffer of the
last ``max_lines`` lines backs search and filter.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Iterable

from rich.highlighter import Highlighter
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Log, Static

_ERROR_RE = re.compile(
    r"\bERROR\b|\bCRITICAL\b|Traceback \(most recent call last\)|^\S*(?:Error|Exception)\b|"
    r"\b\w+(?:Error|Exception): |NCCL WARN|^Killed$"
)
_WARN_RE = re.compile(r"\bWARNING\b|\bWARN\b|Warning:")


def line_severity(line: str) -> str:
    """'error' | 'warning' | 'info' (by the first 200 characters)."""
    head = line[:200]
    if _ERROR_RE.search(head):
        return "error"
    if _WARN_RE.search(head):
        return "warning"
    return "info"


class _LogHighlighter(Highlighter):
    """Whole-line severity colour plus the search matches."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None

    def highlight(self, text: Text) -> None:
        sev = line_severity(text.plain)
        if sev == "error":
            text.stylize("bold red")
        elif sev == "warning":
            text.stylize("yellow")
        if self.pattern is not None:
            for m in self.pattern.finditer(text.plain):
                if m.end() > m.start():
                    text.stylize("reverse", m.start(), m.end())


class _SeverityLog(Log):
    """A ``Log`` that colours lines by severity and marks search matches."""

    def __init__(self, *, max_lines: int, id: str | None = None) -> None:  # noqa: A002
        super().__init__(max_lines=max_lines, highlight=True, id=id)
        self.highlighter = _LogHighlighter()

    def set_pattern(self, pattern: re.Pattern[str] | None) -> None:
        self.highlighter.pattern = pattern  # type: ignore[attr-defined]
        self._render_line_cache.clear()
        self.refresh()


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
        Binding("m", "toggle_filter", "Filter", id="log-filter"),
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
        flush_interval: float = 0.1,
        name: str | None = None,
        id: str | None = None,  # noqa: A002
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.max_lines = max_lines
        self.flush_interval = flush_interval
        #: every line kept (the ring buffer)
        self.ring: deque[str] = deque(maxlen=max_lines)
        self._pending: list[str] = []
        self.following = True
        self.filtering = False
        self.pattern: re.Pattern[str] | None = None
        self.query_text = ""
        self.matches: list[int] = []  # line indices in the view
        self.match_index = -1
        self.total_lines = 0
        self.partial = ""

    def compose(self) -> ComposeResult:
        yield Input(placeholder="search (regular expression; Enter to apply, Esc to clear)", id="log-search")
        yield _SeverityLog(max_lines=self.max_lines, id="log-view")
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
        self.partial = text
        self.set_class(bool(text), "-partial")
        self.query_one("#log-partial", Static).update(Text(text, style="dim", no_wrap=True, overflow="ellipsis"))

    def append_text(self, text: str) -> None:
        self.append_lines(text.splitlines())

    def _flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self.ring.extend(batch)
        self.total_lines += len(batch)
        shown = batch
        if self.filtering and self.pattern is not None:
            shown = [ln for ln in batch if self.pattern.search(ln)]
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

    def flush_now(self) -> None:
        """Write queued lines immediately (tests, shutdown)."""
        self._flush()

    # ------------------------------------------------------------------ actions
    def action_search(self) -> None:
        self.add_class("-searching")
        inp = self.query_one("#log-search", Input)
        inp.value = self.query_text
        inp.focus()

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
        self.remove_class("-searching")
        self.set_search(event.value)
        self.focus()

    def set_search(self, text: str) -> None:
        """Search for ``text`` (a regular expression; plain text when it does not compile)."""
        self.query_text = text
        if not text:
            self.pattern = None
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

    def _rebuild(self) -> None:
        """Rewrite the view from the ring buffer (filter changed) and recompute matches."""
        self.flush_now()
        view = self.view
        view.set_pattern(self.pattern)
        if self.filtering:
            view.clear()
            lines = list(self.ring) if self.pattern is None else [ln for ln in self.ring if self.pattern.search(ln)]
            view.write_lines(lines, scroll_end=self.following)
        elif view.line_count != len(self.ring):
            view.clear()
            view.write_lines(list(self.ring), scroll_end=self.following)
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
        view.scroll_to(y=max(0, y - view.size.height // 2), animate=False, immediate=True)
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
        self.filtering = not self.filtering
        self._rebuild()
        self._update_status()

    # ------------------------------------------------------------------ status
    def _update_status(self) -> None:
        try:
            status = self.query_one("#log-status", Static)
        except Exception:  # noqa: BLE001 - not composed yet
            return
        parts = ["following" if self.following else "paused (f: follow)"]
        parts.append(f"{len(self.ring)} lines" + (f" of {self.total_lines}" if self.total_lines > len(self.ring) else ""))
        if self.pattern is not None:
            pos = f"{self.match_index + 1}/{len(self.matches)}" if self.match_index >= 0 else f"{len(self.matches)}"
            parts.append(f"/{self.query_text}  {pos} matches (n/N)")
        if self.filtering:
            parts.append("filter on (m)")
        status.update("  ·  ".join(parts))

    @property
    def status_text(self) -> str:
        return str(self.query_one("#log-status", Static).content)


__all__ = ["ServerLog", "line_severity"]
