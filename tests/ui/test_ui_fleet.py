"""Pilot tests of the fleet view (several hosts on one screen), on scripted collectors."""

from __future__ import annotations

import time

import pytest

from tests.deployfix import tp_deployment
from tests.ui.test_ui_status import until, until_shown
from tests.ui_fakes import FakeGpu, FakeHost, FakeServers, gpu_status, host_stats, server, unreachable
from tests.ui_text import screen_text
from tunedeck.collectors.fleet import FleetMember
from tunedeck.collectors.sources import Sources
from tunedeck.hostops.hosts import HostError
from tunedeck.model import NA, GpuStatus, summarise_gpus
from tunedeck.ui.fleet_app import FleetApp
from tunedeck.widgets.fleet_table import FleetNotes, FleetServerTable, FleetTable

pytestmark = pytest.mark.timeout(30)
SIZE = (120, 40)


def member(
    target: str,
    gpus: int = 8,
    host: FakeHost | None = None,
    servers: FakeServers | None = None,
    gpu: FakeGpu | None = None,
) -> FleetMember:
    return FleetMember(
        target,
        None,
        Sources(
            gpu=gpu or FakeGpu([gpu_status(gpus, t=0)]),
            host=host or FakeHost(host_stats(hostname=target)),
            servers=servers or FakeServers(()),
        ),
    )


def fleet(*members: FleetMember, **kw) -> FleetApp:
    kw.setdefault("interval", 0.05)
    kw.setdefault("backoff", lambda attempt: 0.2)
    return FleetApp(members, keymap={}, **kw)


def cell(table, row: str, col: str) -> str:
    from textual.widgets.data_table import CellDoesNotExist

    try:
        return table.get_cell(row, col).plain
    except CellDoesNotExist:
        return "<no cell>"


def three_hosts() -> FleetApp:
    return fleet(
        member("gpu-a", 8, servers=FakeServers((server("sglang-tuned"),))),
        member("gpu-b", 4, servers=FakeServers((server("vllm-base", engine="vllm", port=8000, state="starting"),))),
        member(
            "gpu-c",
            host=FakeHost(unreachable("connect to 10.0.0.9 port 22: Connection refused")),
            gpu=FakeGpu([GpuStatus("host-unreachable", message="connection refused")]),
        ),
    )


async def test_a_row_group_per_host_with_gpus_summarised_and_servers_across_hosts():
    app = three_hosts()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(FleetTable)
        await until(
            pilot,
            lambda: (
                cell(table, "host:gpu-a", "state") == "ok"
                and cell(table, "host:gpu-b", "state") == "ok"
                and cell(table, "host:gpu-c", "state") == "unreachable"
            ),
        )
        assert [str(k.value) for k in table.rows] == ["host:gpu-a", "host:gpu-b", "host:gpu-c"]
        a = summarise_gpus(gpu_status(8, t=0))
        assert cell(table, "host:gpu-a", "gpus") == "8" and cell(table, "host:gpu-b", "gpus") == "4"
        assert cell(table, "host:gpu-a", "model") == "H100 80GB HBM3"
        assert cell(table, "host:gpu-a", "util") == f"{a.util_mean:.0f}%"
        assert cell(table, "host:gpu-a", "temp") == f"{a.temp_max:.0f}°"
        assert f"{a.mem_used / 1024:.0f}/{a.mem_total / 1024:.0f}G" in cell(table, "host:gpu-a", "mem")
        assert cell(table, "host:gpu-a", "power") == f"{a.power_draw:.0f}/{a.power_limit:.0f}W"
        assert cell(table, "host:gpu-a", "servers") == "1/1"
        # the failed host: its state, and its reason under the table; the others keep updating
        notes = str(app.screen.query_one(FleetNotes).content)
        assert notes.startswith("gpu-c: unreachable: connect to 10.0.0.9 port 22: Connection refused — retrying")
        assert "(attempt " in notes and "gpu-a" not in notes and "gpu-b" not in notes
        assert cell(table, "host:gpu-c", "gpus") == ""
        srv = app.screen.query_one(FleetServerTable)
        await until(pilot, lambda: srv.row_count == 2)
        assert [cell(srv, str(k.value), "host") for k in srv.rows] == ["gpu-a", "gpu-b"]
        assert cell(srv, "srv:gpu-b:srv-vllm-base-8000", "state") == "starting"
        await until_shown(pilot, "Hosts (2/3 up, 12 GPUs)")


async def test_e_and_enter_expand_a_host_to_its_gpus_and_collapse_it_again():
    app = three_hosts()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(FleetTable)
        await until(pilot, lambda: cell(table, "host:gpu-b", "state") == "ok")
        table.focus()
        table.move_cursor(row=1)  # gpu-b
        await pilot.press("e")
        keys = [str(k.value) for k in table.rows]
        assert keys == [
            "host:gpu-a",
            "host:gpu-b",
            "gpu:gpu-b:0",
            "gpu:gpu-b:1",
            "gpu:gpu-b:2",
            "gpu:gpu-b:3",
            "host:gpu-c",
        ]
        assert cell(table, "host:gpu-b", "host").startswith("▾ ")
        assert cell(table, "gpu:gpu-b:3", "host") == "  └ GPU 3"
        assert cell(table, "gpu:gpu-b:2", "util") == f"{gpu_status(4).gpus[2].utilization:.0f}%"
        assert table.cursor_key == "host:gpu-b"  # the cursor stays on the host row
        table.move_cursor(row=3)  # a GPU row: e collapses its host
        await pilot.press("e")
        assert [str(k.value) for k in table.rows] == ["host:gpu-a", "host:gpu-b", "host:gpu-c"]
        assert cell(table, "host:gpu-b", "host").startswith("▸ ")
        table.move_cursor(row=0)
        await pilot.press("enter")
        assert len(table.rows) == 3 + 8
        await pilot.press("enter")
        assert len(table.rows) == 3
        await pilot.press("E")  # every host (the failed one has no GPU rows)
        assert len(table.rows) == 3 + 8 + 4
        await pilot.press("E")
        assert len(table.rows) == 3


async def test_a_refused_host_is_failed_until_r_and_an_unreachable_one_recovers_by_itself():
    refused = HostError("auth-failed", "Permission denied (publickey)", target="gpu-x")
    flaky = FakeHost(unreachable(), unreachable(), host_stats(hostname="gpu-y"))
    auth = FakeHost(refused, host_stats(hostname="gpu-x"))
    app = fleet(member("gpu-ok"), member("gpu-x", host=auth), member("gpu-y", host=flaky))
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(FleetTable)
        notes = app.screen.query_one(FleetNotes)
        await until(pilot, lambda: cell(table, "host:gpu-x", "state") == "auth failed")
        assert "gpu-x: authentication failed: Permission denied (publickey) — not retrying; press r" in str(
            notes.content
        )
        # the unreachable host comes back without anyone acting; the refused one stays failed
        await until(pilot, lambda: cell(table, "host:gpu-y", "state") == "ok", timeout=5)
        assert "gpu-y" not in str(notes.content)
        assert cell(table, "host:gpu-ok", "state") == "ok"
        assert auth.calls == 1  # not retried
        await pilot.press("r")
        # r asks the host again; it reads ok only once the host itself answers, not on its GPU figures
        # (within 15 s: the restart first waits, at most 5 s, for the host's old poll workers to
        # end, and once in a loaded full run they took all of it)
        await until(pilot, lambda: cell(table, "host:gpu-x", "state") == "ok", timeout=15)
        assert auth.calls >= 2
        await until(pilot, lambda: not notes.has_class("-shown"))


async def test_a_host_seen_by_its_gpu_feed_alone_counts_down_to_the_feeds_next_attempt():
    """Without a host sampler the GPU feed tells the link, as on the single-host dashboard: the
    feed's next attempt is the retry countdown under the table, and a sample again is ok."""
    gpu = FakeGpu([gpu_status(2, t=0)])
    app = fleet(member("gpu-a"), FleetMember("gpu-d", None, Sources(gpu=gpu, host=None, servers=None)))
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(FleetTable)
        notes = app.screen.query_one(FleetNotes)
        await until(pilot, lambda: cell(table, "host:gpu-d", "state") == "ok")
        gpu.push(GpuStatus("host-unreachable", message="connection refused", retry_at=time.time() + 30))
        await until(pilot, lambda: cell(table, "host:gpu-d", "state") == "unreachable")
        await until(pilot, lambda: "gpu-d: unreachable: connection refused — retrying in " in str(notes.content))
        assert "(attempt 1)" in str(notes.content)
        gpu.push(gpu_status(2, t=1))
        await until(pilot, lambda: cell(table, "host:gpu-d", "state") == "ok")


async def test_question_mark_lists_the_fleet_keys():
    from tunedeck.ui.screens.modals import KeysModal

    app = fleet(member("gpu-a"), member("gpu-b"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, KeysModal))
        text = screen_text(app)
        assert "Expand" in text and "Reconnect" in text and "Quit" in text


def test_summary_sums_only_what_every_gpu_reports():
    st = gpu_status(4)
    s = summarise_gpus(st)
    assert s.count == 4 and s.models == 1 and s.model == "H100 80GB HBM3"
    assert s.mem_total == 4 * 81559.0 and s.power_limit == 2800.0
    assert s.temp_max == max(g.temperature for g in st.gpus)
    from dataclasses import replace

    partial = GpuStatus("ok", (replace(st.gpus[0], power_draw=NA, utilization=NA),) + st.gpus[1:])
    p = summarise_gpus(partial)
    assert p.power_draw is NA and p.util_mean == sum(g.utilization for g in st.gpus[1:]) / 3
    assert summarise_gpus(GpuStatus("gpu-lost")).count == 0


async def test_deployments_across_the_fleet_with_each_nodes_link_and_enter_opens_one():
    """The deployments of this machine's records with a node in the fleet (stopped ones left out),
    each node marked with its host's link: ✓ up, ✗ down, ? not watched here; enter opens its view."""
    import time as _time

    from tunedeck.services.deploy import DeploymentStore
    from tunedeck.ui.screens.deployment import DeploymentScreen
    from tunedeck.widgets.fleet_table import FleetDeploymentTable

    store = DeploymentStore()

    def rec(dep_id: str, nodes: list[str], status: str, age: float, diagnosis: str | None = None) -> None:
        run_ids = [f"{dep_id}{i:02d}" for i in range(len(nodes))]
        store.save(
            tp_deployment(
                dep_id,
                nodes,
                run_ids,
                serves=False,
                created=_time.time() - age,
                status=status,
                diagnosis=diagnosis,
            )
        )

    rec("aa0100", ["local", "gpu-c"], "ready", 60)
    rec("bb0200", ["gpu-x", "gpu-c"], "failed", 30, "[rank8]: CUDA out of memory on gpu-c")
    rec("cc0300", ["local", "gpu-c"], "stopped", 10)  # stopped: not listed
    rec("dd0400", ["gpu-x", "gpu-y"], "ready", 5)  # no node in the fleet: not listed
    app = fleet(
        member("local"),
        member("gpu-c", host=FakeHost(unreachable("connect to 10.0.0.9 port 22: Connection refused"))),
        deployments_interval=0.1,
    )
    async with app.run_test(size=(160, 44)) as pilot:
        table = app.screen.query_one(FleetDeploymentTable)
        await until(pilot, lambda: table.row_count == 2, timeout=10)
        assert [str(k.value) for k in table.rows] == ["dep:bb0200", "dep:aa0100"]  # newest first
        await until(pilot, lambda: cell(table, "dep:aa0100", "nodes") == "local ✓, gpu-c ✗", timeout=10)
        assert cell(table, "dep:bb0200", "nodes") == "gpu-x ?, gpu-c ✗"
        assert cell(table, "dep:bb0200", "status") == "failed"
        await until_shown(pilot, "Deployments", "[rank8]")  # log text stays text, never markup
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        assert app.screen.record.deploy_id == "aa0100"


def test_a_host_reads_ok_only_once_it_answers_itself():
    """A host whose link is (re)connecting reads ``connecting`` even when its GPU figures are
    fine; once connected, ok; a refused one says why and that it waits for r."""
    from tunedeck.model import LinkState
    from tunedeck.widgets.fleet_table import FleetHost, host_state

    gpus = gpu_status(2)
    assert host_state(FleetHost("h", LinkState("h", "connecting"), gpus))[0] == "connecting"
    assert host_state(FleetHost("h", LinkState("h", "connected"), gpus))[0] == "ok"
    refused = LinkState("h", "failed", 1, None, "Permission denied (publickey)", "auth-failed")
    word, _, note = host_state(FleetHost("h", refused, gpus))
    assert word == "auth failed" and note.endswith("not retrying; press r to try again")


async def test_a_deployment_whose_head_process_dies_reads_failed_with_its_cause_within_two_polls():
    """Nothing follows the deployment: the fleet's own poll re-reads its nodes' processes over the
    fleet's connections, and once the head's process is gone its row reads failed, naming the
    node and the exception its log ends on, by the second poll after the death."""
    import os
    import signal
    import subprocess
    import time as _time

    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.runstore import READY, WORKER_UP, RunRecord, RunStore
    from tunedeck.services.deploy import DeploymentStore
    from tunedeck.ui.messages import DeploymentSamples
    from tunedeck.widgets.fleet_table import FleetDeploymentTable

    served = (
        "[2026-03-02 09:00:01] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=8, port=30000)\n"
        "[2026-03-02 09:00:31] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
        "[2026-03-02 09:00:33] The server is fired up and ready to roll!\n"
    )
    died = (
        "[2026-03-02 09:04:12 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2701, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "[2026-03-02 09:04:12] Received sigquit from a child process. It usually means the child failed.\n"
    )
    # the head's run on this machine, as the launcher leaves it: a folder under TUNEDECK_HOME with
    # the wrapper's pid and start time (a real process), its log and its meta
    proc = subprocess.Popen(["sleep", "600"])
    try:
        with open(f"/proc/{proc.pid}/stat", encoding="ascii") as f:
            starttime = f.read().rsplit(")", 1)[1].split()[19]
        run_dir = os.path.join(os.environ["TUNEDECK_HOME"], "runs", "ee050000")
        os.makedirs(run_dir)
        files = {"run.sh": "", "pid": f"{proc.pid}\n", "starttime": starttime, "log": served}
        files["meta.json"] = '{"engine": "sglang", "port": 30000}'
        for name, text in files.items():
            with open(os.path.join(run_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
        runs = RunStore()
        common = {"engine": "sglang", "port": 30000, "created": _time.time() - 60}
        runs.save(
            RunRecord(
                "ee050000",
                "local",
                ["sglang"],
                status=READY,
                run_dir=run_dir,
                pid=proc.pid,
                starttime=starttime,
                **common,
            )
        )
        runs.save(RunRecord("ee050001", "gpu-c", ["sglang"], status=WORKER_UP, run_dir="/x", pid=1, **common))
        DeploymentStore().save(
            tp_deployment(
                "ee0500",
                ["local", "gpu-c"],
                ["ee050000", "ee050001"],
                serves=False,
                created=_time.time() - 60,
                status=READY,
            )
        )
        samples: list[DeploymentSamples] = []
        app = fleet(
            FleetMember("local", LocalHost(), member("local").sources),
            member("gpu-c"),
            deployments_interval=0.3,
        )

        def hook(m: object) -> None:
            if isinstance(m, DeploymentSamples):
                samples.append(m)

        async with app.run_test(size=(160, 44), message_hook=hook) as pilot:
            table = app.screen.query_one(FleetDeploymentTable)
            # alive: the re-read keeps it ready
            await until(pilot, lambda: len(samples) >= 2 and cell(table, "dep:ee0500", "status") == "ready", timeout=10)
            # the engine dies: its last words, the wrapper's exit status, the wrapper gone
            with open(os.path.join(run_dir, "log"), "a", encoding="utf-8") as f:
                f.write(died)
            with open(os.path.join(run_dir, "rc"), "w", encoding="ascii") as f:
                f.write("1\n")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            before = len(samples)
            await until(pilot, lambda: cell(table, "dep:ee0500", "status") == "failed", timeout=10)
            after = [s.deployments[0].status for s in samples[before:]]
            assert "failed" in after[:2], after  # a poll may have listed the processes before the kill
            note = cell(table, "dep:ee0500", "note")
            assert note.startswith("node A (local) failed first: RuntimeError: CUDA error: an illegal memory"), note
        assert DeploymentStore().load("ee0500").first_failed == "local"
        assert RunStore().load("ee050000").status == "failed"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
