"""What a mode shows when its screen could not be loaded: the failure in one line and where its
traceback is, instead of a key that silently does nothing."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from tunedeck.util.logs import LOG_NAME
from tunedeck.util.paths import state_dir


class ScreenFailed(Screen[None]):
    """Stands in for a mode screen whose module failed to import (see ``tunedeck.ui.modes.screen_factory``)."""

    DEFAULT_CSS = """
    ScreenFailed > Vertical { padding: 1 2; }
    ScreenFailed #failed-title { text-style: bold; color: $error; }
    """

    def __init__(self, spec: str, failure: str) -> None:
        super().__init__()
        #: the screen's import path (``module:Class``)
        self.spec = spec
        #: ``ExceptionType: message`` of the import failure
        self.failure = failure

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"This screen could not be loaded ({self.spec}).", id="failed-title", markup=False)
            yield Static(self.failure, id="failed-error", markup=False)
            yield Static(
                f"The traceback is in {state_dir() / LOG_NAME}; the other screens work as before.",
                id="failed-where",
                markup=False,
            )
        yield Footer()
