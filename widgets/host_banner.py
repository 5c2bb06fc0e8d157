"""The host-state banner: lost link with a live retry countdown, or a permanent failure."""

from __future__ import annotations

import math
import time

from tunedeck.model import LinkState
from tunedeck.widgets._countdown import CountdownStatic

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


class HostBanner(CountdownStatic):
    """Hidden while connected; otherwise one line with the state and a live retry countdown."""

    DEFAULT_CSS = """
    HostBanner { display: none; height: auto; padding: 0 1; background: $error 25%; color: $text; }
    HostBanner.-shown { display: block; }
    HostBanner.-failed { background: $error 50%; text-style: bold; }
    """

    link: LinkState | None = None
    """The state shown."""

    def set_link(self, link: LinkState) -> None:
        self.link = link
        self.tick()

    def text(self) -> str:
        return "" if self.link is None else link_text(self.link)

    def deadline(self) -> float | None:
        if self.link is None or self.link.state != "unreachable" or self.link.retry_at is None:
            return None
        return self.link.retry_at - time.monotonic()

    def shown(self, text: str) -> None:
        self.set_class(bool(text), "-shown")
        self.set_class(self.link is not None and self.link.state == "failed", "-failed")
