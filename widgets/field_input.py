"""``FieldInput``: an :class:`~textual.widgets.Input` whose editing keys act in the order typed.

Textual inserts a printable key in the Input's own key handler, but runs the Input's editing
keys (backspace, delete, the cursor moves, ctrl+u …) as bindings, after the key event has
bubbled up to the screen and the app. Keys that arrive together (a fast typist, ``tmux
send-keys``, a terminal that batches input) are therefore applied out of order: backspace, 1, 6
into a field holding 8 inserts 1 and 6 first and then deletes the 6, leaving ``1``. Here the
editing keys run in the key handler too, so every key acts in the order it was typed.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.widgets import Input

#: key → action of Input's own bindings, but enter (its submit bubbles as before)
_EDIT_KEYS: dict[str, str] = {
    key.strip(): b.action
    for b in Input.BINDINGS
    if isinstance(b, Binding) and b.action != "submit"
    for key in b.key.split(",")
}


class FieldInput(Input):
    """An Input that never reorders (and so never drops) keys typed in a burst."""

    EDIT_KEYS: ClassVar[dict[str, str]] = _EDIT_KEYS
    """The editing keys run at once, in order with the characters (Input's bindings but enter)."""

    async def _on_key(self, event: events.Key) -> None:
        action = self.EDIT_KEYS.get(event.key)
        if action is None:
            await super()._on_key(event)
            return
        event.stop()
        event.prevent_default()
        self._restart_blink()
        await self.run_action(action)


__all__ = ["FieldInput"]
