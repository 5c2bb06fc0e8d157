"""Key bindings that several screens declare alike: one definition each.

Each takes the screen's binding-id prefix (``run``, ``profiles``, …), so the ids ``[keymap]``
remaps stay what they were (``run-back``, ``profiles-filter``, …); the app-wide ones keep their
plain ids (``keys``, ``quit``).
"""

from __future__ import annotations

from textual.binding import Binding

#: ``?``: the keys of the screen (the dashboard and the fleet view)
KEYS = Binding("question_mark", "keys", "Keys", tooltip="Every key of this screen, and what it does", id="keys")
#: ``ctrl+q``: leave (the dashboard and the fleet view)
QUIT = Binding("ctrl+q", "quit", "Quit", tooltip="Leave tunedeck (servers keep running)", id="quit", priority=True)


def back(prefix: str) -> Binding:
    """``escape``: close the screen (its ``close`` action)."""
    return Binding("escape", "close", "Back", id=f"{prefix}-back")


def filter_rows(prefix: str, rows: str, *, action: str = "filter", description: str = "Filter") -> Binding:
    """``/``: show only the ``rows`` (a table's, in words) matching some text."""
    return Binding(
        "slash",
        action,
        description,
        tooltip=f"Show only the {rows} matching some text (a header click sorts)",
        id=f"{prefix}-filter",
    )


def mark_ab(prefix: str, *, show: bool = True) -> list[Binding]:
    """``1`` / ``2``: mark the highlighted profile as A (baseline) / B (candidate)."""
    return [
        Binding(
            key,
            f"mark({side!r})",
            f"Mark {side}",
            tooltip=f"Mark the highlighted profile as {side} ({role})",
            id=f"{prefix}-mark-{side.lower()}",
            show=show,
        )
        for key, side, role in (("1", "A", "baseline"), ("2", "B", "candidate"))
    ]


def toggle_side(prefix: str, beside: str, hidden_by: str) -> Binding:
    """``p``: show or hide a campaign screen's side panel, the profiles and ``beside`` them, which
    ``hidden_by`` hides on a narrow terminal (:class:`~tunedeck.ui.screens.campaign.CampaignScreen`)."""
    return Binding(
        "p",
        "toggle_side",
        "Profiles",
        tooltip=f"Show or hide the profiles and {beside} (hidden by {hidden_by} on a narrow terminal)",
        id=f"{prefix}-toggle-side",
    )


__all__ = ["KEYS", "QUIT", "back", "filter_rows", "mark_ab", "toggle_side"]
