"""The base of the screens that work on the dashboard's host: the profile list, the launch form
and the benchmark set-up.

``host`` and ``demo`` stay keywords of each subclass's constructor: a mode's screen gets the
app's host and demo flag through them (:func:`tunedeck.ui.modes.screen_factory` reads the
signature).
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen


class HostScreen(Screen[None]):
    """A screen that acts on :attr:`host` (None: no host chosen yet), or on the demo."""

    def __init__(self, *, host: Any = None, demo: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.host = host
        """The host the screen acts on (a :class:`tunedeck.hostops.hosts.Host`), or None."""
        self.demo = demo
        """True on the demo host (simulated GPUs and engines)."""


__all__ = ["HostScreen"]
