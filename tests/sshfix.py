"""More than one sshd for one client, and SSH hosts that give up and come back quickly."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import asyncssh
import pytest

from tests.sshd import ROOT_USER, SshdServer, cli
from tunedeck.hostops.ssh import SshHost


@pytest.fixture(scope="module")
def second_sshd(sshd_server: SshdServer) -> Iterator[SshdServer]:
    """Another sshd on another port: a second host for the same client."""
    base = Path(tempfile.mkdtemp(prefix="tunedeck-sshd-b-"))
    server = SshdServer(base)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def stdin_after_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands given stdin get it only once they have ended and their channel has closed: what a
    loaded machine does to a command that fails before it reads (the write finds the channel shut)."""
    real = asyncssh.SSHClientProcess.communicate

    async def late(self: Any, input: Any = None) -> Any:
        if input:
            await self.wait_closed()
        return await real(self, input)

    monkeypatch.setattr(asyncssh.SSHClientProcess, "communicate", late)


def quick_host(target: str, *, connect_timeout: float = 5, backoff_base: float = 0.05) -> SshHost:
    """An ``SshHost`` for ``target`` that finds a dead link within ~2 s (keepalive 1 s, two missed),
    tries to connect once per attempt and waits at most 0.5 s between attempts."""
    return SshHost(
        target,
        keepalive_interval=1,
        keepalive_count_max=2,
        backoff_base=backoff_base,
        backoff_cap=0.5,
        retry_attempts=1,
        connect_timeout=connect_timeout,
    )


def launch_sim(server: SshdServer, profiles: Path, name: str, load_s: float) -> dict[str, Any]:
    """``tunedeck launch NAME --sim --wait`` on ``server`` (as root) with the profiles in ``profiles``,
    the simulator loading in ``load_s`` s: the outcome (JSON), which must be a server ready."""
    target = server.target(ROOT_USER)
    r = cli(server, profiles, "launch", name, "--host", target, "--sim", "--env", f"TUNEDECK_SIM_LOAD_S={load_s:g}",
            "--wait", "--timeout", "120", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, Any] = json.loads(r.stdout)
    assert out["progress"]["state"] == "ready", out
    return out
