"""The host-state banner: lost link with a live retry countdown, or a permanent failure."""

from __future__ import annotations

import math
import time

from textual.widgets import Static

from tui.messages import LinkState

_LABELS = {
    "unreachable": "host unreachable",
    "connection-lost": "connection lost",
    "timeout": "host not responding",
    "auth-failed": "authentication failed",
    "hostkey-unknown": "unknown host key",
    "hostkey-mismatch": "HOST KEY CHANGED",
}


def link_text(link: LinkState, now: float | None = None) -> str:
    """What the banner says for ``link`` at monotonic time ``now`` ('' when connected)."""
    if link.state in ("connected", "connecting"):
        return ""
    now = time.monotonic() if now is None else now
    label = _LABELS.get(link.kind, "host unreachable" if link.state == "unreachable" else "host error")
    err = f"last error: {link.last_error}" if link.last_error else ""
    if link.state == "unreachable":
        if link.retry_at is not None:
            left = max(0, math.ceil(link.retry_at - now))
            when = f"retrying in {left}s" if left > 0 else "retrying now…"
        else:
            when = "retrying…"
        extra = ", ".join(p for p in (f"attempt {link.attempt}", err) if p)
        return f"{link.target}: {label} — {when} ({extra})"
    if link.state == "failed":
        return f"{link.target}: {label} — not retrying ({err}); press r to try again"
    return f"{link.target}: {label} — {link.last_error or 'collector failed'}; restarting"


class HostBanner(Static):
    """Hidden while connected; otherwise one line with the state and a 1 Hz countdown."""

    DEFAULT_CSS = """
    HostBanner { display: none; height: auto; padding: 0 1; background: $error 25%; color: $text; }
    HostBanner.-shown { display: block; }
    HostBanner.-failed { background: $error 50%; text-style: bold; }
    """

    link: LinkState | None = None
    """The state shown."""

    def on_mount(self) -> None:
        self._timer = self.set_interval(1.0, self._tick, pause=True)

    def set_link(self, link: LinkState) -> None:
        self.link = link
        self._tick()
        counting = link.state == "unreachable" and link.retry_at is not None
        if counting:
            self._timer.resume()
        else:
            self._timer.pause()

    def _tick(self) -> None:
        if self.link is None:
            return
        text = link_text(self.link)
        self.set_class(bool(text), "-shown")
        self.set_class(self.link.state == "failed", "-failed")
        if text != str(self.content):
            self.update(text)
