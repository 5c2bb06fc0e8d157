"""The smallest app around one screen, for Pilot tests of that screen."""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.screen import Screen


class ScreenApp(App[None]):
    """Shows ``screen`` and nothing else. ``messages`` collects what the app handles when the test
    asks for it (``run_test(message_hook=app.messages.append)``); ``host`` and ``target``, when
    given, are where the screen's actions go, as on the dashboard."""

    def __init__(self, screen: Screen[Any], *, host: Any = None, target: str | None = None) -> None:
        super().__init__()
        self.first = screen
        self.messages: list[Any] = []
        if host is not None:
            self.host = host
            self.target = target

    def on_mount(self) -> None:
        self.push_screen(self.first)
