"""The dashboard against a real sshd on loopback: the GPU panel fills from the remote host,
the link is lost when sshd stops (banner with countdown), and it recovers when sshd is back."""

from __future__ import annotations

import pytest

from tests.fake_smi import SCRIPT
from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.ui.test_ui_status import SIZE, cell, until, until_shown
from tunedeck.hostops.ssh import SshHost
from tunedeck.ui.app import make_app
from tunedeck.widgets.gpu_table import GpuTable
from tunedeck.widgets.host_banner import HostBanner
from tunedeck.widgets.host_panel import HostPanel

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(90)]


def install_fake_smi(server: SshdServer, gpus: int = 4) -> None:
    d = server.shim_dir
    exe = d / "nvidia-smi"
    exe.write_text(SCRIPT)
    exe.chmod(0o755)
    for name, text in (("gpus", str(gpus)), ("mode", "ok"), ("calls", "")):
        (d / name).write_text(text)
        (d / name).chmod(0o666)


def remove_fake_smi(server: SshdServer) -> None:
    for name in ("nvidia-smi", "gpus", "mode", "calls"):
        (server.shim_dir / name).unlink(missing_ok=True)


async def test_gpu_panel_fills_over_ssh_then_shows_lost_link_and_recovers(sshd: SshdServer) -> None:
    install_fake_smi(sshd, gpus=4)
    host = SshHost(
        sshd.target(), keepalive_interval=1, keepalive_count_max=2, backoff_base=0.1, backoff_cap=0.5, retry_attempts=1
    )
    app = make_app(host, interval=0.5, sample_timeout=5, backoff=lambda attempt: 1.5)
    try:
        async with app.run_test(size=SIZE) as pilot:
            table = app.screen.query_one(GpuTable)
            await until(pilot, lambda: table.row_count == 4, timeout=30)
            assert cell(table, "gpu-3", "name") == "Fake GPU"
            await until(pilot, lambda: app.screen.query_one(HostPanel).stats is not None, timeout=15)
            assert app.latest.link.ok and "· connected" in app.sub_title
            # host figures from /proc: the panel holds its stats before the next frame draws them
            await until_shown(pilot, "Fake GPU", "of ", "cores", timeout=10)

            sshd.stop()
            sshd.kill_sessions()
            banner = app.screen.query_one(HostBanner)
            await until(pilot, lambda: banner.has_class("-shown"), timeout=20)
            shown = str(banner.content)
            assert "retrying in" in shown and "attempt" in shown, shown
            assert not app.latest.link.ok
            await until(pilot, lambda: app.latest.gpu.state != "ok", timeout=20)

            sshd.start()
            await until(pilot, lambda: app.latest.link.ok, timeout=30)
            await until(pilot, lambda: not banner.has_class("-shown"))
            await until(pilot, lambda: app.latest.gpu.state == "ok", timeout=30)
            assert table.row_count == 4
    finally:
        sshd.start()
        remove_fake_smi(sshd)
