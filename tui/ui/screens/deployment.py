"""DeploymentScreen: a multi-node deployment as one unit: one startup bar per node, the
triage verdict (the node that failed first and its proving line), and the merged log of every
member with a node tag on each line (``t`` shows one node's lines, then the next, then all).
``s`` stops the whole deployment (:func:`tunedeck.services.deploy.stop`) after a confirmation.

The data comes from :class:`tunedeck.collectors.deployment.DeploymentCollector` (one connection per
node, each member's log followed from a byte offset), sampled by one chained loop worker: the
next sample starts only after the previous one was posted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from tunedeck.collectors.deployment import DeploymentCollector, DeploymentSnapshot
from tunedeck.hostops.hosts import HostError
from tunedeck.services import deploy as D
from tunedeck.ui.bindings import back
from tunedeck.ui.screens.modals import confirm_stop
from tunedeck.widgets.deployment import MergedLog, NodeProgressList, NodeRow, node_styles

log = logging.getLogger(__name__)


class DeploymentScreen(Screen[None]):
    """One deployment: a bar per node on top, the verdict, the merged log below."""

    DEFAULT_CSS = """
    DeploymentScreen #deploy-title { height: 1; background: $boost; padding: 0 1; }
    DeploymentScreen NodeProgressList { border-bottom: solid $primary-darken-2; }
    DeploymentScreen #deploy-verdict { height: auto; padding: 0 1; display: none; }
    DeploymentScreen #deploy-verdict.-shown { display: block; }
    """

    BINDINGS = [
        back("deploy"),
        Binding(
            "t",
            "next_node",
            "Node",
            tooltip="Show one node's log lines (again: the next node, then every node)",
            id="deploy-node-filter",
        ),
        Binding(
            "s", "stop", "Stop deployment", tooltip="Stop every node of the deployment (asks first)", id="deploy-stop"
        ),
    ]

    class Sampled(Message):
        """A sample of the deployment: its state and the log lines since the previous one
        (never coalesced: the lines are events)."""

        def __init__(self, snapshot: DeploymentSnapshot) -> None:
            super().__init__()
            #: the sample
            self.snapshot = snapshot

    def __init__(
        self,
        record: D.DeploymentRecord,
        *,
        collector: Any = None,
        host_factory: D.HostFactory | None = None,
        interval: float = 0.5,
        max_lines: int = 10_000,
        grace: float = 30.0,
    ) -> None:
        super().__init__()
        self.record = record
        #: anything with start() / sample() / stop() / aclose() (DeploymentCollector)
        self.collector = collector or DeploymentCollector(record, host_factory=host_factory)
        self.interval = interval
        self.max_lines = max_lines
        self.grace = grace
        self.nodes = list(record.nodes)
        self.tag_styles = node_styles(self.nodes)
        #: the latest sample
        self.snapshot: DeploymentSnapshot | None = None
        #: True from the confirmed stop until its result
        self.stopping = False
        #: what the stop said (one line per member), once it ran
        self.stop_summary: str | None = None
        self._notified: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="deploy-title")
        yield NodeProgressList(id="deploy-nodes")
        yield Static(id="deploy-verdict")
        yield MergedLog(max_lines=self.max_lines, id="deploy-log")
        yield Footer()

    def on_mount(self) -> None:
        view = self.query_one(MergedLog)
        view.set_tag_styles(self.tag_styles, [m.tag for m in self.record.members])
        self.query_one(NodeProgressList).update_rows(
            [NodeRow(m.tag, m.role, None) for m in self.record.members], self.tag_styles
        )
        view.focus()
        self.poll()

    def _title(self, state: str | None = None) -> Text:
        r = self.record
        shown = {"stopped": "stopped (by you)"}.get(state or "", state)
        return Text(
            f"deployment {r.deploy_id} · {r.profile} · {r.engine} {r.mode} · {len(r.nodes)} nodes: "
            + ", ".join(r.nodes)
            + (f" · port {r.http_port}" if r.http_port else "")
            + (f" · {shown}" if shown else "")
        )

    # ------------------------------------------------------------------ data
    @work(group="deploy-poll", exit_on_error=False)
    async def poll(self) -> None:
        """Start the collector, then sample it in a chained loop until the screen closes."""
        try:
            await self.collector.start()
            while True:
                t0 = time.monotonic()
                try:
                    self.post_message(self.Sampled(await self.collector.sample()))
                except HostError as e:
                    log.warning("deployment %s: sample failed: %s", self.record.deploy_id, e)
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            await self.collector.aclose()

    @on(Sampled)
    def _show(self, message: Sampled) -> None:
        snap = message.snapshot
        self.snapshot = snap
        links = dict(snap.link_errors)
        rows = []
        for m in snap.members:
            member = self._member(m.run_id)
            tag = member.tag if member is not None else m.node
            rows.append(NodeRow(tag, m.role, m.progress, m.state, links.get(tag)))
        self.query_one(NodeProgressList).update_rows(rows)
        logv = self.query_one(MergedLog)
        if snap.lines:
            logv.append_tagged(snap.lines)
        if snap.dropped:
            logv.append_lines([f"── {snap.dropped} lines dropped (the view fell behind) ──"])
        self._show_verdict(snap.verdict)
        self.query_one("#deploy-title", Static).update(self._title(self._state(snap)))

    def _member(self, run_id: str) -> D.Member | None:
        return next((m for m in self.record.members if m.run_id == run_id), None)

    def _state(self, snap: DeploymentSnapshot) -> str:
        if snap.members and all(m.state == "stopped" for m in snap.members):
            return "stopped"
        return snap.verdict.state

    def _show_verdict(self, v: D.Verdict) -> None:
        box = self.query_one("#deploy-verdict", Static)
        t = Text()
        if self.stop_summary:
            t.append(f"■ {self.stop_summary}", style="bold blue")
        elif self.stopping:
            t.append(f"■ stopping deployment {self.record.deploy_id} on every node …", style="bold blue")
        elif v.diagnosis:
            style = "bold red" if v.state == "failed" else "bold yellow"
            t.append(f"{'✗' if v.state == 'failed' else '⚠'} {v.diagnosis}", style=style)
            if v.proof:
                t.append(f"\n  {v.proof}", style="red" if v.state == "failed" else "yellow")
        box.update(t)
        box.set_class(bool(t.plain), "-shown")
        key = f"{v.state}:{v.diagnosis}"
        if key != self._notified and v.state != "starting" and not (self.stopping or self.stop_summary):
            self._notified = key
            if v.state == "ready":
                self.notify(f"deployment {self.record.deploy_id} is ready")
            else:
                self.notify(
                    f"deployment {self.record.deploy_id}: {v.diagnosis or v.state}",
                    severity="error" if v.state == "failed" else "warning",
                    timeout=10,
                    markup=False,
                )

    # ------------------------------------------------------------------ actions
    def action_close(self) -> None:
        self.app.pop_screen()

    def action_next_node(self) -> None:
        """All → the first node → … → the last node → all."""
        logv = self.query_one(MergedLog)
        order: list[str | None] = [None, *self.nodes]
        nxt = order[(order.index(logv.node) + 1) % len(order)] if logv.node in order else None
        logv.set_node(nxt)
        self.notify(f"log: {'every node' if nxt is None else 'node ' + nxt + ' only'}", timeout=2, markup=False)

    def action_stop(self) -> None:
        r = self.record
        if self.stopping:
            return
        order = ", ".join(f"{m.node} ({m.kind})" for m in r.stop_order())
        confirm_stop(
            self,
            f"Stop deployment {r.deploy_id} ({r.profile}) on {len(r.nodes)} nodes?\nIn this order: {order}.",
            title="Stop the deployment",
            grace=self.grace,
            then=self.stop_deployment,
        )

    @work(group="deploy-stop", exclusive=True, exit_on_error=False)
    async def stop_deployment(self) -> None:
        self.stopping = True
        self.notify(f"stopping deployment {self.record.deploy_id} …")
        if self.snapshot is not None:
            self._show_verdict(self.snapshot.verdict)
        try:
            results, free = await self.collector.stop(grace=self.grace)
        except HostError as e:
            self.stopping = False
            log.warning("deployment %s: stop failed: %s", self.record.deploy_id, e)
            self.notify(f"stop failed: {e}", severity="error", markup=False)
            return
        self.stopping = False
        ok = all(r.state in ("stopped", "exited", "stale") for r in results)
        busy = [n for n, v in free.items() if v is False]
        self.stop_summary = (
            f"{'stopped' if ok else 'stop incomplete'} (by you): "
            + "; ".join(f"{r.node} ({r.kind}) {r.state}" for r in results)
            + (f"; GPUs still busy on {', '.join(busy)}" if busy else "")
        )
        if self.snapshot is not None:
            self._show_verdict(self.snapshot.verdict)
        self.notify(self.stop_summary, severity="information" if ok and not busy else "warning", markup=False)


__all__ = ["DeploymentScreen"]
