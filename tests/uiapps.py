"""Bare Textual apps for Pilot tests of one screen: :class:`ScreenApp` shows the screen under
test alone (no dashboard behind it); :class:`FormApp` does so for the launch form and keeps its
launch requests. The ``store`` fixture is a profile store in a temporary folder."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from tests.screenapp import ScreenApp
from tunedeck.profiles.store import ProfileStore
from tunedeck.ui.screens.launch import LaunchScreen


class FormApp(ScreenApp):
    """The launch form alone; ``launched`` holds what its launch key asked for."""

    def __init__(self, screen: LaunchScreen) -> None:
        super().__init__(screen)
        self.launched: list[LaunchScreen.LaunchRequested] = []

    def on_launch_screen_launch_requested(self, message: LaunchScreen.LaunchRequested) -> None:
        self.launched.append(message)


@pytest.fixture
def store(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> ProfileStore:
    monkeypatch.setenv("TUNEDECK_PROFILES", str(tmp_path / "user"))
    return ProfileStore()


async def settle(pilot: Pilot[Any], n: int = 3) -> None:
    """``n`` rounds of the app's message queue."""
    for _ in range(n):
        await pilot.pause()
