"""The dashboard on the real collectors (tui.collectors) with a fake nvidia-smi on a LocalHost."""

from __future__ import annotations

import pytest

pytest.importorskip("tui.collectors.gpu")
fake_smi = pytest.importorskip("tests.fake_smi")

from tests.test_ui_status import SIZE, cell, until  # noqa: E402
from tui.app import make_app  # noqa: E402
from tui.services.hosts import LocalHost  # noqa: E402
from widgets.gpu_table import GpuStateLine, GpuTable  # noqa: E402
from widgets.host_panel import HostPanel  # noqa: E402

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
