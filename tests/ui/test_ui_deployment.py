"""The dashboard's view of a multi-node deployment: one row in the Runs view, and a view with
one startup bar per node, the triage verdict, a merged log with a node tag on every line
(``t`` shows one node's lines) and a stop of the whole deployment behind one confirmation.

The real path runs two real servers (the fake engine) as the members of a 2-node deployment
whose two "nodes" are both this machine (a host factory maps each node name to a LocalHost):
the collector follows both logs by byte offset, the trackers probe both processes, and the
stop goes through ``tunedeck.services.deploy.stop``.
"""

from __future__ import annotations

import pytest
from textual.app import App

from tests.deployfix import tp_deployment
from tests.integration.test_launcher import fake
from tests.ui.test_ui_status import until, until_shown
from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, server
from tunedeck.collectors.deployment import DeploymentSnapshot
from tunedeck.hostops import launcher as L
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.runstore import RunStore
from tunedeck.model import StartupProgress
from tunedeck.services import deploy as D
from tunedeck.ui.app import make_app
from tunedeck.ui.screens.deployment import DeploymentScreen
from tunedeck.ui.screens.modals import ConfirmModal
from tunedeck.ui.screens.runs import RunsScreen
from tunedeck.widgets.deployment import MergedLog, NodeProgressList

pytestmark = pytest.mark.timeout(120)

NODES = ["gpu-a", "gpu-b"]


def record(runs: list, port: int | None = None) -> D.DeploymentRecord:
    return tp_deployment(
        "d7f3a0012345",
        NODES,
        [r.run_id for r in runs],
        port=port,
        profile="r1-2n",
        rendezvous="127.0.0.1:5000",
        http_port=port or 30000,
        status="starting",
    )


class Bare(App[None]):
    pass


async def test_real_two_node_deployment_bars_merged_log_filter_triage_and_stop():
    local = LocalHost()
    argv_a, port = fake("sglang", None, "--load-seconds", "1.0")
    argv_b, _ = fake("sglang", None, "--load-seconds", "0.5", "--fault", "oom")
    run_a = await L.launch(local, argv_a, engine="sglang", port=port)
    run_b = await L.launch(local, argv_b, engine="sglang", check=False)  # a second node on this machine
    rec = record([run_a, run_b], port)
    D.DeploymentStore().save(rec)
    made: list[str] = []

    def factory(node: str) -> LocalHost:
        made.append(node)
        return LocalHost()

    app = Bare()
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await app.push_screen(RunsScreen(host_factory=factory))
            runs = app.screen
            await until(pilot, lambda: runs.table.row_count == 1)
            # one row for the deployment, its member runs not listed apart
            assert runs.table.shown_keys == [f"deploy:{rec.deploy_id}"]
            await until_shown(pilot, rec.deploy_id, "r1-2n", "2: gpu-a, gpu-b")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            scr = app.screen
            # the worker's OOM is the verdict: the node that failed first, with its proving line
            await until(pilot, lambda: scr.snapshot is not None and scr.snapshot.verdict.state == "failed", 30)
            v = scr.snapshot.verdict
            assert v.first_failed == "gpu-b" and "node B (gpu-b) failed first" in (v.diagnosis or "")
            await until_shown(pilot, "node B (gpu-b) failed first", timeout=10)
            assert v.proof and v.proof in str(scr.query_one("#deploy-verdict").content)

            # one bar per node, from the trackers' snapshots
            def bars() -> list[str]:
                return scr.query_one(NodeProgressList).text.splitlines()

            await until(pilot, lambda: "ready" in bars()[0] and "failed" in bars()[1], 30)
            assert len(bars()) == 2 and bars()[0].startswith("gpu-a") and bars()[1].startswith("gpu-b")
            assert "100%" in bars()[0] and "out of memory" in bars()[1].lower()
            # the merged log: both members, a node tag on every line
            logv = scr.query_one(MergedLog)
            await until(pilot, lambda: {ln[:7] for ln in logv.view.lines} >= {"[gpu-a]", "[gpu-b]"}, 10)
            assert all(ln.startswith(("[gpu-a] ", "[gpu-b] ")) for ln in logv.view.lines)
            assert any("[gpu-b]" in ln and "out of memory" in ln.lower() for ln in logv.view.lines)
            # t: gpu-a only, then gpu-b only, then every node
            await pilot.press("t")
            await until(pilot, lambda: logv.node == "gpu-a")
            assert logv.view.lines and all(ln.startswith("[gpu-a]") for ln in logv.view.lines)
            assert "node gpu-a only" in logv.status_text
            await pilot.press("t")
            await until(pilot, lambda: logv.node == "gpu-b")
            assert logv.view.lines and all(ln.startswith("[gpu-b]") for ln in logv.view.lines)
            await pilot.press("t")
            await until(pilot, lambda: logv.node is None)
            assert {ln[:7] for ln in logv.view.lines} == {"[gpu-a]", "[gpu-b]"}
            # one connection per node
            assert sorted(made) == NODES
            # stop: the confirmation's default is Cancel (enter on it stops nothing)
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            assert app.screen.focused.id == "confirm-cancel"
            await pilot.press("enter")
            await until(pilot, lambda: app.screen is scr)
            assert await L.process_alive(local, run_a.pid, run_a.starttime)
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
            await pilot.press("y")
            await until(pilot, lambda: scr.stop_summary is not None, 30)
            assert not await L.process_alive(local, run_a.pid, run_a.starttime)
            assert D.DeploymentStore().load(rec.deploy_id).status == "stopped"
            assert RunStore().load(run_a.run_id).status == "stopped"
            await until_shown(pilot, "stopped (by you)", timeout=10)
    finally:
        for run in await L.list_host_runs(local):
            if run.alive:
                await L.stop_run(local, RunStore().load(run.run_id), grace=1)


class FakeCollector:
    """A deployment collector with scripted samples (no host, no clock)."""

    def __init__(self, samples: list[DeploymentSnapshot]) -> None:
        self.samples = list(samples)
        self.closed = False
        self.stopped = False

    async def start(self) -> None:
        pass

    async def sample(self) -> DeploymentSnapshot:
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]

    async def stop(self, *, grace: float = 30.0):
        self.stopped = True
        return [], {}

    async def aclose(self) -> None:
        self.closed = True


def member(node: str, rank: int, state: str, **kw) -> D.MemberState:
    p = StartupProgress(f"run-{node}", "sglang", state, "weight-loading", fraction=0.5, eta=30.0, **kw)
    return D.MemberState(node, rank, "head" if rank == 0 else "worker", f"run-{node}", state, progress=p)


async def test_lines_keep_arriving_and_closing_ends_the_collector():
    runs = [type("R", (), {"run_id": f"run-{n}"})() for n in NODES]
    rec = record(runs)
    first = DeploymentSnapshot(
        rec.deploy_id,
        tuple(NODES),
        (member("gpu-a", 0, "starting"), member("gpu-b", 1, "starting")),
        D.Verdict("starting"),
        lines=(("gpu-a", "line one"), ("gpu-b", "[not markup] line two")),
    )
    second = DeploymentSnapshot(
        rec.deploy_id,
        tuple(NODES),
        first.members,
        D.Verdict("starting"),
        lines=(("gpu-b", "line three"),),
        dropped=7,
    )
    third = DeploymentSnapshot(rec.deploy_id, tuple(NODES), first.members, D.Verdict("starting"))
    col = FakeCollector([first, second, third])
    app = make_app(gpu=FakeGpu([gpu_status(2)]), host_source=FakeHost(), servers=FakeServers(), target="t")
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await app.push_screen(DeploymentScreen(rec, collector=col, interval=0.05))
        scr = app.screen
        logv = scr.query_one(MergedLog)
        await until(pilot, lambda: len(logv.view.lines) >= 4)
        assert logv.view.lines[:4] == [
            "[gpu-a] line one",
            "[gpu-b] [not markup] line two",
            "[gpu-b] line three",
            "── 7 lines dropped (the view fell behind) ──",
        ]
        # no verdict line while nothing is wrong; the keys modal lists the node filter and the stop
        assert not scr.query_one("#deploy-verdict").has_class("-shown")
        await pilot.press("question_mark")
        await until_shown(pilot, "Node", "Stop deployment", "one node's log lines")
        await pilot.press("escape")
        await pilot.press("escape")
        await until(pilot, lambda: col.closed)


async def test_a_deployment_member_on_status_opens_the_deployment_view():
    """enter on a server that is one node of a deployment opens the deployment's view (every
    node), not that one run's log."""
    from tests.ui.test_ui_status import app_with

    local = LocalHost()
    argv_a, port = fake("sglang", None, "--load-seconds", "0.3")
    argv_b, _ = fake("sglang", None, "--load-seconds", "0.3")
    run_a = await L.launch(local, argv_a, engine="sglang", port=port)
    run_b = await L.launch(local, argv_b, engine="sglang", check=False)
    rec = record([run_a, run_b], port)
    rec.nodes = ["local", "127.0.0.1"]  # loopback only: the view opens one host per node
    rec.members[0].node, rec.members[1].node = rec.nodes
    D.DeploymentStore().save(rec)
    servers = FakeServers((server("sglang-r1-2n", port=port, run_id=run_a.run_id),))
    app = app_with(servers=servers)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            from tunedeck.widgets.server_panel import ServerPanel

            panel = app.screen.query_one(ServerPanel)
            await until(pilot, lambda: panel.table.row_count == 1)
            panel.table.focus()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            assert app.screen.record.deploy_id == rec.deploy_id
            await until_shown(pilot, f"deployment {rec.deploy_id}")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, DeploymentScreen))
    finally:
        for run in await L.list_host_runs(local):
            if run.alive:
                await L.stop_run(local, RunStore().load(run.run_id), grace=1)


async def test_t_on_nodes_named_user_at_host_port_shows_each_nodes_lines():
    """Nodes written ``user@host:port`` (the README's form) hold colons themselves: the node of a
    tag is matched, not cut at the first colon (that gave an empty log for every such node)."""
    from tunedeck.widgets.deployment import node_styles
    from tunedeck.widgets.severity_log import tag_node

    nodes = ["op@10.0.0.2:2222", "op@10.0.0.2:2223"]
    tags = [nodes[0], f"{nodes[0]}:ray", nodes[1], f"{nodes[1]}:ray"]
    assert [tag_node(t, nodes) for t in tags] == [nodes[0], nodes[0], nodes[1], nodes[1]]

    class One(App):
        def compose(self):
            yield MergedLog(id="m")

    app = One()
    async with app.run_test(size=(120, 30)) as pilot:
        logv = app.query_one(MergedLog)
        logv.set_tag_styles(node_styles(nodes), tags)
        logv.append_tagged([(t, f"line of {t}") for t in tags])
        logv.flush_now()
        for node in nodes:
            logv.set_node(node)
            await pilot.pause()
            shown = logv.view.lines
            assert len(shown) == 2 and all(f"line of {node}" in ln for ln in shown), shown
        logv.set_node(None)
        await pilot.pause()
        assert len(logv.view.lines) == 4
