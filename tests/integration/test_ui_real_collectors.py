"""The dashboard on the real collectors (tunedeck.collectors) with a fake nvidia-smi on a LocalHost."""

from __future__ import annotations

import pytest

from tests import fake_smi
from tests.ui.test_ui_status import SIZE, cell, until, until_shown
from tunedeck.hostops.localhost import LocalHost
from tunedeck.ui.app import make_app
from tunedeck.widgets.gpu_table import GpuStateLine, GpuTable
from tunedeck.widgets.host_panel import HostPanel

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("exit9", "NVIDIA driver not loaded (nvidia-smi exit 9)"),
        ("exit12", "NVML library missing (nvidia-smi exit 12)"),
        ("exit15", "GPU lost — fell off the bus (nvidia-smi exit 15)"),
        ("exit18", "driver/library version mismatch (nvidia-smi exit 18)"),
    ],
)
async def test_real_gpu_collector_states(tmp_path, mode, expected):
    fake = fake_smi.FakeSmi(tmp_path, gpus=2)
    host = LocalHost("local", env_overlay={"PATH": fake.path_env()})
    app = make_app(host, interval=0.2)
    try:
        async with app.run_test(size=SIZE) as pilot:
            table = app.screen.query_one(GpuTable)
            await until(pilot, lambda: table.row_count == 2, timeout=15)
            assert cell(table, "gpu-0", "name") == "Fake GPU"
            await until(pilot, lambda: app.screen.query_one(HostPanel).stats is not None, timeout=10)
            fake.set_mode(mode)
            line = app.screen.query_one(GpuStateLine)
            await until(pilot, lambda: expected in str(line.content), timeout=15)
    finally:
        fake.kill_all()


async def test_real_gpu_collector_na_cells(tmp_path):
    fake = fake_smi.FakeSmi(tmp_path, gpus=1)
    fake.set_mode("na")
    app = make_app(LocalHost("local", env_overlay={"PATH": fake.path_env()}), interval=0.2)
    try:
        async with app.run_test(size=SIZE) as pilot:
            table = app.screen.query_one(GpuTable)
            await until(pilot, lambda: table.row_count == 1, timeout=15)
            assert cell(table, "gpu-0", "util") == "N/A"
            assert cell(table, "gpu-0", "power") == "N/A"
            assert cell(table, "gpu-0", "sm") == "1980MHz"
    finally:
        fake.kill_all()


async def test_real_server_collector_states(tmp_path):
    """A real sim SGLang without --enable-metrics says so; a server on a closed port is down/refused."""
    from tests.simfix import SimProc, free_port
    from tunedeck.collectors.servers import ServerSpec
    from tunedeck.collectors.sources import default_sources
    from tunedeck.widgets.server_panel import METRICS_DISABLED, ServerPanel

    fake = fake_smi.FakeSmi(tmp_path, gpus=1)
    host = LocalHost("local", env_overlay={"PATH": fake.path_env()})
    port, closed = free_port(), free_port()
    with SimProc("sglang", "--model-path", "m", "--tp", "8", "--port", str(port), "--sim-load-seconds", "0.2") as sim:
        sim.wait_ready(30)
        specs = [ServerSpec("nometrics", "sglang", port), ServerSpec("gone", "vllm", closed)]
        app = make_app(host, sources=default_sources(host, interval=0.3, servers=specs), interval=0.3)
        try:
            async with app.run_test(size=SIZE) as pilot:
                panel = app.screen.query_one(ServerPanel)
                await until(
                    pilot,
                    lambda: panel.servers is not None and len(panel.servers) == 2 and panel.servers[0].state == "ready",
                    timeout=20,
                )
                assert cell(panel.table, f"srv-nometrics-{port}", "state") == "ready"
                assert cell(panel.table, f"srv-gone-{closed}", "state") == "down"
                await until_shown(pilot, f"nometrics: {METRICS_DISABLED}", "gone: connection refused")
                notes = panel.query_one("#server-notes")
                assert panel.region.contains_region(notes.region)  # the panel grew with its notes
                assert notes.region.height == 2
        finally:
            fake.kill_all()
