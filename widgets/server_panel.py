"""Server panel: every server known on the host with its state and live metrics."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.model import ServerStats
from widgets._fmt import fmt, num, theme_color
from widgets.gpu_table import _KeyedTable

#: server state → theme variable used to colour it.
STATE_COLOURS = {
    "starting": "accent", "ready": "success", "unhealthy": "warning", "down": "error",
    "stalled": "warning", "stopping": "warning",
}
METRICS_DISABLED = "metrics disabled (start SGLang with --enable-metrics)"


def server_note(s: ServerStats) -> str:
    """The one-line remark shown under the table for ``s`` ('' when nothing to say)."""
    parts = []
    disabled = s.metrics_state == "disabled"
    message = s.message
    if disabled and "metrics" in message.lower():
        message = ""  # said below, in one wording
    if s.state == "down":
        parts.append(message or "not answering")
    elif message:
        parts.append(message)
    if disabled:
        parts.append(METRICS_DISABLED if s.engine in ("sglang", "") else "metrics disabled")
    elif s.metrics_state == "error" and s.state != "down":
        parts.append("metrics unreadable")
    return "; ".join(dict.fromkeys(p for p in parts if p))


class ServerTable(_KeyedTable):
    COLUMNS = (
        ("name", "Server", 16),
        ("engine", "Engine", 6),
        ("model", "Model", 24),
        ("port", "Port", 5),
        ("state", "State", 9),
        ("running", "Run", 4),
        ("waiting", "Wait", 4),
        ("kv", "KV", 5),
        ("gen", "Gen tok/s", 9),
        ("ttft", "TTFT p50", 8),
    )

    DEFAULT_CSS = """
    ServerTable { height: auto; max-height: 8; }
    """

    def update_servers(self, servers: Sequence[ServerStats]) -> None:
        rows = []
        for s in servers:
            kv = num(s.kv_cache_usage)
            ttft = num(s.ttft_p50)
            if ttft is None:
                ttft = num(s.ttft_mean)
            model = s.model.rsplit("/", 1)[-1] if s.model else "N/A"
            cells = (
                (s.name, ""),
                (s.engine or "N/A", ""),
                (model, ""),
                ("N/A" if s.port is None else str(s.port), ""),
                (s.state, STATE_COLOURS.get(s.state, "")),
                (fmt(s.running), ""),
                (fmt(s.waiting), ""),
                ("N/A" if kv is None else f"{kv * 100:.0f}%", ""),
                (fmt(s.gen_throughput, ".1f"), ""),
                ("N/A" if ttft is None else f"{ttft * 1000:.0f}ms", ""),
            )
            rows.append((f"srv-{s.name}-{s.port}", cells))
        self._apply(rows)


class ServerPanel(Vertical):
    """Table of servers plus one note line per server that needs one."""

    DEFAULT_CSS = """
    ServerPanel { height: auto; border: round $primary 50%; }
    ServerPanel > #server-notes { height: auto; padding: 0 1; }
    """

    servers: tuple[ServerStats, ...] | None = None
    """The snapshots shown (None before the first sample)."""

    def compose(self) -> ComposeResult:
        yield ServerTable(id="server-table")
        yield Static(id="server-notes")

    def on_mount(self) -> None:
        self.border_title = "Servers"
        self.query_one(ServerTable).display = False
        self._notes(Text("waiting for server figures…", style=theme_color(self, "text-muted")))

    def _notes(self, text: Text) -> None:
        if text.plain == getattr(self, "_notes_plain", None) and text.spans == self._notes_spans:
            return  # unchanged: no layout pass
        self._notes_plain, self._notes_spans = text.plain, list(text.spans)
        notes = self.query_one("#server-notes", Static)
        notes.display = bool(text.plain)
        notes.update(text)
        self.refresh(layout=True)  # the panel's height follows the number of note lines

    def update_servers(self, servers: Sequence[ServerStats]) -> None:
        servers = tuple(servers)
        if servers == self.servers:
            return
        self.servers = servers
        table = self.query_one(ServerTable)
        table.display = bool(servers)
        table.update_servers(servers)
        if not servers:
            self._notes(Text("no servers known on this host", style=theme_color(self, "text-muted")))
            return
        notes = Text()
        for s in servers:
            note = server_note(s)
            if note:
                if notes:
                    notes.append("\n")
                notes.append(f"{s.name}: ", style="bold")
                colour = "error" if s.state == "down" else "warning"
                notes.append(note, style=theme_color(self, colour))
        self._notes(notes)

    @property
    def table(self) -> DataTable:
        return self.query_one(ServerTable)
