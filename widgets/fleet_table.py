"""The fleet view's tables: a row group per host (GPUs summarised, expandable to a row per
GPU) and the servers of every host with a host column.

Widgets here only read snapshots (:mod:`tunedeck.model`, :class:`tunedeck.ui.messages.LinkState`). Rows
are keyed (``host:T``, ``gpu:T:i``, ``srv:T:name-port``) and updated cell by cell; the rows
are laid out again only when their order changes (a host expanded or collapsed, GPUs or
servers appearing), keeping the cursor on the row it was on.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from rich.text import Span, Text
from textual.coordinate import Coordinate
from textual.widgets import Static

from tunedeck.fmt import fmt, num, short_targets
from tunedeck.model import DeploymentSummary, GpuSnapshot, GpuStatus, LinkState, ServerStats, summarise_gpus
from tunedeck.widgets._fmt import bar, gib_pair, ratio, theme_color
from tunedeck.widgets.gpu_table import GPU_STATE_TEXT, _KeyedTable, _level
from tunedeck.widgets.server_panel import STATE_COLOURS, server_key

#: LinkState.kind → (the state cell of a host that does not answer, the reason in the notes)
FAILURE_TEXT = {
    "unreachable": ("unreachable", "unreachable"),
    "connection-lost": ("lost", "connection lost"),
    "timeout": ("no answer", "not responding"),
    "auth-failed": ("auth failed", "authentication failed"),
    "hostkey-unknown": ("unknown key", "unknown host key (tunedeck trust TARGET)"),
    "hostkey-mismatch": ("KEY CHANGED", "HOST KEY CHANGED"),
    "invalid-input": ("bad target", "bad target"),
}


@dataclass(frozen=True)
class FleetHost:
    """What the fleet view knows of one host (the newest snapshots)."""

    target: str
    link: LinkState
    gpu: GpuStatus
    servers: tuple[ServerStats, ...] | None = None


def host_state(h: FleetHost, now: float | None = None) -> tuple[str, str, str]:
    """(state cell, its colour, the note) of a host row. The state is ``ok``, ``connecting``,
    why the host does not answer (``unreachable``, retried with its countdown in the note;
    ``auth failed``, ``unknown key``, ``KEY CHANGED``: not retried until ``r``), ``error`` (a
    collector crashed), or what is wrong with the GPUs of a host that answers."""
    link = h.link
    now = time.monotonic() if now is None else now
    if link.state in ("unreachable", "failed"):
        word, reason = FAILURE_TEXT.get(link.kind, (link.state, link.kind or link.state))
        err = link.last_error
        if err.lower().startswith(reason.split(" (")[0].lower()):
            err = ""
        note = reason + (f": {err}" if err else "")
        if link.state == "unreachable":
            when = "retrying"
            if link.retry_at is not None:
                left = max(0, math.ceil(link.retry_at - now))
                when = f"retrying in {left}s" if left else "retrying now"
            return word, "error", f"{note} — {when} (attempt {link.attempt})"
        return word, "error", f"{note} — not retrying; press r to try again"
    if link.state == "error":
        return "error", "warning", link.last_error or "collector failed; restarting"
    g = h.gpu
    if link.state == "connecting" or g.state in ("waiting", "starting"):
        # the host's own sample has not answered yet (first poll, or after r): its GPU figures
        # alone do not make it ok
        return "connecting", "text-muted", ""
    if g.state == "ok":
        return "ok", "success", ""
    text = GPU_STATE_TEXT.get(g.state, g.state)
    msg = g.message.strip().splitlines()[0] if g.message.strip() else ""
    return g.state, "warning", text + (f": {msg}" if msg and msg.lower() not in text.lower() else "")


def gib_short(used_mib: object, total_mib: object) -> str:
    """'483/1123G': a host's memory in whole GiB (N/A for a side not reported)."""
    u, t = num(used_mib), num(total_mib)
    if u is None and t is None:
        return "N/A"
    us = "N/A" if u is None else f"{u / 1024:.0f}"
    ts = "N/A" if t is None else f"{t / 1024:.0f}"
    return f"{us}/{ts}G"


def _short(name: str) -> str:
    return name.removeprefix("NVIDIA ").strip() or "N/A"


class _OrderedTable(_KeyedTable):
    """A keyed table whose rows keep the order they are given in."""

    def show_rows(self, rows: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> None:
        keys = [k for k, _ in rows]
        if keys != list(self._cells):
            cursor = self.cursor_key
            self._cells.clear()
            self.clear()
            self._apply(rows)
            if cursor in self._cells:
                self.move_cursor(row=keys.index(cursor), animate=False)
        else:
            self._apply(rows)

    @property
    def cursor_key(self) -> str | None:
        """The key of the highlighted row (None when the table is empty)."""
        if not 0 <= self.cursor_row < self.row_count:
            return None
        return str(self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value)


class FleetTable(_OrderedTable):
    """A row per host (count, model, mean util, memory used/total, power, max temp, servers,
    state), and under an expanded host a row per GPU."""

    DEFAULT_CSS = """
    FleetTable { height: auto; max-height: 100%; }
    """
    COLUMNS = (
        ("host", "Host", 22),
        ("state", "State", 12),
        ("gpus", "GPUs", 4),
        ("model", "Model", 12),
        ("util", "Util", 4),
        ("mem", "Memory", 21),
        ("power", "Power", 11),
        ("temp", "Temp", 4),
        ("servers", "Servers", 7),
    )
    LAYOUTS = (
        (118, None, {}),
        (
            0,
            ("host", "state", "gpus", "util", "mem", "temp", "servers"),
            {"host": ("Host", 18), "mem": ("Memory", 12), "servers": ("Srv", 3)},
        ),
    )

    hosts: tuple[FleetHost, ...] = ()
    """The hosts shown, in order."""
    expanded: frozenset[str] = frozenset()
    """Targets whose GPU rows are shown."""

    def _refill(self) -> None:
        self.update_fleet(self.hosts, self.expanded)

    def update_fleet(self, hosts: Sequence[FleetHost], expanded: frozenset[str] | set[str] = frozenset()) -> None:
        self.hosts, self.expanded = tuple(hosts), frozenset(expanded)
        now = time.monotonic()
        rows: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        bar_w = 0 if self.compact else 8
        names = short_targets([h.target for h in self.hosts])
        for h in self.hosts:
            open_ = h.target in self.expanded
            word, colour, _note = host_state(h, now)
            s = summarise_gpus(h.gpu)
            memr = ratio(s.mem_used, s.mem_total)
            mem = gib_short(s.mem_used, s.mem_total)
            if bar_w and memr is not None:
                mem = f"{bar(memr, bar_w)} {mem}"
            servers = h.servers or ()
            ready = sum(1 for x in servers if x.state == "ready")
            model = s.model + (f"+{s.models - 1}" if s.models > 1 else "") if s.count else ""
            rows.append(
                (
                    f"host:{h.target}",
                    (
                        (("▾ " if open_ else "▸ ") + names[h.target], ""),
                        (word, colour),
                        (str(s.count) if s.count else "", ""),
                        (model, ""),
                        (fmt(s.util_mean, ".0f", "%") if s.count else "", _level(num(s.util_mean), 50, 90)),
                        (mem if s.count else "", _level(None if memr is None else memr * 100, 80, 95)),
                        (_power(s.power_draw, s.power_limit) if s.count else "", ""),
                        (fmt(s.temp_max, ".0f", "°") if s.count else "", _level(num(s.temp_max), 80, 90, good="")),
                        (f"{ready}/{len(servers)}" if servers else "", ""),
                    ),
                )
            )
            if open_:
                gpus = sorted(h.gpu.gpus, key=lambda g: g.index)
                for n, g in enumerate(gpus):
                    rows.append((f"gpu:{h.target}:{g.index}", self._gpu_cells(g, last=n == len(gpus) - 1, bar_w=bar_w)))
        self.show_rows(rows)

    @staticmethod
    def _gpu_cells(g: GpuSnapshot, *, last: bool, bar_w: int) -> tuple[tuple[str, str], ...]:
        memr = ratio(g.memory_used, g.memory_total)
        mem = gib_pair(g.memory_used, g.memory_total)
        if bar_w and memr is not None:
            mem = f"{bar(memr, bar_w)} {mem}"
        return (
            (("  └ " if last else "  ├ ") + f"GPU {g.index}", "text-muted"),
            ("", ""),
            ("", ""),
            (_short(g.name), ""),
            (fmt(g.utilization, ".0f", "%"), _level(num(g.utilization), 50, 90)),
            (mem, _level(None if memr is None else memr * 100, 80, 95)),
            (_power(g.power_draw, g.power_limit), ""),
            (fmt(g.temperature, ".0f", "°"), _level(num(g.temperature), 80, 90, good="")),
            ("", ""),
        )

    def target_at_cursor(self) -> str | None:
        """The host of the highlighted row (a GPU row belongs to its host)."""
        key = self.cursor_key
        if key is None:
            return None
        if key.startswith("host:"):
            return key[len("host:") :]
        return key[len("gpu:") :].rsplit(":", 1)[0]


def _power(draw: object, limit: object) -> str:
    if num(draw) is None and num(limit) is None:
        return "N/A"
    return f"{fmt(draw)}/{fmt(limit)}W"


class FleetServerTable(_OrderedTable):
    """The servers of every host, with the host first."""

    DEFAULT_CSS = """
    FleetServerTable { height: auto; max-height: 12; }
    """
    COLUMNS = (
        ("host", "Host", 18),
        ("name", "Server", 16),
        ("engine", "Engine", 6),
        ("model", "Model", 18),
        ("port", "Port", 5),
        ("state", "State", 9),
        ("running", "Run", 4),
        ("waiting", "Wait", 4),
        ("kv", "KV", 4),
        ("gen", "tok/s", 8),
        ("ttft", "TTFT", 6),
    )
    LAYOUTS = (
        (150, None, {}),
        (118, None, {"host": ("Host", 16), "model": ("Model", 14)}),
        (
            0,
            ("host", "name", "state", "running", "waiting", "kv", "gen"),
            {"host": ("Host", 14), "name": ("Server", 14), "gen": ("tok/s", 7)},
        ),
    )

    shown: tuple[FleetHost, ...] = ()

    def _refill(self) -> None:
        self.update_servers(self.shown)

    def update_servers(self, hosts: Sequence[FleetHost]) -> None:
        self.shown = tuple(hosts)
        names = short_targets([h.target for h in self.shown])
        rows = []
        for h in self.shown:
            stale = not h.link.ok
            for s in h.servers or ():
                kv = num(s.kv_cache_usage)
                ttft = num(s.ttft_p50)
                if ttft is None:
                    ttft = num(s.ttft_mean)
                state = "no link" if stale else s.state
                rows.append(
                    (
                        f"srv:{h.target}:{server_key(s)}",
                        (
                            (names[h.target], ""),
                            (s.name, ""),
                            (s.engine or "N/A", ""),
                            (s.model.rsplit("/", 1)[-1] if s.model else "N/A", ""),
                            ("N/A" if s.port is None else str(s.port), ""),
                            (state, "text-muted" if stale else STATE_COLOURS.get(s.state, "")),
                            (fmt(s.running), ""),
                            (fmt(s.waiting), ""),
                            ("N/A" if kv is None else f"{kv * 100:.0f}%", ""),
                            (fmt(s.gen_throughput, ".1f"), ""),
                            ("N/A" if ttft is None else f"{ttft * 1000:.0f}ms", ""),
                        ),
                    )
                )
        self.display = bool(rows)
        self.show_rows(rows)


#: a deployment's status → its colour
DEPLOY_COLOURS = {
    "launching": "accent",
    "starting": "accent",
    "ready": "success",
    "failed": "error",
    "stalled": "warning",
    "partial": "warning",
}


class FleetDeploymentTable(_OrderedTable):
    """The multi-node deployments across the fleet's hosts (``dep:ID``), each node marked with
    its host's link (✓ up, ✗ down, ? not watched here)."""

    DEFAULT_CSS = """
    FleetDeploymentTable { height: auto; max-height: 8; }
    """
    COLUMNS = (
        ("id", "Deployment", 14),
        ("profile", "Profile", 16),
        ("engine", "Engine", 10),
        ("nodes", "Nodes", 44),
        ("status", "Status", 9),
        ("note", "", 40),
    )
    LAYOUTS = (
        (150, None, {}),
        (118, ("id", "profile", "nodes", "status", "note"), {"profile": ("Profile", 12), "nodes": ("Nodes", 36)}),
        # at 80 columns the cause of a failure matters more than the profile's name
        (0, ("id", "nodes", "status", "note"), {"id": ("Deployment", 12), "nodes": ("Nodes", 28), "note": ("", 22)}),
    )

    shown: tuple[tuple[DeploymentSummary, ...], tuple[FleetHost, ...]] = ((), ())

    def _refill(self) -> None:
        self.update_deployments(*self.shown)

    def update_deployments(self, deployments: Sequence[DeploymentSummary], hosts: Sequence[FleetHost]) -> None:
        self.shown = (tuple(deployments), tuple(hosts))
        links = {h.target: h.link.ok for h in hosts}
        names = short_targets(sorted({n for d in deployments for n in d.nodes}))
        rows = []
        for d in deployments:
            marks = []
            for node, target in zip(d.nodes, d.targets or (None,) * len(d.nodes)):
                up = links.get(target) if target is not None else None
                marks.append(f"{names[node]} {'?' if up is None else '✓' if up else '✗'}")
            note = d.diagnosis or ""
            rows.append(
                (
                    f"dep:{d.deploy_id}",
                    (
                        (d.deploy_id, ""),
                        (d.profile, ""),
                        (f"{d.engine} {d.mode}", ""),
                        (", ".join(marks), ""),
                        (d.status, DEPLOY_COLOURS.get(d.status, "")),
                        (note.splitlines()[0] if note else "", "text-muted"),
                    ),
                )
            )
        self.display = bool(rows)
        self.show_rows(rows)


class FleetNotes(Static):
    """One line per host that needs one: why it does not answer (with the retry countdown),
    or what is wrong with its GPUs. Hidden when every host is fine."""

    DEFAULT_CSS = """
    FleetNotes { height: auto; padding: 0 1; display: none; }
    FleetNotes.-shown { display: block; }
    """

    _shown: tuple[str, tuple[Span, ...]] | None = None

    def update_notes(self, hosts: Sequence[FleetHost]) -> None:
        now = time.monotonic()
        text = Text(no_wrap=True, overflow="ellipsis")
        names = short_targets([h.target for h in hosts])
        for h in hosts:
            _word, colour, note = host_state(h, now)
            if note:
                if text:
                    text.append("\n")
                text.append(f"{names[h.target]}: ", style="bold")
                text.append(note, style=theme_color(self, colour))
        if (text.plain, tuple(text.spans)) == self._shown:
            return  # unchanged: no layout pass
        self._shown = (text.plain, tuple(text.spans))
        self.set_class(bool(text.plain), "-shown")
        self.update(text)


__all__ = [
    "FAILURE_TEXT",
    "FleetDeploymentTable",
    "FleetHost",
    "FleetNotes",
    "FleetServerTable",
    "FleetTable",
    "gib_short",
    "host_state",
]
