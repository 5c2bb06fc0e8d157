"""HostCollector: psutil locally, one /proc script otherwise; bounded GPU history."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.ui_fakes import DeadHost
from tunedeck.collectors.history import GpuHistory
from tunedeck.collectors.hoststats import HostCollector, cpu_percent, parse_proc
from tunedeck.hostops.hosts import Command, HostError, RunResult
from tunedeck.hostops.localhost import LocalHost
from tunedeck.model import NA, GpuSnapshot, GpuStatus

pytestmark = pytest.mark.timeout(30)

PROC_TEXT = """gpu-box-7
@@stat
cpu  1000 0 500 8000 500 0 0 0 0 0
cpu0 500 0 250 4000 250 0 0 0 0 0
cpu1 500 0 250 4000 250 0 0 0 0 0
@@meminfo
MemTotal:       1000000 kB
MemFree:         100000 kB
MemAvailable:    400000 kB
@@loadavg
1.50 0.75 0.25 3/900 12345
@@uptime
93784.12 180000.00
"""


def test_parse_proc() -> None:
    p = parse_proc(PROC_TEXT)
    assert p["hostname"] == "gpu-box-7"
    assert p["cpu_jiffies"] == (10000, 8500)
    assert p["cpu_count"] == 2
    assert p["mem_total"] == 1000000 * 1024 and p["mem_used"] == 600000 * 1024
    assert p["load"] == (1.5, 0.75, 0.25)
    assert p["uptime"] == pytest.approx(93784.12)


def test_cpu_percent_from_deltas() -> None:
    assert cpu_percent(None, (100, 50)) is NA
    assert cpu_percent((10000, 8500), (11000, 8750)) == pytest.approx(75.0)
    assert cpu_percent((100, 50), (100, 50)) is NA  # no time passed


@pytest.mark.parametrize("use_psutil", [True, False])
async def test_local_samples(use_psutil: bool) -> None:
    c = HostCollector(LocalHost(), use_psutil=use_psutil)
    first = await c.sample()
    assert first.cpu_percent is NA  # needs two samples
    assert first.hostname == socket.gethostname()
    assert first.mem_total > first.mem_used > 0
    assert first.cpu_count >= 1 and first.uptime > 0 and first.load1 >= 0
    await asyncio.sleep(0.3)  # let the jiffy counters move
    second = await c.sample()
    assert 0.0 <= second.cpu_percent <= 100.0


class _NoProcHost(LocalHost):
    is_local = False

    async def _run(self, cmd: Command) -> RunResult:
        return RunResult(1, "", "sh: 1: cannot open /proc/stat: Permission denied")


async def test_remote_failures_raise_host_error() -> None:
    with pytest.raises(HostError) as e:
        await HostCollector(DeadHost()).sample()
    assert e.value.kind == "unreachable"
    with pytest.raises(HostError, match="Permission denied"):
        await HostCollector(_NoProcHost()).sample()


def _status(utils: list, used: int = 40960) -> GpuStatus:
    gpus = tuple(
        GpuSnapshot(i, f"GPU-{i}", "G", utilization=u, memory_used=used, memory_total=81920)
        for i, u in enumerate(utils)
    )
    return GpuStatus("ok", gpus)


def test_history_is_bounded_and_keeps_na() -> None:
    h = GpuHistory(maxlen=5)
    for i in range(12):
        h.add(_status([i, NA]))
    assert h.util(0) == (7, 8, 9, 10, 11)
    assert all(v is NA for v in h.util(1))
    assert h.memory(0)[-1] == pytest.approx(50.0)
    h.add(GpuStatus("unresponsive"))  # error states add nothing
    assert len(h.util(0)) == 5
    for _ in range(5):  # GPU 1 vanished: gaps, then forgotten
        h.add(_status([1]))
    assert h.indices() == (0,)
    big = GpuHistory(maxlen=3, max_gpus=4)
    big.add(_status(list(range(10))))
    assert big.indices() == (0, 1, 2, 3)
