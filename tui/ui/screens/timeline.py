"""TimelineScreen: one stored result's timeline, opened from the Bench mode's results (``t``).

The same stacked charts as the Bench screen (client tok/s, KV cache, queue, SM clock,
power on one time axis) and the level's validity findings, read from the result's
``timeline.jsonl`` and ``summary.json`` in the local results store (a host-side run's
folders are mirrored there). A result measured without a host-side timeline says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer

from tunedeck.timeline_model import TimelineSnapshot, figure
from tunedeck.ui.bindings import back
from tunedeck.widgets.timeline_charts import TimelinePanel


class TimelineScreen(Screen[None]):
    """The timeline of the stored result ``run_id``."""

    BINDINGS = [back("timeline")]

    DEFAULT_CSS = """
    TimelineScreen TimelinePanel { padding: 0 1; }
    """

    @dataclass
    class Loaded(Message):
        """The result's timeline was read (``error``: why it could not be)."""

        snapshot: TimelineSnapshot | None
        """The stored rows and validity findings."""
        error: str = ""
        """Why nothing was read."""

    def __init__(self, run_id: str, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self.run_id = run_id
        """The result shown."""
        self.snapshot: TimelineSnapshot | None = None
        """What was read (None until then, or when it could not be)."""

    def compose(self) -> ComposeResult:
        yield TimelinePanel(f"reading the timeline of {self.run_id}…")
        yield Footer()

    def on_mount(self) -> None:
        self._load()

    @work(group="timeline-load", thread=True, exit_on_error=False)
    def _load(self) -> None:
        from tunedeck.bench.store import StoreError
        from tunedeck.services.timelines import stored_timeline

        try:
            snap = stored_timeline(self.run_id)
        except (StoreError, OSError) as e:
            self.post_message(self.Loaded(None, str(e)))
            return
        self.post_message(self.Loaded(snap))

    def on_timeline_screen_loaded(self, event: "TimelineScreen.Loaded") -> None:
        panel = self.query_one(TimelinePanel)
        self.snapshot = event.snapshot
        cap = Text()
        cap.append("timeline ", style="bold")
        cap.append(self.run_id)
        if event.snapshot is None:
            cap.append(f": {event.error}", style="bold red")  # a path or an OS message: never markup
            panel.show(None, cap)
            return
        if event.snapshot.label != self.run_id:
            cap.append(f" · {event.snapshot.label}")
        if event.snapshot.measures:
            cap.append(f"\n{event.snapshot.measures}")
        cap.append(" · x: s into the timed phase", style="dim")
        panel.show(figure(event.snapshot), cap)
        panel.redraw()

    def action_close(self) -> None:
        self.dismiss()


__all__ = ["TimelineScreen"]
