"""Against a real sshd: a host-key or auth refusal stops every loop that connects to the host
until the user acts (issue item 1). Connection attempts are counted from sshd's own log
(``LogLevel VERBOSE`` logs one ``Connection from`` per TCP connection)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.test_gpu_ssh import remote_smi  # noqa: F401  (fixture)
from tests.integration.test_ui_sshd import install_fake_smi, remove_fake_smi
from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.ui.test_ui_status import SIZE, until
from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.ssh import SshHost
from tunedeck.ui.app import make_app

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]


def connections(server: SshdServer) -> int:
    try:
        return server.log_path.read_text(errors="replace").count("Connection from 127.0.0.1")
    except OSError:
        return 0


@pytest.mark.parametrize("known", ["wrong", "empty"])
async def test_dashboard_makes_one_attempt_per_user_action(sshd: SshdServer, known: str) -> None:
    """Every poll loop (GPU stream, host figures, server list, reattach) runs at 0.2 s with 0.2 s
    backoff for 6 s: one handshake in all. Pressing ``r`` allows exactly one more."""
    install_fake_smi(sshd, gpus=2)
    sshd.write_known_hosts(known)
    host = SshHost(
        sshd.target(), keepalive_interval=1, keepalive_count_max=2, backoff_base=0.05, backoff_cap=0.2, retry_attempts=4
    )
    app = make_app(host, interval=0.2, sample_timeout=5, backoff=lambda attempt: 0.2)
    kind = "hostkey-mismatch" if known == "wrong" else "hostkey-unknown"
    before = connections(sshd)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.latest.link.kind == kind, timeout=30)
            await pilot.pause(6.0)
            first = connections(sshd) - before
            assert first == 1, f"{first} connections before any user action"
            assert host.attempts == 1
            await pilot.press("r")
            await until(pilot, lambda: host.attempts == 2, timeout=30)
            await pilot.pause(4.0)
            assert app.latest.link.kind == kind
            second = connections(sshd) - before
            assert second == 2, f"{second} connections after one press of r"
    finally:
        remove_fake_smi(sshd)


async def test_refusal_is_remembered_until_trust_changes_known_hosts(sshd: SshdServer) -> None:
    sshd.write_known_hosts("wrong")
    before = connections(sshd)
    a = SshHost(sshd.target(), retry_attempts=3, backoff_base=0.05)
    b = SshHost(sshd.target(), retry_attempts=3, backoff_base=0.05)  # another loop, same host
    try:
        with pytest.raises(HostError) as e1:
            await a.run(["true"])
        assert e1.value.kind == "hostkey-mismatch"
        # the refusal shows both fingerprints from the one handshake
        assert sshd.host_key_fingerprint in e1.value.message and sshd.wrong_key_fingerprint in e1.value.message
        for h in (a, b, a, b):
            with pytest.raises(HostError) as e:
                await h.run(["true"])
            assert e.value.kind == "hostkey-mismatch"
        await asyncio.sleep(0.5)
        assert connections(sshd) - before == 1
        sshd.write_known_hosts("right")  # what `tunedeck trust` (after removing the old line) leads to
        r = await b.run(["true"])
        assert r.ok
        assert connections(sshd) - before == 2
    finally:
        await a.close()
        await b.close()


async def test_auth_failure_is_remembered_until_retry(sshd: SshdServer) -> None:
    before = connections(sshd)
    h = SshHost(f"nosuchuser@127.0.0.1:{sshd.port}", retry_attempts=3, backoff_base=0.05)
    try:
        t0 = time.monotonic()
        for _ in range(5):
            with pytest.raises(HostError) as e:
                await h.run(["true"])
            assert e.value.kind == "auth-failed"
        assert connections(sshd) - before == 1
        h.retry()
        with pytest.raises(HostError):
            await h.run(["true"])
        assert connections(sshd) - before == 2
        assert time.monotonic() - t0 < 60
    finally:
        await h.close()


async def test_closed_streams_leave_no_term_ignoring_nvidia_smi(sshd: SshdServer, remote_smi) -> None:  # type: ignore[no-untyped-def]
    """Issue item 6 end to end: the host's /bin/sh is dash; a wedged nvidia-smi (silent, ignores
    TERM) under `timeout`, streamed as the GPU collector does, is ended with its process group
    when the stream closes: no pile-up across polls."""
    remote_smi.set_mode("hang")
    (remote_smi.dir / "ignoreterm").write_text("")
    host = SshHost(sshd.target(), keepalive_interval=1, keepalive_count_max=2, retry_attempts=1)
    try:
        for _ in range(3):
            s = host.stream(
                ["timeout", "-k", "5", "300", "nvidia-smi", "--query-gpu=index", "--format=csv", "-lms", "200"]
            )
            await s.__aenter__()
            end = time.monotonic() + 15
            while remote_smi.alive_queries() == 0 and time.monotonic() < end:
                await asyncio.sleep(0.05)
            await s.aclose()
            end = time.monotonic() + 15
            while remote_smi.alive_queries() and time.monotonic() < end:
                await asyncio.sleep(0.1)
            assert remote_smi.alive_queries() == 0, "a TERM-ignoring nvidia-smi outlived its stream"
    finally:
        (remote_smi.dir / "ignoreterm").unlink(missing_ok=True)
        await host.close()
