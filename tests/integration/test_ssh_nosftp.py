"""A host whose sshd has no SFTP subsystem (no ``Subsystem sftp`` line) but runs commands: files
go over an exec channel to ``cat`` (the runtime's hash check and rename as with SFTP), so
``launch --sim``, ``bench --host``, ``status`` and the dashboard work there; when that fails too,
the one-line error names the missing SFTP subsystem."""

from __future__ import annotations

import json
import os
import stat
import urllib.request
from pathlib import Path

import pytest

from tests.clifix import bench_load
from tests.simfix import free_port
from tests.sshd import (  # noqa: F401  (fixtures)
    ROOT_USER,
    TEST_USER,
    SshdServer,
    cli,
    sshd_nosftp,
    sshd_nosftp_server,
)
from tests.sshfix import launch_sim, stdin_after_exit  # noqa: F401  (fixture)

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


async def test_put_file_without_sftp_writes_every_byte_over_exec(sshd_nosftp: SshdServer):
    from tunedeck.hostops.ssh import SshHost

    data = bytes(range(256)) * 4096 + b"\x00end"  # every byte value, 1 MiB, no trailing newline
    dest = sshd_nosftp.remote_home / "nosftp" / "deep" / "blob.bin"
    async with SshHost(sshd_nosftp.target(TEST_USER), retry_attempts=1) as host:
        await host.put_file(data, str(dest), mode=0o640)
        assert host.sftp_refused is not None and "no SFTP subsystem" in host.sftp_refused
        assert host.state == "connected"  # a refused subsystem is not a lost link
        await host.put_file(b"second", str(dest.with_name("small")))  # straight to cat this time
        r = await host.run(["cat", str(dest.with_name("small"))])
    assert dest.read_bytes() == data
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert stat.S_IMODE(dest.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(dest.with_name("small").stat().st_mode) == 0o600
    assert r.exit_status == 0 and r.stdout == "second"


@pytest.mark.parametrize("late", [False, True], ids=["stdin-sent", "command-ended-first"])
async def test_when_every_way_fails_the_error_names_the_missing_sftp_subsystem(
    sshd_nosftp: SshdServer, late: bool, request: pytest.FixtureRequest
):
    """Also when ``cat``'s shell gave up (no folder) before the bytes were sent: a loaded machine
    wrote them to a closed channel, and the link was called lost."""
    from tunedeck.hostops.ssh import SshHost

    if late:
        request.getfixturevalue("stdin_after_exit")
    async with SshHost(sshd_nosftp.target(TEST_USER), retry_attempts=1) as host:
        with pytest.raises(OSError) as info:
            await host.put_file(b"x", "/proc/1/nowhere/f.tmp")  # no folder can be made there
        assert host.state == "connected"
    msg = str(info.value)
    assert "\n" not in msg and "/proc/1/nowhere/f.tmp" in msg, msg
    assert "no SFTP subsystem" in msg and "Session request failed" in msg, msg


def test_launch_sim_bench_and_status_on_a_host_without_sftp(sshd_nosftp: SshdServer, tmp_path: Path):
    server = sshd_nosftp
    for name in ("nvidia-smi", "tdpython"):
        (server.shim_dir / name).unlink(missing_ok=True)
    port = free_port()
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "one.toml").write_text(
        f'schema_version = 1\nengine = "sglang"\nmodel = "Qwen/Qwen3-8B"\ntp = 2\nport = {port}\n'
    )
    target = server.target(ROOT_USER)
    out = launch_sim(server, user, "one", 0.5)
    run_id = out["run"]["run_id"]
    assert list((server.remote_home / "lib").glob("tunedeck-host-*.pyz"))
    assert not list((server.remote_home / "lib").glob(".*.tmp"))  # staged, checked, renamed
    try:
        r = cli(server, user, "bench", "--host", target, "--port", str(port), *bench_load(2, 6, 4))
        assert r.returncode == 0, r.stderr[-3000:]
        s = json.loads(r.stdout)
        assert s["completed"] == 6 and s["client"]["where"] == "host", s
        r = cli(server, user, "status", "--host", target, "--sim", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        st = json.loads(r.stdout)
        assert st["gpu_state"] == "ok" and st["gpus"][0]["memory_used"] > 0, st
        req = urllib.request.Request(f"http://127.0.0.1:{port}/health")
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
    finally:
        r = cli(server, user, "stop", run_id, "--host", target, "--sim", "--yes", "--grace", "5", "--json")
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]


async def test_the_dashboard_shows_a_host_without_sftp(sshd_nosftp: SshdServer):
    """The dashboard's sampler ships the runtime over exec: the host is up, its GPUs listed."""
    from tests.ui.test_ui_status import SIZE, until
    from tunedeck.collectors.sources import default_sources
    from tunedeck.hostops.ssh import SshHost
    from tunedeck.ui.app import make_app
    from tunedeck.widgets.gpu_table import GpuTable

    for name in ("nvidia-smi", "tdpython"):
        (sshd_nosftp.shim_dir / name).unlink(missing_ok=True)
    lib = sshd_nosftp.remote_home / "lib"
    for old in lib.glob("tunedeck-host-*.pyz") if lib.is_dir() else ():
        old.unlink()  # this test ships it itself
    host = SshHost(sshd_nosftp.target(ROOT_USER), retry_attempts=1)
    app = make_app(host, sources=default_sources(host, interval=0.5, sim=True), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(GpuTable)
        await until(pilot, lambda: table.row_count == 8, timeout=60)
    assert host.sftp_refused is not None
    assert os.path.isfile(sshd_nosftp.remote_home / "sim" / "bin" / "nvidia-smi")
