"""A ``Static`` that redraws exactly when its whole-second countdown changes."""

from __future__ import annotations

import math

from textual.timer import Timer
from textual.widgets import Static


class CountdownStatic(Static):
    """Subclasses implement :meth:`text` and :meth:`deadline`; the widget re-renders when
    the displayed number of seconds changes (a timer aligned to the second boundary, not a
    free-running interval), and not at all while there is no deadline."""

    _countdown_timer: Timer | None = None

    def text(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def deadline(self) -> float | None:
        """Seconds left until the event counted down to, or None."""
        return None

    def shown(self, text: str) -> None:
        """Hook: called with the new text (to set classes)."""

    def tick(self) -> None:
        """Redraw now and arm the timer for the next whole-second change."""
        if self._countdown_timer is not None:
            self._countdown_timer.stop()
            self._countdown_timer = None
        text = self.text()
        self.shown(text)
        if text != str(self.content):
            self.update(text)
        left = self.deadline()
        if left is not None and left > 0 and self.is_mounted:
            frac = left - math.floor(left)
            self._countdown_timer = self.set_timer((frac if frac > 0.001 else 1.0) + 0.005, self.tick)
