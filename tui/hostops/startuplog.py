"""A run's log as the startup tracker reads it: its parser (start-up and failures only) and,
for a view, the line splitter whose segments that parser reads, so each byte is split, decoded,
redacted and made safe once (:class:`StartupLog`)."""

from __future__ import annotations

from tunedeck.hostops.logfollow import LineSplitter
from tunedeck.logparse import LogEvent, LogParser
from tunedeck.logparse.decode import might_be_bom, sniff


class StartupLog:
    """Log bytes → the parser's events, and with ``lines=True`` the lines a view shows."""

    def __init__(self, engine: str | None, *, lines: bool = False) -> None:
        # its start-up and failures only: the figures of the stat lines (most of a serving log) are not read
        self.parser = LogParser(engine, stats=False)
        #: the view's line splitter, whose segments the parser reads (``lines=True``)
        self.splitter = LineSplitter(segments=self._segment) if lines else None
        #: the parser reads the splitter's segments: None until the log's first bytes tell
        #: whether it is UTF-8; a UTF-16 or UTF-32 log (its BOM says) is parsed from its bytes
        self._shared: bool | None = None
        self._first = b""
        self._segment_events: list[LogEvent] = []

    def feed(self, data: bytes) -> tuple[list[LogEvent], list[str]]:
        """Log bytes (any chunking): the new events, and the complete lines in them (none
        without ``lines=True``)."""
        sp = self.splitter
        if sp is None:
            return self.parser.feed(data), []
        events = self._raw(data)
        lines = sp.feed(data)  # the segments it ends are parsed as it goes (_segment)
        events += self._segment_events
        self._segment_events = []
        return events, lines

    def ended(self) -> list[LogEvent]:
        """The log will not grow any more: its last, unterminated line counts too."""
        return self.parser.ended(tail=self._tail())

    def flush(self) -> list[LogEvent]:
        return self.parser.flush(tail=self._tail())

    def _raw(self, data: bytes) -> list[LogEvent]:
        """What the parser reads of the raw bytes beside the splitter's segments: the start of the
        log, to judge it; all of it for a UTF-16 or UTF-32 log."""
        if self._shared is None:
            self._first += data
            if might_be_bom(self._first):
                return []  # one to three bytes that may yet be a BOM (no segment ends in them)
            data, self._first = self._first, b""
            self._shared = sniff(data[:4])[0] == "utf-8"
        if not self._shared:
            return self.parser.feed(data)
        self.parser.see(data)
        return []

    def _segment(self, text: str, cr: bool) -> None:
        if self._shared:
            self._segment_events += self.parser.feed_segment(text, cr)

    def _tail(self) -> str | None:
        """The unterminated segment for the parser's flush (None: the parser holds its own)."""
        if self.splitter is None or self._shared is False:
            return None
        return self.splitter.tail() if self._shared else ""


__all__ = ["StartupLog"]
