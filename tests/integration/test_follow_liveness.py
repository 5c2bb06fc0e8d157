"""One liveness rule for every long-lived stream (tunedeck.hostops.liveness): the host side of a
followed file beats on stderr and ends, with its ``tail``, once the laptop's beats stop for
``MISSED_BEATS`` intervals or its stdin closes; the laptop reports a host side that went silent
within the same bound, and the follow resumes with nothing lost or repeated.

Local parts run everywhere (the script under dash, bash and busybox sh; a frozen host side on
this machine); the SSH parts need the real sshd (tests/sshd.py): a frozen session, with a
keepalive far slower than the bound, so that only the heartbeat can be what noticed it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.sshd import TEST_USER, SshdServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tunedeck.hostops import liveness
from tunedeck.hostops.hosts import Host
from tunedeck.hostops.hostscripts import FOLLOW_SCRIPT
from tunedeck.hostops.localhost import LocalHost
from tunedeck.hostops.logfollow import follow_forever

#: what a loaded 2-core machine adds to a bound before a test calls it missed
SLACK_S = 4.0


def _group_alive(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            rest = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def _group_gone(pgid: int, within: float = SLACK_S) -> list[int]:
    """The members of ``pgid`` still alive after up to ``within`` seconds (they were signalled
    as their leader exited; a loaded machine takes a moment to run them)."""
    end = time.monotonic() + within
    left = _group_alive(pgid)
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = _group_alive(pgid)
    return left


def _shells() -> list[list[str]]:
    found = [[p] for p in ("dash", "bash") if shutil.which(p)]
    if shutil.which("busybox"):
        found.append(["busybox", "sh"])
    return found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shell", _shells(), ids=lambda s: s[0])
def test_the_host_side_ends_with_its_tail_when_the_laptop_beats_no_more(shell: list[str], tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"0123456789abc\n")
    beat, dead = 0.5, 1.5
    p = subprocess.Popen(
        [*shell, "-c", FOLLOW_SCRIPT, "sh", "4", str(log), str(beat), str(dead)],
        stdin=subprocess.PIPE,  # held open, never written: a laptop that froze or lost its link
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    t0 = time.monotonic()
    try:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.readline().strip() == str(p.pid).encode()
        assert p.stdout.read(11) == b"3456789abc\n"  # from byte 4 on, exactly
        assert p.wait(timeout=dead + beat + SLACK_S + 10) == 0
        took = time.monotonic() - t0
        assert took < dead + beat + SLACK_S, took
        assert _group_gone(p.pid) == []  # its tail and heartbeat loop ended with it
        assert p.stderr.read().count(b".") >= 2  # it beat while it lived
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if p.stdin is not None:
            p.stdin.close()


@pytest.mark.timeout(60)
def test_the_host_side_ends_at_once_when_its_stdin_closes(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"x\n")
    p = subprocess.Popen(
        ["/bin/sh", "-c", FOLLOW_SCRIPT, "sh", "1", str(log), "5", "15"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip().isdigit() and p.stdout.readline() == b"x\n"
        t0 = time.monotonic()
        p.stdin.close()
        p.wait(timeout=30)
        assert time.monotonic() - t0 < SLACK_S  # not the 15-s bound: the laptop is gone for sure
        assert _group_gone(p.pid) == []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_the_interval_comes_from_one_variable_and_bad_values_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(liveness.ENV, raising=False)
    assert liveness.interval() == liveness.HEARTBEAT_S == 5.0
    assert liveness.dead_after() == 15.0 == liveness.MISSED_BEATS * liveness.HEARTBEAT_S
    monkeypatch.setenv(liveness.ENV, "0.5")
    assert liveness.dead_after() == 1.5
    for bad in ("fast", "0", "-1", "nan", "1e9"):
        monkeypatch.setenv(liveness.ENV, bad)
        with pytest.raises(liveness.LivenessConfigError, match=f"^{liveness.ENV}="):
            liveness.interval()


def _follow_shell(path: Path) -> int | None:
    """The pid of the host-side shell following ``path`` (its process group leader)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 5 and argv[2] == FOLLOW_SCRIPT.encode() and argv[5] == str(path).encode():
                return int(entry)
    return None


async def _frozen_host_side_is_reported_and_resumed(
    host: Host, path: Path, freeze: "asyncio.Future[float]", dead: float
) -> tuple[float, bytes, list[str]]:
    """Follow ``path`` on ``host``; once ``freeze`` resolves (to the time it froze the host side)
    append a line, and return (seconds from the freeze to the lost-link report, bytes, errors)."""
    got = bytearray()
    errors: list[str] = []
    reported = 0.0
    stop = asyncio.Event()

    def on_chunk(b: bytes) -> None:
        got.extend(b)
        if got.endswith(b"after\n"):
            stop.set()

    def on_error(e: Exception, attempt: int) -> None:
        nonlocal reported
        errors.append(str(e))
        if not reported:
            reported = time.monotonic()

    follow = asyncio.ensure_future(follow_forever(host, str(path), 0, on_chunk, stop, on_error=on_error))
    frozen_at = await freeze
    with open(path, "ab") as f:
        f.write(b"after\n")
    await asyncio.wait_for(follow, dead + 90)
    return reported - frozen_at, bytes(got), errors


@pytest.mark.timeout(120)
async def test_a_frozen_host_side_is_reported_within_the_bound_and_the_follow_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(liveness.ENV, "0.5")
    dead = liveness.dead_after()
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"before\n")
    loop = asyncio.get_running_loop()
    freeze: asyncio.Future[float] = loop.create_future()
    stopped: list[int] = []

    async def freezer() -> None:
        try:
            end = time.monotonic() + 30
            while True:
                pid = None
                while pid is None and time.monotonic() < end:
                    await asyncio.sleep(0.1)
                    pid = _follow_shell(path)
                assert pid is not None, "the host side never started"
                await asyncio.sleep(1.0)  # it beat a few times: alive
                try:
                    os.killpg(pid, signal.SIGSTOP)  # the host side answers no more, as behind a dead link
                except ProcessLookupError:
                    # a loaded machine held the beats past 1.5 s: the follow was started again
                    # meanwhile, and its new host side is the one to freeze
                    continue
                break
            stopped.append(pid)
            freeze.set_result(time.monotonic())
        except BaseException as e:
            if not freeze.done():
                freeze.set_exception(e)  # the test fails with the cause, not at its timeout
            raise

    f = asyncio.ensure_future(freezer())
    try:
        took, got, errors = await _frozen_host_side_is_reported_and_resumed(LocalHost(), path, freeze, dead)
    finally:
        await f
        for pid in stopped:
            try:
                os.killpg(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert errors and "no heartbeat" in errors[0], errors
    assert dead < took < dead + SLACK_S, took
    assert got == b"before\nafter\n"  # resumed at the consumed offset: nothing lost or repeated
    await asyncio.sleep(1.0)
    assert all(_group_gone(pid) == [] for pid in stopped)  # the frozen side was ended, not left


# ---------------------------------------------------------------------------- over a real sshd


@pytest.mark.sshd
@pytest.mark.timeout(180)
async def test_a_silent_ssh_link_is_reported_by_the_heartbeat_and_leaves_no_tail_on_the_host(
    sshd: SshdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunedeck.hostops.ssh import SshHost

    monkeypatch.setenv(liveness.ENV, "1")
    dead = liveness.dead_after()
    folder = sshd.remote_home / "follow-liveness"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    path = folder / f"log-{os.getpid()}"
    path.write_bytes(b"before\n")
    path.chmod(0o666)
    # keepalive 30 s x 3: far past the bound, so only the heartbeat can be what notices
    host = SshHost(sshd.target(TEST_USER), keepalive_interval=30, keepalive_count_max=3, retry_attempts=None)
    loop = asyncio.get_running_loop()
    freeze: asyncio.Future[float] = loop.create_future()
    frozen: list[int] = []

    async def freezer() -> None:
        end = time.monotonic() + 60
        while not sshd.processes_matching(str(path)) and time.monotonic() < end:
            await asyncio.sleep(0.2)
        assert sshd.processes_matching(str(path)), "the host side never started"
        await asyncio.sleep(2.0)
        frozen.extend(sshd.session_pids(TEST_USER))
        for pid in frozen:  # the session answers no more: a black hole, TCP still up
            os.kill(pid, signal.SIGSTOP)
        freeze.set_result(time.monotonic())

    f = asyncio.ensure_future(freezer())
    try:
        took, got, errors = await _frozen_host_side_is_reported_and_resumed(host, path, freeze, dead)
        assert errors and "no heartbeat" in errors[0], errors
        assert took < dead + SLACK_S, took
        assert got == b"before\nafter\n"
        # the frozen session's tail read no heartbeat on its stdin: it ended within the bound
        old = [(p, c) for p, c in sshd.processes_matching(str(path)) if "tail" in c]
        assert len(old) <= 1, old  # at most the resumed follow's own tail
    finally:
        await f
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        await host.close()
