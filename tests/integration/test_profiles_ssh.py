"""The no-injection property over a real sshd: the shown command line, sent as a script to
``/bin/sh -s`` on the remote side (SshHost.run_script), gives exactly the argv and env chosen."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.sshd import SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.unit.test_profiles_injection import DUMP, parse_dump, profiles
from tunedeck.profiles.builder import check_profile
from tunedeck.profiles.store import ProfileStore

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(300)]


@pytest.fixture
def remote(sshd: SshdServer):
    from tunedeck.hostops.ssh import SshHost

    exe = sshd.shim_dir / f"dump argv {os.getpid()}"
    exe.write_text(DUMP.format(env=shutil.which("env")))
    exe.chmod(0o755)
    loop = asyncio.new_event_loop()
    host = SshHost(sshd.target(), retry_attempts=2)
    try:
        yield loop, host, str(exe)
    finally:
        loop.run_until_complete(host.close())
        loop.close()
        exe.unlink(missing_ok=True)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=profiles())
def test_over_ssh_refused_or_exact(remote, case):
    loop, host, exe = remote
    profile, allow = case
    presets = {p.name: p for p in ProfileStore(user=Path("/nonexistent")).nccl_presets()}
    cmd, issues = check_profile(profile, nccl=presets[profile.nccl_preset], allow_dangerous=allow, executable=[exe])
    if cmd is None:
        assert any(i.severity == "error" and i.message for i in issues)
        return
    r = loop.run_until_complete(host.run_script(cmd.display, timeout=20))
    assert r.ok, (cmd.display, r.stderr)
    argv, env = parse_dump(r.stdout)
    assert argv == list(cmd.args)
    for k, v in cmd.env:
        assert env.get(k) == v, (k, v, env.get(k))
