"""The base of the screens drawn live from the app's newest snapshots (the status screen of one
host, the fleet screen of several).

While another screen is shown such a screen skips drawing and marks itself dirty; when it comes
back it redraws once from the newest snapshots. Its fast feed is drawn at most every
:attr:`LiveScreen.MIN_REDRAW` seconds: a burst leaves one pending draw, of the newest snapshot.
Its tables pick the columns that fit the terminal's width, on resize and when it comes back.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from textual import events
from textual.screen import Screen


class LiveScreen(Screen[None]):
    """A screen that follows the app's snapshots; a subclass draws (:meth:`redraw`,
    :meth:`draw_feed`, both setting :attr:`_last_draw`) and names its tables (:meth:`fit_tables`)."""

    MIN_REDRAW = 0.5
    """Seconds between two draws of the fast feed (a faster feed is coalesced)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dirty = False
        self._last_draw = 0.0
        self._draw_pending = False

    def redraw(self) -> None:
        """Draw everything from the app's newest snapshots."""
        raise NotImplementedError

    def draw_feed(self) -> None:
        """Draw the fast feed from the app's newest snapshot."""
        raise NotImplementedError

    def fit_tables(self) -> Sequence[Any]:
        """The tables that pick their columns by the width (each has ``fit(width)``)."""
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        self._fit(self.app.size.width)
        if self._dirty:
            self.redraw()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        for table in self.fit_tables():
            if table.is_mounted:
                table.fit(width)

    def _visible(self) -> bool:
        """True when the screen is shown; else it is marked to redraw when it comes back."""
        if self.is_current:
            return True
        self._dirty = True
        return False

    def feed_changed(self, at_once: bool = False) -> None:
        """The fast feed has news: drawn now when the last draw is :attr:`MIN_REDRAW` old (or
        ``at_once``), else once when it will be."""
        if not self._visible():
            return
        wait = self._last_draw + self.MIN_REDRAW - time.monotonic()
        if wait <= 0 or at_once:
            self.draw_feed()
        elif not self._draw_pending:
            self._draw_pending = True
            self.set_timer(wait, self._draw_pending_now)

    def _draw_pending_now(self) -> None:
        self._draw_pending = False
        if self._visible():
            self.draw_feed()


__all__ = ["LiveScreen"]
