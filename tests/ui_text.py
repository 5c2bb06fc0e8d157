"""Read what a running test app shows, as plain text (for assertions)."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    """Every line of the current screen, as the terminal would show it (no styles)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
