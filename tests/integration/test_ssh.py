"""SshHost against a real OpenSSH sshd on loopback (tests/sshd.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, tunedeck_cmd
from tests.sshd import ROOT_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.sshfix import stdin_after_exit  # noqa: F401  (fixture)
from tunedeck.hostops.hosts import HostError
from tunedeck.hostops.ssh import SshHost
from tunedeck.hostops.sshconfig import read_ssh_config, resolve_endpoint
from tunedeck.services.targets import get_host
from tunedeck.util.paths import known_hosts_file
from tunedeck.util.safety import UnsafeInput

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(60)]


def mkhost(server: SshdServer, user: str | None = None, **kw: object) -> SshHost:
    opts: dict[str, object] = dict(
        keepalive_interval=1, keepalive_count_max=3, backoff_base=0.05, backoff_cap=0.5, retry_attempts=3
    )
    opts.update(kw)
    return SshHost(server.target(user), **opts)  # type: ignore[arg-type]


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- run


async def test_run_exit_status_stdout_stderr(sshd: SshdServer) -> None:
    async with mkhost(sshd) as h:
        r = await h.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.exit_status, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
        r = await h.run(["id", "-un"])
        assert r.ok and r.stdout == "gpuop\n"
        r = await h.run(["sh", "-c", 'echo "$PATH"'])
        assert r.stdout.startswith(str(sshd.shim_dir) + ":")
        r = await h.run(["no-such-program-xyz"])
        assert r.exit_status == 127 and not r.ok
        r = await h.run(["sh", "-c", "kill -TERM $$"])  # under `timeout`: reported like a shell
        assert r.exit_status == 143 and not r.ok
        r = await h.run(["sh", "-c", "kill -TERM $PPID"], timeout=None)  # the login shell dies
        assert r.exit_status is None and r.exit_signal == "TERM" and not r.lost and not r.ok
        assert h.connects == 1


async def test_run_timeout_remote_and_local(sshd: SshdServer) -> None:
    async with mkhost(sshd) as h:
        t = time.monotonic()
        r = await h.run(["sleep", "31.5"], timeout=1)
        assert r.timed_out and r.exit_status is None and not r.ok
        assert time.monotonic() - t < 5
        assert "timed out" in r.stderr
        # the remote `timeout` killed it: nothing left behind
        await asyncio.sleep(0.3)
        assert sshd.processes_matching("sleep 31.5") == []


async def test_run_script_stdin_large_input_and_output(sshd: SshdServer) -> None:
    async with mkhost(sshd) as h:
        r = await h.run_script('printf "%s|" "$#" "$1" "$2"; echo', ["a b", "$(x)"])
        assert r.ok and r.stdout == "2|a b|$(x)|\n"
        big_script = "# " + "x" * 400_000 + "\necho tail-ok\n"
        r = await h.run_script(big_script)
        assert r.ok and r.stdout == "tail-ok\n"
        r = await h.run(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a"])
        assert r.ok and len(r.stdout) == 3_000_000 and set(r.stdout) == {"a"}
        data = "line\n" * 50_000
        r = await h.run(["wc", "-c"], input=data)
        assert r.ok and int(r.stdout) == len(data)


async def test_a_command_that_ends_before_its_stdin_is_sent_is_its_exit_not_a_lost_link(
    sshd: SshdServer, stdin_after_exit: None
) -> None:
    async with mkhost(sshd) as h:
        r = await h.run(["sh", "-c", "echo cannot start >&2; exit 3"], input="never read\n")
        assert (r.exit_status, r.stderr, r.lost) == (3, "cannot start\n", False), r
        assert h.state == "connected"
        assert (await h.run(["echo", "still here"])).stdout == "still here\n"


async def test_a_broken_stdin_on_a_channel_that_stays_open_is_a_lost_link_dropped_for_the_next_command(
    sshd: SshdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No exit and no close after the write broke: the link, not the command. It is dropped (the
    next command connects again at once) and the result says lost, with the cause."""
    from tunedeck.hostops import sshexec

    real = asyncssh.SSHClientProcess.communicate

    async def broken(self: Any, input: Any = None) -> Any:
        if input:
            raise BrokenPipeError("Channel not open for sending")
        return await real(self, input)

    monkeypatch.setattr(asyncssh.SSHClientProcess, "communicate", broken)
    monkeypatch.setattr(sshexec, "CLOSE_WAIT_S", 0.5)
    async with mkhost(sshd) as h:
        assert (await h.run(["true"])).ok
        first = h._conn
        # cat waits on its stdin, which never comes: the channel stays open (and ends with the link)
        r = await h.run(["cat"], input="never read\n")
        assert r.lost and r.exit_status is None, r
        assert "connection lost: " in r.stderr and "Channel not open for sending" in r.stderr, r
        assert h.state == "disconnected" and h._conn is None
        assert (await h.run(["echo", "again"])).stdout == "again\n"
        assert h._conn is not None and h._conn is not first


async def test_stream_is_binary_safe_and_ends_with_status(sshd: SshdServer, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 2000 + b"\xff\xfe\x00tail-without-newline"
    f = sshd.base / f"blob-{os.getpid()}.bin"
    f.write_bytes(blob)
    f.chmod(0o644)
    try:
        async with mkhost(sshd) as h:
            got = bytearray()
            async with h.stream(["cat", str(f)]) as s:
                async for chunk in s:
                    got += chunk
            assert bytes(got) == blob
            assert s.exit_status == 0
            async with h.stream(["sh", "-c", "echo oops >&2; exit 4"]) as s:
                assert [c async for c in s] == []
            assert s.exit_status == 4 and "oops" in s.stderr_tail
    finally:
        f.unlink()


@pytest.mark.parametrize("where", ["ssh", "local"])
async def test_read_log_in_pieces_gives_the_hosts_bytes_exactly(sshd: SshdServer, where: str) -> None:
    """A log that is not all UTF-8 (a byte of another encoding, a character cut where the writer
    stopped, tqdm's multibyte bars) read a piece at a time from a byte offset: each piece is the
    host's bytes, so the offsets add up and the pieces join to the file (a decode and re-encode made
    U+FFFD of a cut character, three bytes for one, and the next offset skipped the host's bytes)."""
    from tunedeck.hostops.localhost import LocalHost
    from tunedeck.hostops.logfollow import read_log

    blob = ("Loading: 100% |" + "\u2588" * 40 + "| 8/8\n").encode() * 3 + b"caf\xe9 latin-1\n\xe2\x96"
    f = sshd.base / f"log-{os.getpid()}-{where}.txt"
    f.write_bytes(blob)
    f.chmod(0o644)
    host = mkhost(sshd) if where == "ssh" else LocalHost()
    try:
        got = bytearray()
        while True:
            piece = await read_log(host, str(f), len(got), limit=7)  # 7: cuts the 3-byte bars everywhere
            if not piece:
                break
            got += piece
        assert bytes(got) == blob
        assert await read_log(host, str(f), 15, limit=2) == blob[15:17]  # the first two bytes of a bar
    finally:
        await host.close()
        f.unlink()


async def test_stream_lines_break_kills_remote(sshd: SshdServer) -> None:
    f = sshd.base / f"lines-{os.getpid()}.log"
    f.write_text("one\ntwo\nthree\n")
    try:
        async with mkhost(sshd) as h:
            seen = []
            async with h.stream_lines(["tail", "-n", "+1", "-F", str(f)]) as lines:
                async for line in lines:
                    seen.append(line)
                    if line == "two":
                        break
            assert seen == ["one", "two"]
            assert sshd.processes_matching(str(f)) == []
    finally:
        f.unlink()


# ---------------------------------------------------------------------------- input safety


async def test_env_goes_on_the_command_line(sshd: SshdServer) -> None:
    canary = sshd.remote_home / "canary-env"
    async with mkhost(sshd) as h:
        env = {"TD_A": "x y", "TD_B": f"$(touch {canary})", "TD_C": "it's"}
        r = await h.run(["sh", "-c", 'printf "%s|" "$TD_A" "$TD_B" "$TD_C"'], env=env)
        assert r.ok, r
        assert r.stdout == f"x y|$(touch {canary})|it's|"
    assert not canary.exists()


async def test_bad_input_rejected_before_any_connection() -> None:
    h = SshHost(f"gpuop@127.0.0.1:{closed_port()}", retry_attempts=1)
    with pytest.raises(UnsafeInput, match="control character"):
        await h.run(["echo", "a\nb"])
    with pytest.raises(UnsafeInput, match="invalid environment variable name"):
        await h.run(["true"], env={"BAD-NAME": "x"})
    with pytest.raises(UnsafeInput, match="control character"):
        await h.run(["true"], env={"OK": "a\x00b"})
    with pytest.raises(UnsafeInput):
        h.stream(["tail", "-F", "x\ry"])
    with pytest.raises(UnsafeInput):
        await h.run_script("true", ["\x1b[31m"])
    assert h.connects == 0 and h.attempt == 0 and h.state == "idle"


# ---------------------------------------------------------------------------- host keys (R1-R3)


async def _refused_at_once(sshd: SshdServer, known_hosts: str) -> HostError:
    """The error of a first connection with ``known_hosts`` ("empty", "wrong", ...: see
    ``write_known_hosts``), which must come at the first attempt and leave that file as it was."""
    kh = sshd.write_known_hosts(known_hosts)
    before = kh.read_bytes()
    h = mkhost(sshd)
    try:
        with pytest.raises(HostError) as ei:
            await h.run(["true"])
        assert h.attempt == 1
        assert kh.read_bytes() == before
    finally:
        await h.close()
    return ei.value


async def test_unknown_host_refused_with_fingerprint(sshd: SshdServer) -> None:
    e = await _refused_at_once(sshd, "empty")
    assert e.kind == "hostkey-unknown"
    assert sshd.host_key_fingerprint in str(e) and "SHA256:" in str(e)
    assert f"tunedeck trust {sshd.target()}" in str(e)
    assert not e.retryable  # never retried
    assert not known_hosts_file().exists()


async def test_missing_known_hosts_still_verifies(sshd: SshdServer) -> None:
    sshd.write_known_hosts("missing")
    with pytest.raises(HostError) as ei:
        await mkhost(sshd).run(["true"])
    assert ei.value.kind == "hostkey-unknown"
    assert not sshd.known_hosts_path.exists()


async def test_changed_key_refused_with_both_fingerprints(sshd: SshdServer) -> None:
    e = await _refused_at_once(sshd, "wrong")
    assert e.kind == "hostkey-mismatch"
    assert sshd.host_key_fingerprint in str(e) and sshd.wrong_key_fingerprint in str(e)


async def test_ssh_config_cannot_disable_checking(sshd: SshdServer) -> None:
    sshd.write_ssh_config(
        "Host tdalias\n"
        "  HostName 127.0.0.1\n"
        f"  Port {sshd.port}\n"
        "  User gpuop\n"
        "Host *\n"
        "  UserKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking no\n"
        "  ForwardAgent yes\n"
    )
    ep = resolve_endpoint("tdalias")
    assert (ep.host, ep.port, ep.user) == ("127.0.0.1", sshd.port, "gpuop")
    assert ep.identity_files == (str(sshd.client_key),)
    async with SshHost("tdalias", retry_attempts=1) as h:  # alias works with the right key
        r = await h.run(["id", "-un"])
        assert r.stdout == "gpuop\n"
    sshd.write_known_hosts("empty")
    with pytest.raises(HostError) as ei:
        await SshHost("tdalias", retry_attempts=1).run(["true"])
    assert ei.value.kind == "hostkey-unknown"


def test_read_ssh_config_subset(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    inc = tmp_path / "inc.conf"
    inc.write_text("Host gpu*\n  IdentityFile ~/keys/%h\n")
    cfg.write_text(
        f"Include {inc}\n"
        "Host gpu1 !gpu2\n  HostName 10.0.0.1\n  Port=2200\n"
        "Match host gpu1\n  User wrong\n"
        "Host *\n  User alice\n  HostName ignored\n  UserKnownHostsFile /dev/null\n"
    )
    got = read_ssh_config("gpu1", cfg)
    assert got == {"identityfile": ["~/keys/%h"], "hostname": "10.0.0.1", "port": "2200", "user": "alice"}
    assert read_ssh_config("gpu2", cfg) == {"identityfile": ["~/keys/%h"], "user": "alice", "hostname": "ignored"}


def _cli(sshd: SshdServer, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tunedeck_cmd(), *args],
        cwd=REPO,
        env=sshd.client_env(),
        capture_output=True,
        text=True,
        timeout=45,
        input=input,
    )


async def test_trust_appends_exactly_one_line(sshd: SshdServer) -> None:
    sshd.write_known_hosts("empty")
    ours = known_hosts_file()
    # no TTY and no --yes: refused, nothing written
    r = _cli(sshd, "trust", sshd.target(), input="yes\n")
    assert r.returncode == 1, r
    assert sshd.host_key_fingerprint in r.stdout
    assert not ours.exists()
    r = _cli(sshd, "trust", sshd.target(), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fingerprint"] == sshd.host_key_fingerprint and out["result"] == "trusted"
    assert ours.read_text() == sshd.host_key_line + "\n"
    # trusted now: connecting works through tunedeck's file
    async with mkhost(sshd) as h:
        assert (await h.run(["true"])).ok
    # again: nothing appended
    r = _cli(sshd, "trust", sshd.target(), "--yes", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["result"] == "already-trusted"
    assert ours.read_text().count("\n") == 1


def test_trust_asks_on_a_terminal(sshd: SshdServer) -> None:
    import pty

    sshd.write_known_hosts("empty")
    ours = known_hosts_file()
    for answer, rc in (("no", 1), ("yes", 0)):
        master, slave = pty.openpty()
        try:
            os.write(master, f"{answer}\n".encode())
            r = subprocess.run(
                [*tunedeck_cmd(), "trust", sshd.target()],
                cwd=REPO,
                env=sshd.client_env(),
                stdin=slave,
                capture_output=True,
                text=True,
                timeout=45,
            )
        finally:
            os.close(master)
            os.close(slave)
        assert r.returncode == rc, r.stderr
        assert sshd.host_key_fingerprint in r.stdout
        if answer == "no":
            assert "not trusted" in r.stdout and not ours.exists()
        else:
            assert ours.read_text() == sshd.host_key_line + "\n"


async def test_trust_refuses_a_changed_key(sshd: SshdServer) -> None:
    sshd.write_known_hosts("wrong")
    r = _cli(sshd, "trust", sshd.target(), "--yes")
    assert r.returncode == 1
    assert "MISMATCH" in r.stderr and sshd.wrong_key_fingerprint in r.stderr
    assert sshd.host_key_fingerprint in r.stdout + r.stderr
    assert not known_hosts_file().exists()


# ---------------------------------------------------------------------------- auth, reachability


async def test_auth_failure_not_retried(sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "nokey"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(sshd.host_key_line + "\n")
    monkeypatch.setenv("HOME", str(home))
    h = mkhost(sshd)
    with pytest.raises(HostError) as ei:
        await h.run(["true"])
    assert ei.value.kind == "auth-failed" and h.attempt == 1


async def test_unreachable_is_retried_then_reported() -> None:
    h = SshHost(f"gpuop@127.0.0.1:{closed_port()}", retry_attempts=3, backoff_base=0.01, backoff_cap=0.05)
    with pytest.raises(HostError) as ei:
        await h.run(["true"])
    assert ei.value.kind == "unreachable" and ei.value.retryable
    assert h.attempt == 3
    assert h.state == "disconnected" and "last error" in h.state_text()


async def test_agent_not_forwarded(sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.02)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        sshd.write_ssh_config("Host *\n  ForwardAgent yes\n")
        async with mkhost(sshd) as h:
            r = await h.run(["sh", "-c", 'echo "${SSH_AUTH_SOCK:-none}"'])
            assert r.ok and r.stdout == "none\n"
    finally:
        agent.kill()
        agent.wait()


# ---------------------------------------------------------------------------- channels (R8, R9)


async def test_many_runs_and_streams_share_one_connection(sshd: SshdServer) -> None:
    files = [sshd.base / f"r8-{os.getpid()}-{i}.log" for i in range(4)]
    for f in files:
        f.write_text("x\n")
    try:
        async with mkhost(sshd) as h:
            streams = [h.stream(["tail", "-F", str(f)]) for f in files]
            for s in streams:
                await s.__aenter__()
            results = await asyncio.gather(*(h.run(["echo", str(i)]) for i in range(50)))
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(50)]
            assert all(r.ok for r in results)
            for s in streams:
                await s.aclose()
            assert h.connects == 1
        for f in files:
            assert sshd.processes_matching(str(f)) == []
    finally:
        for f in files:
            f.unlink()


@pytest.mark.parametrize("user,cycles", [("gpuop", 30), (ROOT_USER, 6)])
async def test_stream_close_frees_the_slot(sshd: SshdServer, user: str, cycles: int) -> None:
    f = sshd.base / f"r9-{user}-{os.getpid()}.log"
    f.write_text("hello\n")
    marker = f"r9-silent-{user}-{os.getpid()}"
    # GNU tail exits by itself once its output is gone; a silent loop never notices:
    # only the explicit kill ends it (closing the channel alone would leave it running)
    silent = ["sh", "-c", "echo hello; while :; do sleep 1; done", marker]
    try:
        async with mkhost(sshd, user=user) as h:
            for i in range(cycles):
                async with h.stream(["tail", "-F", str(f)] if i % 2 else silent) as s:
                    if i % 3 == 0:
                        async for chunk in s:
                            assert chunk == b"hello\n"
                            break
            assert sshd.processes_matching(str(f)) == []
            assert sshd.processes_matching(marker) == []
            r = await h.run(["true"])
            assert r.ok and h.connects == 1
    finally:
        f.unlink()


# ---------------------------------------------------------------------------- lost links (R10), reconnect


async def test_killed_session_during_command_is_lost_not_success(sshd: SshdServer) -> None:
    async with mkhost(sshd) as h:
        assert (await h.run(["true"])).ok
        task = asyncio.ensure_future(h.run(["sleep", "20"], timeout=30))
        await asyncio.sleep(0.8)
        assert sshd.kill_sessions("gpuop") >= 1
        r = await asyncio.wait_for(task, 10)
        assert r.lost and r.exit_status is None and not r.ok
        # the next call reconnects by itself
        r = await h.run(["echo", "back"])
        assert r.ok and r.stdout == "back\n" and h.connects == 2


async def test_sshd_killed_during_stream_raises_connection_lost(sshd: SshdServer) -> None:
    f = sshd.base / f"lost-{os.getpid()}.log"
    f.write_text("first\n")
    try:
        async with mkhost(sshd) as h:
            with pytest.raises(HostError) as ei:
                async with h.stream(["tail", "-F", str(f)]) as s:
                    async for chunk in s:
                        assert chunk == b"first\n"
                        sshd.stop()
            assert ei.value.kind == "connection-lost"
            sshd.start()
            r = await h.run(["echo", "again"])
            assert r.ok and r.stdout == "again\n"
    finally:
        sshd.start()
        f.unlink()


async def test_stale_stream_is_reaped_after_reconnect(sshd: SshdServer) -> None:
    marker = f"reap-marker-{os.getpid()}"
    argv = ["sh", "-c", "echo hi; while :; do sleep 1; done", marker]  # never writes again: survives
    async with mkhost(sshd) as h:
        with pytest.raises(HostError) as ei:
            async with h.stream(argv) as s:
                async for _ in s:
                    sshd.kill_sessions("gpuop")  # sshd survives, and so does the command (S10)
        assert ei.value.kind == "connection-lost"
        assert len(sshd.processes_matching(marker)) >= 1  # the command (and its login shell)
        assert (await h.run(["true"])).ok  # reconnect; stale streams are reaped in the background
        for _ in range(100):
            if not sshd.processes_matching(marker):
                break
            await asyncio.sleep(0.05)
        assert sshd.processes_matching(marker) == []


async def test_black_holed_link_detected_by_keepalive(sshd: SshdServer) -> None:
    async with mkhost(sshd, keepalive_interval=1, keepalive_count_max=2) as h:
        assert (await h.run(["true"])).ok
        task = asyncio.ensure_future(h.run(["sleep", "32.5"], timeout=6))
        await asyncio.sleep(0.5)
        t = time.monotonic()
        assert sshd.freeze_sessions("gpuop") >= 1
        r = await asyncio.wait_for(task, 15)
        assert r.lost and not r.ok
        assert time.monotonic() - t < 6
        assert h.state == "disconnected"
    sshd.kill_sessions()


async def test_reconnect_state_while_sshd_is_down(sshd: SshdServer) -> None:
    async with mkhost(sshd, retry_attempts=None, backoff_base=0.1, backoff_cap=0.4) as h:
        assert (await h.run(["true"])).ok
        sshd.stop()
        task = asyncio.ensure_future(h.run(["echo", "later"]))
        for _ in range(1000):
            await asyncio.sleep(0.01)
            if h.state == "reconnecting" and h.attempt >= 2 and h.next_retry_at is not None:
                break
        text = h.state_text()
        assert text.startswith("reconnecting (attempt ") and "next in" in text
        assert "last error: 127.0.0.1" in text and "connection refused" in text
        sshd.start()
        r = await asyncio.wait_for(task, 20)
        assert r.ok and r.stdout == "later\n"
        assert h.state == "connected" and h.connects == 2


async def test_forward_port_reaches_a_remote_loopback_service(sshd: SshdServer) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readline()
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with mkhost(sshd) as h:
            local = await h.forward_port(port)
            assert local != port and await h.forward_port(port) == local
            r, w = await asyncio.open_connection("127.0.0.1", local)
            w.write(b"hi\n")
            await w.drain()
            assert await asyncio.wait_for(r.readline(), 5) == b"echo:hi\n"
            w.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_handshakes_are_capped(sshd: SshdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import tunedeck.hostops.ssh as sshmod
    import tunedeck.hostops.sshgate as sshgate

    real = sshmod.asyncssh.connect
    inflight = peak = 0

    async def counting(*a: object, **kw: object):  # type: ignore[no-untyped-def]
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        try:
            return await real(*a, **kw)
        finally:
            inflight -= 1

    monkeypatch.setattr(sshmod.asyncssh, "connect", counting)
    hosts = [mkhost(sshd) for _ in range(8)]
    try:
        results = await asyncio.gather(*(h.run(["true"]) for h in hosts))
        assert all(r.ok for r in results)
        assert peak == sshgate.MAX_HANDSHAKES == 3
    finally:
        for h in hosts:
            await h.close()


def test_host_survives_a_new_event_loop(sshd: SshdServer) -> None:
    h = mkhost(sshd)
    assert asyncio.run(h.run(["echo", "1"])).stdout == "1\n"
    assert asyncio.run(h.run(["echo", "2"])).stdout == "2\n"
    asyncio.run(h.close())


def test_get_host_gives_ssh_host() -> None:
    h = get_host("gpuop@example.invalid:2222")
    assert isinstance(h, SshHost) and h.target == "gpuop@example.invalid:2222"


# ---------------------------------------------------------------------------- injection (R15, R16)


class _LoopThread:
    """One event loop in a thread so hypothesis examples share one SSH connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), whitelist_characters="\t"), max_size=24)


def test_argv_round_trips_byte_exact(sshd: SshdServer) -> None:
    canary = sshd.remote_home / "canary-argv"
    lt = _LoopThread()
    host = mkhost(sshd)
    nasty = [
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"'; touch {canary}; '",
        f'"; touch {canary}; "',
        f"\\'; touch {canary} #",
        "*",
        "~",
        "-n",
        "",
        "a b\tc",
    ]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_TEXT, max_size=5))
    @example(nasty)
    def check(args: list[str]) -> None:
        r = lt.run(host.run(["printf", "%s\\0", *args], timeout=10))
        assert r.ok, r
        expected = "".join(a + "\0" for a in args) if args else "\0"
        assert r.stdout == expected

    try:
        check()
    finally:
        lt.run(host.close())
        lt.stop()
    assert not canary.exists()


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(_TEXT, max_size=3),
    st.sampled_from(["\x00", "\n", "\r", "\x1b", "\x7f", "\x01"]),
    _TEXT,
)
def test_control_characters_refused_before_exec(pre: list[str], bad: str, tail: str) -> None:
    h = SshHost("gpuop@127.0.0.1:1", retry_attempts=1)
    with pytest.raises(UnsafeInput):
        asyncio.run(h.run(["printf", "%s", *pre, tail[:3] + bad + tail[3:]]))
    assert h.connects == 0 and h.attempt == 0
