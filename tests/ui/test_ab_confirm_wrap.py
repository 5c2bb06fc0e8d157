"""The A/B 'stop what is running?' dialog shows its whole question (wrapped, not cut)."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.widgets import Label

from tunedeck.ui.screens.modals import ConfirmModal

pytestmark = pytest.mark.timeout(60)

QUESTION = "Stop what is running on demo (run 6b0d724594df (sglang-base), pid 29237) to start the A/B?"


async def test_long_question_wraps_inside_the_dialog():
    app = App()
    async with app.run_test(size=(140, 42)) as pilot:
        app.push_screen(ConfirmModal(QUESTION))
        await pilot.pause()
        label = app.screen.query_one("#confirm-question", Label)
        box = label.parent
        assert label.region.right <= box.content_region.right
        assert label.region.height >= 2
        lines = [strip.text for strip in label.render_lines(label.region.reset_offset)]
        text = " ".join(line.strip() for line in lines)
        assert "to start the A/B?" in text and "pid 29237" in text
