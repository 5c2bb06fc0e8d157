"""The one yes/no dialog every screen uses.

Cancel is the default: it has the focus when the dialog opens, so ``enter`` (or ``escape``, or
``n``) never does the dangerous thing. Only ``y`` or a click on the action button confirms.
The question is plain text (never parsed as markup: it often quotes paths, names and errors).
"""

from __future__ import annotations

from typing import Any, Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmModal(ModalScreen[bool]):
    """Ask one question; dismiss with True only when the user confirms.

    ``action`` labels the confirm button ("Stop", "Launch anyway", "Discard"), ``cancel`` the other one.
    ``danger`` colours the confirm button red instead of yellow."""

    DEFAULT_CSS = """
    ConfirmModal { align: center middle; }
    ConfirmModal > Vertical { width: 76; max-width: 100%; height: auto; max-height: 100%;
                              border: thick $warning; background: $surface; padding: 1 2; }
    ConfirmModal #confirm-title { width: 100%; text-style: bold; }
    ConfirmModal #confirm-question { width: 100%; }
    ConfirmModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ConfirmModal Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Confirm", id="confirm-yes"),
        Binding("n,escape", "answer(False)", "Cancel", id="confirm-no"),
    ]

    def __init__(
        self, question: str, *, title: str = "", action: str = "Confirm", cancel: str = "Cancel", danger: bool = False
    ) -> None:
        super().__init__()
        #: the question, shown as plain text
        self.question = question
        #: a bold first line (optional)
        self.title_text = title
        #: the confirm button's label
        self.action_label = action
        #: the cancel button's label
        self.cancel_label = cancel
        #: True: the confirm button is red (stopping, discarding)
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical():
            if self.title_text:
                yield Label(Text(self.title_text), id="confirm-title")
            yield Label(Text(self.question), id="confirm-question")
            with Horizontal():
                yield Button(f"{self.cancel_label} (n)", id="confirm-cancel")
                yield Button(f"{self.action_label} (y)", id="confirm-ok", variant="error" if self.danger else "warning")

    def on_mount(self) -> None:
        self.query_one("#confirm-cancel", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, ev: Button.Pressed) -> None:
        ev.stop()
        self.dismiss(ev.button.id == "confirm-ok")


def confirm_stop(screen: Any, question: str, *, title: str, grace: float, then: Callable[[], object]) -> None:
    """Ask on ``screen`` before stopping processes (TERM, then KILL after ``grace`` seconds: the
    question says so); ``then()`` runs once the user confirms."""

    def done(ok: bool | None) -> None:
        if ok:
            then()

    modal = ConfirmModal(f"{question}\nTERM, then KILL after {grace:g} s.", title=title, action="Stop", danger=True)
    screen.app.push_screen(modal, done)


class KeysModal(ModalScreen[None]):
    """``?``: every key of the screen underneath, what it does, and why (k9s style).

    The rows are computed by the caller from the active bindings before this screen is pushed
    (once pushed, the active bindings are this modal's own)."""

    DEFAULT_CSS = """
    KeysModal { align: center middle; }
    KeysModal > Vertical { width: 90; max-width: 100%; height: auto; max-height: 100%;
                           border: thick $primary; background: $surface; padding: 0 1; }
    KeysModal #keys-title { text-style: bold; width: 100%; }
    KeysModal #keys-body { height: auto; max-height: 100%; }
    KeysModal #keys-hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "dismiss_keys", "Close", id="keys-close")]

    def __init__(self, title: str, rows: list[tuple[str, str, str, bool]]) -> None:
        super().__init__()
        #: the screen the keys belong to
        self.title_text = title
        #: (key, description, tooltip, enabled now)
        self.rows = rows

    def compose(self) -> ComposeResult:
        from textual.containers import VerticalScroll
        from textual.widgets import Static

        with Vertical():
            yield Label(Text(f"Keys: {self.title_text}"), id="keys-title")
            from rich.table import Table

            body = Table(box=None, show_header=False, padding=(0, 1), expand=True)
            body.add_column("key", no_wrap=True, style="bold")
            body.add_column("what", no_wrap=True)
            body.add_column("why", ratio=1, style="dim")
            for key, desc, tip, enabled in self.rows:
                why = tip if tip and tip != desc else ""
                if not enabled:
                    why = f"{why} (not now)".strip()
                body.add_row(Text(key), Text(desc, style="" if enabled else "dim"), Text(why))
            with VerticalScroll(id="keys-body"):
                yield Static(body)
            yield Label("escape or ? closes · ctrl+p lists the same as commands", id="keys-hint")

    def action_dismiss_keys(self) -> None:
        self.dismiss(None)


__all__ = ["ConfirmModal", "KeysModal"]
