"""Server panel: every server known on the host with its state and live metrics."""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

from rich.text import Span, Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tunedeck.fmt import fmt, num
from tunedeck.model import ServerStats
from tunedeck.widgets._fmt import sparkline, theme_color
from tunedeck.widgets.line_table import LineTable

#: server state → theme variable used to colour it.
STATE_COLOURS = {
    "starting": "accent",
    "ready": "success",
    "unhealthy": "warning",
    "down": "error",
    "stalled": "warning",
    "stopping": "warning",
    "failed": "error",
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


def server_key(s: ServerStats) -> str:
    return f"srv-{s.name}-{s.port}"


class ServerHistory:
    """Bounded histories per server of running, waiting, KV-cache % and generation tok/s
    (fed while hidden too, so the sparklines have no gaps)."""

    METRICS = ("running", "waiting", "kv", "gen")

    def __init__(self, maxlen: int = 60) -> None:
        self.maxlen = maxlen
        self._h: dict[str, dict[str, deque[float]]] = {}

    def add(self, servers: Sequence[ServerStats]) -> None:
        for s in servers:
            h = self._h.setdefault(server_key(s), {m: deque(maxlen=self.maxlen) for m in self.METRICS})
            kv = num(s.kv_cache_usage)
            for m, v in (
                ("running", num(s.running)),
                ("waiting", num(s.waiting)),
                ("kv", None if kv is None else kv * 100),
                ("gen", num(s.gen_throughput)),
            ):
                h[m].append(math.nan if v is None else float(v))

    def get(self, key: str, metric: str) -> Sequence[float]:
        return self._h.get(key, {}).get(metric, ())


def _spark(values: Sequence[float], width: int, hi: float | None = None) -> str:
    vals = [v for v in values if not math.isnan(v)]
    top = hi if hi is not None else (max(vals) if vals else 1.0)
    return sparkline(values, width, 0.0, top or 1.0) if values else ""


class ServerTable(LineTable):
    """One row per server: state, load and their histories. Drawn line by line (most of its
    cells change every second, see :mod:`tunedeck.widgets.line_table`); Enter or a click on the cursor's
    row posts :class:`LineTable.RowSelected`."""

    COLUMNS = (
        ("name", "Server", 16),
        ("engine", "Engine", 6),
        ("model", "Model", 24),
        ("port", "Port", 5),
        ("state", "State", 9),
        ("running", "Run", 4),
        ("run_hist", "Run hist", 8),
        ("waiting", "Wait", 4),
        ("wait_hist", "Wait hist", 9),
        ("kv", "KV", 5),
        ("kv_hist", "KV hist", 8),
        ("gen", "Gen tok/s", 9),
        ("gen_hist", "tok/s hist", 10),
        ("ttft", "TTFT p50", 8),
    )
    LAYOUTS = (
        (150, None, {}),
        (
            118,
            ("name", "engine", "model", "port", "state", "running", "waiting", "kv", "gen", "gen_hist", "ttft"),
            {"model": ("Model", 18)},
        ),
        (
            100,
            ("name", "engine", "model", "port", "state", "running", "waiting", "kv", "gen", "ttft"),
            {"name": ("Server", 14), "model": ("Model", 14), "kv": ("KV", 4), "gen": ("tok/s", 9), "ttft": ("TTFT", 6)},
        ),
        (
            0,
            ("name", "engine", "port", "state", "running", "waiting", "kv", "gen", "ttft"),
            {
                "name": ("Server", 14),
                "engine": ("Eng", 6),
                "state": ("State", 8),
                "running": ("Run", 3),
                "kv": ("KV", 4),
                "gen": ("tok/s", 7),
                "ttft": ("TTFT", 6),
            },
        ),
    )

    DEFAULT_CSS = """
    ServerTable { height: auto; max-height: 8; }
    """

    def _refill(self) -> None:
        last = getattr(self, "_last", None)
        if last is not None:
            self.update_servers(*last)

    def update_servers(self, servers: Sequence[ServerStats], history: ServerHistory | None = None) -> None:
        self._last = (servers, history)
        rows = []
        for s in servers:
            key = server_key(s)
            h = history.get if history is not None else (lambda _k, _m: ())
            kv = num(s.kv_cache_usage)
            ttft = num(s.ttft_p50)
            if ttft is None:
                ttft = num(s.ttft_mean)
            model = s.model.rsplit("/", 1)[-1] if s.model else "N/A"
            gen = num(s.gen_throughput)
            gen_text = fmt(s.gen_throughput, ".1f")
            if self.compact and gen is not None and gen >= 1000:
                gen_text = f"{gen / 1000:.1f}k"
            cells = (
                (s.name, ""),
                (s.engine or "N/A", ""),
                (model, ""),
                ("N/A" if s.port is None else str(s.port), ""),
                (s.state, STATE_COLOURS.get(s.state, "")),
                (fmt(s.running), ""),
                (_spark(h(key, "running"), 8), "accent"),
                (fmt(s.waiting), ""),
                (_spark(h(key, "waiting"), 9), "warning"),
                ("N/A" if kv is None else f"{kv * 100:.0f}%", ""),
                (_spark(h(key, "kv"), 8, 100.0), "secondary"),
                (gen_text, ""),
                (_spark(h(key, "gen"), 10), "accent"),
                ("N/A" if ttft is None else f"{ttft * 1000:.0f}ms", ""),
            )
            rows.append((key, cells))
        self._apply(rows)


class ServerPanel(Vertical):
    """Table of servers plus one note line per server that needs one."""

    DEFAULT_CSS = """
    ServerPanel { height: auto; border: round $primary 50%; }
    ServerPanel > #server-notes { height: auto; padding: 0 1; }
    """

    servers: tuple[ServerStats, ...] | None = None
    """The snapshots shown (None before the first sample)."""

    #: the notes text and styles on screen (an unchanged text is not written again)
    _notes_shown: tuple[str, tuple[Span, ...]] | None = None

    def compose(self) -> ComposeResult:
        yield ServerTable(id="server-table")
        yield Static(id="server-notes")

    def on_mount(self) -> None:
        self.border_title = "Servers"
        self.query_one(ServerTable).display = False
        self._notes(Text("waiting for server figures…", style=theme_color(self, "text-muted")))

    def _notes(self, text: Text) -> None:
        if (text.plain, tuple(text.spans)) == self._notes_shown:
            return  # unchanged: no layout pass
        self._notes_shown = (text.plain, tuple(text.spans))
        notes = self.query_one("#server-notes", Static)
        notes.display = bool(text.plain)
        notes.update(text)
        self.refresh(layout=True)  # the panel's height follows the number of note lines

    def update_servers(self, servers: Sequence[ServerStats], history: ServerHistory | None = None) -> None:
        servers = tuple(servers)
        if servers == self.servers and history is None:
            return
        self.servers = servers
        table = self.query_one(ServerTable)
        table.display = bool(servers)
        table.update_servers(servers, history)
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
    def table(self) -> ServerTable:
        return self.query_one(ServerTable)
