"""GpuCollector / HostCollector over a real sshd on loopback with a fake nvidia-smi on the remote PATH.

The sshd is stopped mid-stream: the collector reports the lost link as a state
with a retry time, then recovers by itself once sshd is back.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

from tests.fake_smi import FakeSmi
from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import quick_host
from tunedeck.collectors.gpu import GpuCollector
from tunedeck.collectors.hoststats import HostCollector
from tunedeck.hostops.ssh import SshHost
from tunedeck.model import GpuStatus

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(90)]


@pytest.fixture
def remote_smi(sshd: SshdServer) -> Iterator[FakeSmi]:
    """A fake nvidia-smi (8 GPUs) first on the remote PATH of the non-root test user.

    The non-root user's login shell reads no rc files, so stopping sshd mid-session
    cannot leave anything half-done in a shell start-up.
    """
    base = Path(tempfile.mkdtemp(prefix="tunedeck-remote-smi-"))
    base.chmod(0o755)
    fake = FakeSmi(base, gpus=8)
    fake.dir.chmod(0o777)  # the remote user logs its calls there
    exe = sshd.shim_dir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec {shlex.quote(str(fake.dir / "nvidia-smi"))} "$@"\n')
    exe.chmod(0o755)
    try:
        yield fake
    finally:
        exe.unlink(missing_ok=True)
        fake.kill_all()
        shutil.rmtree(base, ignore_errors=True)


def _host(server: SshdServer) -> SshHost:
    return quick_host(server.target(), connect_timeout=3)


async def _next(agen: AsyncIterator[GpuStatus], timeout: float = 20.0) -> GpuStatus:
    return await asyncio.wait_for(agen.__anext__(), timeout)


async def test_remote_gpus_lost_link_and_recovery(sshd: SshdServer, remote_smi: FakeSmi) -> None:
    host = _host(sshd)
    c = GpuCollector(host, 0.5, watchdog=4, max_backoff=1)
    agen = c.stream()
    try:
        first = await _next(agen)
        assert first.state == "ok" and len(first.gpus) == 8
        assert first.gpus[7].uuid == "GPU-fake-7" and first.gpus[0].memory_total == 81559
        second = await _next(agen)
        assert second.state == "ok" and second.time > first.time
        assert remote_smi.alive_queries() == 1  # one stream on the host

        sshd.stop()  # the host goes away mid-stream
        t0 = time.monotonic()
        st = await _next(agen)
        while st.state == "ok":
            st = await _next(agen)
        assert st.state == "host-unreachable", st
        assert st.retry_at > time.time() - 1 and st.message
        assert time.monotonic() - t0 < 15

        sshd.start()
        for _ in range(20):
            st = await _next(agen, 30)
            if st.state == "ok":
                break
        assert st.state == "ok" and len(st.gpus) == 8
    finally:
        await agen.aclose()
        await host.close()
    await asyncio.sleep(0.5)
    assert remote_smi.alive_queries() == 0  # closing ended the remote nvidia-smi


async def test_remote_host_stats_and_one_shot(sshd: SshdServer, remote_smi: FakeSmi) -> None:
    host = _host(sshd)
    try:
        hc = HostCollector(host)
        assert not hc.use_psutil
        a = await hc.sample()
        await asyncio.sleep(0.3)
        b = await hc.sample()
        assert a.cpu_percent is not None and b.mem_total > b.mem_used > 0
        assert 0 <= b.cpu_percent <= 100 and b.cpu_count >= 1 and b.uptime > 0
        st = await GpuCollector(host).sample_once()
        assert st.state == "ok" and len(st.gpus) == 8
    finally:
        await host.close()
