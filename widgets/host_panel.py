"""Host panel: CPU %, memory, load average and uptime of the target host."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget

from tunedeck.fmt import fmt, human_bytes, num, uptime
from tunedeck.model import HostStats
from tunedeck.widgets._fmt import bar, ratio, set_border_title, theme_color


def mem_pair(used: object, total: object) -> str:
    """'123.4/503.8 GiB' (N/A for a missing side)."""
    u, t = num(used), num(total)
    if u is None and t is None:
        return "N/A"
    if t is None:
        return f"{human_bytes(u)} / N/A"
    us = "N/A" if u is None else f"{u / 2**30:.1f}"
    return f"{us}/{t / 2**30:.1f} GiB"


class HostPanel(Widget):
    """Shows one :class:`HostStats` snapshot (or that none arrived yet).

    Draws in ``render()`` and only calls ``refresh()`` on new figures: a fixed-size
    panel, so an update never costs a layout pass."""

    DEFAULT_CSS = """
    HostPanel { height: 7; width: 40; border: round $primary 50%; padding: 0 1; }
    """

    _text: Text | None = None

    def on_mount(self) -> None:
        self.border_title = "Host"

    def render(self) -> Text:
        if self._text is None:
            return Text("waiting for host figures…", style=theme_color(self, "text-muted"))
        return self._text

    def update(self, text: Text) -> None:
        """Show ``text``; only the lines it (or the text before it) covers are drawn again: the
        panel stands as tall as the process table beside it, and a whole repaint once a second
        drew its empty lines and the table's rows beside them for nothing."""
        old, self._text = self._text, text
        if old is None or not self.is_mounted:
            self.refresh()
            return
        rows = max(len(old.plain.split("\n")), len(text.plain.split("\n")))
        self.refresh(Region(0, 0, self.content_size.width, rows))

    stats: HostStats | None = None
    """The snapshot shown."""

    def update_stats(self, stats: HostStats | None, *, stale: bool = False) -> None:
        if stats == self.stats and not stale:
            return
        self.stats = stats
        if stats is None:
            self.update(Text("no host figures", style=theme_color(self, "text-muted")))
            return
        set_border_title(self, f"Host {stats.hostname}" if stats.hostname else "Host")
        t = Text(no_wrap=True, overflow="ellipsis")
        cpu = num(stats.cpu_percent)
        cores = f" of {fmt(stats.cpu_count)} cores" if num(stats.cpu_count) is not None else ""
        t.append("CPU   ", style="bold")
        t.append(bar(None if cpu is None else cpu / 100, 10) + " ", style=theme_color(self, "accent"))
        t.append(f"{fmt(stats.cpu_percent, '.1f', '%')}{cores}\n")
        memr = ratio(stats.mem_used, stats.mem_total)
        t.append("Mem   ", style="bold")
        t.append(bar(memr, 10) + " ", style=theme_color(self, "secondary"))
        t.append(f"{mem_pair(stats.mem_used, stats.mem_total)}\n")
        t.append("Load  ", style="bold")
        t.append(f"{fmt(stats.load1, '.2f')}  {fmt(stats.load5, '.2f')}  {fmt(stats.load15, '.2f')}\n")
        t.append("Up    ", style="bold")
        t.append(uptime(stats.uptime))
        if stale:
            t.append("\n(stale: host not answering)", style=theme_color(self, "warning"))
        self.update(t)
