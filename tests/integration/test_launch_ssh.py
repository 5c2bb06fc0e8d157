"""Launch over a real sshd, drop the SSH link during the load, reconnect: the log follow
continues with no missing or repeated lines and the server is never interrupted."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.integration.test_launcher import FAKE, free_port
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tunedeck.hostops import launcher as L
from tunedeck.hostops import runstore
from tunedeck.hostops.ssh import SshHost
from tunedeck.hostops.tracker import StartupTracker

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(90)]


def mkhost(server: SshdServer) -> SshHost:
    # root: the remote side runs this machine's Python (the fake server)
    return SshHost(
        server.target(ROOT_USER),
        keepalive_interval=1,
        keepalive_count_max=3,
        backoff_base=0.05,
        backoff_cap=0.5,
        retry_attempts=5,
    )  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    """Exists and is not a zombie (a zombie has ended; PID 1 may take a while to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def starttime(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


async def test_drop_ssh_during_load_follow_resumes_gapless(sshd: SshdServer) -> None:
    port = free_port()
    argv = [sys.executable, FAKE, "--engine", "sglang", "--port", str(port), "--numbered", "500", "--load-seconds", "2"]
    host = mkhost(sshd)
    got = bytearray()
    try:
        rec = await L.launch(host, argv, engine="sglang", port=port, profile="ssh-fake")
        assert rec.run_dir and rec.run_dir.startswith(str(sshd.remote_home))
        st0 = starttime(rec.pid)
        tracker = StartupTracker(host, rec, stall_after=30, poll_gpu=False)
        dropped = asyncio.Event()

        def on_bytes(chunk: bytes) -> None:
            got.extend(chunk)
            if not dropped.is_set() and got.count(b"\n") >= 100:
                dropped.set()
                assert sshd.kill_sessions(ROOT_USER) >= 1  # the link drops in the middle of the load

        final = await tracker.run(timeout=60, on_bytes=on_bytes)
        assert dropped.is_set()
        assert final.state == "ready", final
        # the server was never interrupted: same process, same start time, still alive
        assert Path(f"/proc/{rec.pid}").exists() and starttime(rec.pid) == st0
        assert not Path(rec.run_dir, "rc").exists()
        log = Path(rec.run_dir, "log").read_bytes()
        assert bytes(got) == log[: len(got)]  # nothing lost, nothing repeated
        nums = [int(m) for m in re.findall(rb"^line (\d+)$", bytes(got), re.M)]
        assert nums == list(range(1, 501))
        assert b"The server is fired up and ready to roll!" in got
        # the follow loop reconnected at least once
        assert host.connects >= 2
        res = await L.stop_run(host, rec, grace=5, gpu_wait=2)
        assert res.state == "stopped", res
        assert not alive(rec.pid) or starttime(rec.pid) != st0
    finally:
        for run in await L.list_host_runs(host):
            if run.alive:
                await L.stop_run(host, runstore.RunStore().load(run.run_id), grace=1, gpu_wait=1)
        await host.close()
