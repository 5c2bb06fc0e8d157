"""No key is dropped or reordered: keys that arrive together (``tmux send-keys``, a fast typist)
are posted to the app at once, as the terminal driver does, into every field of the launch form,
right after it opens and again after the first change (where backspace, 1, 6 into TP once gave
``1``)."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.widgets import Input

from tests.snapshot_app import _settled, _until, base_app
from tunedeck.widgets.field_input import FieldInput

pytestmark = pytest.mark.timeout(120)

_CHAR_KEYS = {" ": "space", "-": "minus", "=": "equals_sign", "/": "slash", ".": "full_stop"}


def burst(app: Any, keys: list[str], text: str) -> None:
    """``keys`` (editing keys) then ``text``, every one posted before any is handled."""
    for k in keys:
        app.post_message(events.Key(k, None))
    for ch in text:
        app.post_message(events.Key(_CHAR_KEYS.get(ch, ch), ch))


async def _retype(app: Any, pilot: Any, field: Input, text: str) -> None:
    app.set_focus(field)
    await pilot.pause(0.05)
    assert app.focused is field, field.id
    burst(app, ["end", *["backspace"] * len(field.value)], text)
    await _until(pilot, lambda: field.value == text, timeout=5)


async def test_every_launch_form_field_gets_every_key_of_a_burst(tmp_path, monkeypatch):
    from tunedeck.ui.screens.launch import LaunchScreen
    from tunedeck.ui.screens.profiles import ProfilesScreen

    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "user"))
    app = base_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _settled(app, pilot)
        await pilot.press("l")
        await _until(pilot, lambda: isinstance(app.screen, ProfilesScreen))
        await pilot.press("e")
        await _until(pilot, lambda: isinstance(app.screen, LaunchScreen))
        await pilot.pause(0.2)
        scr: Any = app.screen
        fields = [f for f in scr.query(FieldInput) if f.focusable]
        assert {"model", "tp", "port", "flags", "env"} <= {f.id for f in fields}
        tp = scr.query_one("#tp", Input)
        # the first change of a freshly opened form: TP, as the operator typed it
        await _retype(app, pilot, tp, "16")
        await _until(pilot, lambda: "unsaved" in str(scr.query_one("#launch-title").render()))
        for rnd in ("1", "2"):  # then every field, twice (after the first change, and after those)
            for f in fields:
                text = "16" if f.type == "integer" else f"ab-{rnd} x/y.z"
                await _retype(app, pilot, f, text)
        assert tp.value == "16"


async def test_editing_keys_act_in_the_order_typed():
    from textual.app import App, ComposeResult

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield FieldInput("8", id="f", type="integer")

    app = One()
    async with app.run_test() as pilot:
        f = app.query_one(FieldInput)
        f.focus()
        await pilot.pause(0.05)
        burst(app, ["backspace"], "16")  # 8 selected on focus: backspace clears it, then 1 and 6
        await _until(pilot, lambda: f.value == "16", timeout=5)
        burst(app, ["home", "delete"], "2")  # 16 → 6 → 26
        await _until(pilot, lambda: f.value == "26", timeout=5)
        burst(app, ["end", "ctrl+u"], "7")
        await _until(pilot, lambda: f.value == "7", timeout=5)
