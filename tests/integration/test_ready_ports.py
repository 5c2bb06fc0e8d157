"""Who listens on a port, read from the host's /proc (tunedeck.util.ports), on real loopback sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tunedeck.hostops.localhost import LocalHost
from tunedeck.util.ports import FREE, OTHER, OWN, UNKNOWN, parse_port_owners, port_owners

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("family,addr", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
async def test_listener_is_named_and_told_apart_from_the_run(family: int, addr: str) -> None:
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((addr, 0))
    except OSError as e:
        s.close()
        pytest.skip(f"no {addr} here: {e}")
    s.listen(1)
    port = s.getsockname()[1]
    host = LocalHost()
    try:
        other = await port_owners(host, port, session=1, run_id="deadbeef")
        assert other.state == OTHER and other.listening
        assert [p for p, _ in other.owners] == [os.getpid()] and other.owners[0][1]
        assert other.describe().startswith(f"pid {os.getpid()} (")
    finally:
        s.close()
    assert (await port_owners(host, port)).state == FREE


LISTENER = """
import socket, sys, time
s = socket.socket(int(sys.argv[1]), socket.SOCK_STREAM)
s.bind((sys.argv[2], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(60)
"""


async def test_a_run_owns_its_listener_by_its_session_or_by_its_run_id() -> None:
    """A run's listener: a process in the session its detached wrapper started (its own, as
    ``setsid`` makes it), or one carrying the run's ``TUNEDECK_RUN_ID``. A container's shell can
    have session 0, so the test starts its own session rather than reading this process's."""
    env = {**os.environ, "TUNEDECK_RUN_ID": "cafe0123"}
    child = subprocess.Popen(
        [sys.executable, "-c", LISTENER, str(int(socket.AF_INET)), "127.0.0.1"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        host = LocalHost()
        assert (await port_owners(host, port, session=child.pid)).state == OWN
        assert (await port_owners(host, port, run_id="cafe0123")).state == OWN
        other = await port_owners(host, port, session=child.pid + 1, run_id="cafe0124")
        assert other.state == OTHER and [p for p, _ in other.owners] == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_parse_the_cases_the_host_can_answer() -> None:
    assert parse_port_owners(80, "NOPROC\n").state == UNKNOWN
    hidden = parse_port_owners(80, "LISTEN 1234\n")  # the listener's process is not visible here
    assert hidden.state == UNKNOWN and hidden.listening and "not visible" in hidden.describe()
    mixed = parse_port_owners(80, "LISTEN 1 2\nOWNER 10 0 nginx\nOWNER 11 1 python3\n")
    assert mixed.state == OWN
    evil = parse_port_owners(80, "LISTEN 1\nOWNER 10 0 \x1b]0;pwned\x07\n")
    assert evil.state == OTHER and "\x1b" not in evil.describe() and "\\x1b" in evil.describe()
    assert parse_port_owners(80, "").state == UNKNOWN


def test_status_row_of_a_dead_run_reads_failed_with_its_cause() -> None:
    """A server row whose /health no longer answers shows its run's re-read state: failed, the cause."""
    from tunedeck.hostops.runstore import RunRecord, RunStore
    from tunedeck.hostops.startupstate import reconcile_servers
    from tunedeck.model import ServerStats

    store = RunStore()
    cause = "RuntimeError: CUDA error: an illegal memory access was encountered"
    store.save(RunRecord("abcdef01", "demo", ["x"], status="failed", diagnosis=cause))
    row = ServerStats("p", "sglang", "http://127.0.0.1:1", "down", run_id="abcdef01")
    (out,) = reconcile_servers([row], store)
    assert (out.state, out.message) == ("failed", cause)
