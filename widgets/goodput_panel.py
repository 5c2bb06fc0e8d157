"""Goodput of the benchmark level running now (live) or just finished (its summary).

Renders an immutable :class:`tunedeck.model.GoodputView`: the share of completed requests
within every SLO target and good requests per second. A run without targets says so
(goodput is not 0 then, it is not measured).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from tunedeck.fmt import fmt
from tunedeck.model import SLO_NAMES, GoodputView

NO_TARGETS = (
    "Goodput: no SLO targets for this run (set TTFT / TPOT / ITL / E2EL in the bench form, or --goodput ttft:MS …)"
)


def targets_text(view: GoodputView) -> str:
    names = dict(SLO_NAMES)
    return ", ".join(f"{names.get(k, k)} \u2264 {ms:g} ms" for k, ms in view.targets)


def goodput_text(view: GoodputView | None) -> Text:
    """The panel's text for ``view`` (None: the run has not said yet whether it has targets)."""
    t = Text()
    if view is None:
        return t
    if not view.targets:
        t.append(NO_TARGETS, style="dim")
        return t
    t.append("Goodput", style="bold")
    if view.level:
        t.append(f" {view.level}")
    t.append(" (final): " if view.final else " so far: ")
    if not view.completed:
        t.append("no completed request yet" if not view.final else "no request completed")
    elif view.good is None:
        t.append(f"{view.completed} completed; counted in the level's summary")
    else:
        t.append(f"{view.good}/{view.completed}", style="bold")
        t.append(" within every target (")
        t.append(fmt((view.share or 0.0) * 100, ".1f", " %"), style="bold")
        t.append(") \u00b7 ")
        t.append(fmt(view.req_s, ".2f", " req/s"), style="bold")
    t.append(" \u00b7 targets " + targets_text(view), style="dim")
    return t


class GoodputPanel(Static):
    """Shows one :class:`GoodputView`; call :meth:`show` with a new one."""

    DEFAULT_CSS = """
    GoodputPanel { height: auto; padding: 0 1; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__("", **kw)
        self.view: GoodputView | None = None
        """The view shown (None before the run's start event)."""

    def show(self, view: GoodputView | None) -> None:
        self.view = view
        self.update(goodput_text(view))


__all__ = ["NO_TARGETS", "GoodputPanel", "goodput_text", "targets_text"]
