"""GpuCollector against a fake nvidia-smi (real processes, first on PATH)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.fake_smi import FakeSmi
from tests.ui_fakes import DeadHost
from tunedeck.collectors.gpu import GpuCollector
from tunedeck.hostops.localhost import LocalHost
from tunedeck.model import NA, GpuStatus

pytestmark = pytest.mark.timeout(40)


@pytest.fixture
def fake(tmp_path: Path):
    f = FakeSmi(tmp_path, gpus=2)
    yield f
    f.kill_all()


def _host(fake: FakeSmi) -> LocalHost:
    return LocalHost(env_overlay={"PATH": fake.path_env()})


async def _take(agen: AsyncIterator[GpuStatus], n: int, timeout: float = 15.0) -> list[GpuStatus]:
    out: list[GpuStatus] = []

    async def run() -> None:
        async for st in agen:
            out.append(st)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def _first(c: GpuCollector, n: int) -> list[GpuStatus]:
    """The first ``n`` statuses of a new stream of ``c``, the stream closed after."""
    agen = c.stream()
    try:
        return await _take(agen, n)
    finally:
        await agen.aclose()


async def test_stream_yields_blocks_from_one_process(fake: FakeSmi) -> None:
    fake.set_apps("4242, GPU-fake-1, 5000, sglang::scheduler_TP1\n")
    c = GpuCollector(_host(fake), 0.2, proc_interval=0.2)
    agen = c.stream()
    try:
        got = await _take(agen, 6)
        assert fake.alive_queries() == 1
    finally:
        await agen.aclose()
    assert all(s.state == "ok" for s in got)
    assert all(len(s.gpus) == 2 for s in got)
    assert [g.index for g in got[0].gpus] == [0, 1]
    assert got[0].gpus[1].uuid == "GPU-fake-1" and got[0].gpus[0].memory_total == 81559
    # blocks come from successive iterations of the -lms loop
    mems = [s.gpus[0].memory_used for s in got]
    assert mems == sorted(mems) and mems[-1] > mems[0]
    # the process list is polled separately and joined on gpu_uuid
    procs = got[-1].processes
    assert [(p.pid, p.gpu_index, p.used_memory) for p in procs] == [(4242, 1, 5000)]
    assert c.starts == 1
    queries = [a for _, a in fake.calls() if "--query-gpu" in a]
    assert len(queries) == 1 and "-lms 200" in queries[0]
    await asyncio.sleep(0.2)
    assert fake.alive_queries() == 0  # closing the stream ends the process


async def test_na_cells_are_na_not_zero(fake: FakeSmi) -> None:
    fake.set_mode("na")
    (st,) = await _first(GpuCollector(_host(fake), 0.2), 1)
    g = st.gpus[0]
    assert st.state == "ok"
    assert g.utilization is NA and g.power_draw is NA and g.power_limit is NA
    assert g.memory_used == 1024 and g.clock_sm == 1980


@pytest.mark.parametrize(
    "mode,state,words",
    [
        ("exit9", "driver-not-loaded", "couldn't communicate"),
        ("exit12", "nvml-not-found", "libnvidia-ml"),
        ("exit15", "gpu-lost", "GPU is lost"),
        ("exit18", "nvml-mismatch", "version mismatch"),
    ],
)
async def test_driver_failures_are_states(fake: FakeSmi, mode: str, state: str, words: str) -> None:
    fake.set_mode(mode)
    c = GpuCollector(_host(fake), 0.2, max_backoff=0.5)
    agen = c.stream()
    try:
        t0 = time.time()
        first, second = await _take(agen, 2)
    finally:
        await agen.aclose()
    for st in (first, second):
        assert st.state == state and words in st.message and st.gpus == ()
    assert first.retry_at > t0
    assert c.starts == 2  # retried after the backoff
    once = await c.sample_once()
    assert once.state == state


async def test_hang_watchdog_single_process_and_recovery(fake: FakeSmi) -> None:
    fake.set_mode("hang")
    c = GpuCollector(_host(fake), 0.2, watchdog=1.0, max_backoff=0.5)
    most = 0
    stop = False

    async def watch() -> None:
        nonlocal most
        while not stop:
            most = max(most, fake.alive_queries())
            await asyncio.sleep(0.05)

    w = asyncio.create_task(watch())
    agen = c.stream()
    try:
        t0 = time.monotonic()
        (first,) = await _take(agen, 1)
        elapsed = time.monotonic() - t0
        assert first.state == "unresponsive" and "1 s" in first.message
        assert 0.9 <= elapsed < 3.0
        second, third = await _take(agen, 2)
        assert second.state == third.state == "unresponsive"
        assert c.starts >= 3
        fake.set_mode("ok")
        for _ in range(5):
            (st,) = await _take(agen, 1)
            if st.state == "ok":
                break
        assert st.state == "ok" and len(st.gpus) == 2
    finally:
        await agen.aclose()
        stop = True
        await w
    assert most == 1, f"{most} nvidia-smi query processes were alive at once"
    assert fake.alive_queries() == 0


async def test_mode_change_mid_stream_then_recovery(fake: FakeSmi) -> None:
    c = GpuCollector(_host(fake), 0.2, max_backoff=0.3)
    agen = c.stream()
    states: list[str] = []
    try:

        async def run() -> None:
            async for st in agen:
                states.append(st.state)
                if len(states) == 3:
                    fake.set_mode("exit15")
                if "gpu-lost" in states and st.state == "gpu-lost":
                    fake.set_mode("ok")
                if "gpu-lost" in states and st.state == "ok":
                    return

        await asyncio.wait_for(run(), 15)
    finally:
        await agen.aclose()
    assert states[:3] == ["ok"] * 3
    assert "gpu-lost" in states and states[-1] == "ok"


async def test_missing_nvidia_smi(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/timeout", bindir / "timeout")
    host = LocalHost(env_overlay={"PATH": str(bindir)})
    c = GpuCollector(host, 0.2, max_backoff=0.2)
    (st,) = await _first(c, 1)
    assert st.state == "no-nvidia-smi"
    assert (await c.sample_once()).state == "no-nvidia-smi"


async def test_sample_once(fake: FakeSmi) -> None:
    fake.set_apps("77, GPU-fake-0, 123, python3\n")
    st = await GpuCollector(_host(fake)).sample_once()
    assert st.state == "ok" and len(st.gpus) == 2
    assert st.processes[0].gpu_index == 0 and st.processes[0].name == "python3"
    assert not any("-lms" in a for _, a in fake.calls())


async def test_unreachable_host_is_a_state_with_retry() -> None:
    c = GpuCollector(DeadHost(), 0.2, max_backoff=0.2)
    a, b = await _first(c, 2)
    assert a.state == b.state == "host-unreachable"
    assert "refused" in a.message and a.retry_at > 0
    assert (await c.sample_once()).state == "host-unreachable"


async def test_running_but_only_error_lines_names_the_state(fake: FakeSmi) -> None:
    fake.set_mode("lostloop")
    c = GpuCollector(_host(fake), 0.2, watchdog=1.0, max_backoff=0.3)
    (st,) = await _first(c, 1)
    assert st.state == "gpu-lost" and "GPU is lost" in st.message
    await asyncio.sleep(0.2)
    assert fake.alive_queries() == 0


async def test_close_ends_a_process_poll_that_shrugged_off_its_cancel(
    fake: FakeSmi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On Python 3.11, asyncio.wait_for returns a result that lands together with a
    # cancel instead of raising; the process poll then went on and the close hung.
    shrugged = asyncio.Event()

    async def shrugging_poll(self: GpuCollector, gpus: object) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            shrugged.set()
            return None  # what a swallowed cancel looks like to the poll loop

    monkeypatch.setattr(GpuCollector, "_poll_processes_once", shrugging_poll)
    c = GpuCollector(_host(fake), 0.2, proc_interval=30)
    agen = c.stream()
    try:
        await _take(agen, 2)
    finally:
        t0 = time.monotonic()
        await asyncio.wait_for(agen.aclose(), 15)
    assert shrugged.is_set()
    assert time.monotonic() - t0 < 15
    await asyncio.sleep(0.2)
    assert fake.alive_queries() == 0


async def test_output_that_holds_no_gpu_row_is_an_error_naming_it(fake: FakeSmi) -> None:
    """nvidia-smi answers, but with nothing the query asked for: the panel says what it got
    instead of going blank (one-shot) or blaming silence (stream); the host's text is made safe."""
    fake.set_mode("garbage")
    st = await GpuCollector(_host(fake)).sample_once()
    assert st.state == "error" and st.message.startswith("nvidia-smi output not understood: GPU0: temp=40C")
    assert "\x1b" not in st.message
    c = GpuCollector(_host(fake), 0.2, watchdog=1.0, max_backoff=0.3)
    (st,) = await _first(c, 1)
    assert st.state == "error" and "not understood: GPU0: temp=40C" in st.message, st
