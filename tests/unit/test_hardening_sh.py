"""The host-side kill and list scripts under every /bin/sh we meet: dash (Debian/Ubuntu), bash
and busybox sh.

Issue items 6 (``kill -TERM -- -PGID`` is rejected by dash and the error was discarded) and 10
(a zombie wrapper counted as alive). The scripts run here as ``SHELL -s -- ARGS`` with the script
on stdin, exactly as ``Host.run_script`` sends them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.waits import poll
from tunedeck.hostops.hostscripts import KILL_SCRIPT, LIST_SCRIPT, STOP_SCRIPT


def _shells() -> list[object]:
    out: list[object] = []
    for name, argv in (("dash", ["dash"]), ("bash", ["bash", "--posix"]), ("busybox", ["busybox", "sh"])):
        if shutil.which(argv[0]) or os.environ.get("CI") == "true":
            out.append(pytest.param(argv, id=name))
        else:
            out.append(pytest.param(argv, id=name, marks=pytest.mark.skip(reason=f"{argv[0]} is not installed")))
    return out


SHELLS = _shells()


def _stat(pid: int) -> list[str] | None:
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return s.rsplit(")", 1)[1].split()


def _live(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _group(pgid: int) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            st = _stat(int(e))
            if st is not None and st[2] == str(pgid) and st[0] not in ("Z", "X"):
                out.append(int(e))
    return out


def _starttime(pid: int) -> str:
    st = _stat(pid)
    assert st is not None
    return st[19]


def _wait_until(cond, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    return bool(poll(cond, timeout))


def _sh(
    shell: list[str], script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shell, "-s", "--", *args], input=script, capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def group() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        for pid in _group(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.kill()
        p.wait()


def test_dash_rejects_the_old_form() -> None:
    """The fact behind item 6, so a future dash that accepts it is noticed."""
    if not shutil.which("dash"):
        pytest.skip("dash is not installed")
    r = subprocess.run(
        ["dash", "-c", "setsid sleep 77 & sleep .3; kill -KILL -- -$!; echo rc=$?; kill -s KILL -- -$!"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "rc=2" in r.stdout or "Illegal number" in r.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_stream_kill_reaches_a_term_ignoring_group_member(
    shell: list[str], group: list[subprocess.Popen[bytes]]
) -> None:
    # leader: TERM ends it; its child ignores TERM (an nvidia-smi wedged under `timeout`)
    leader = subprocess.Popen(["sh", "-c", '(trap "" TERM; exec sleep 300) & exec sleep 301'], start_new_session=True)
    group.append(leader)
    assert _wait_until(lambda: len(_group(leader.pid)) == 2, 10)
    r = _sh(shell, KILL_SCRIPT, str(leader.pid), _starttime(leader.pid))
    assert r.returncode == 0, r.stderr
    assert "Illegal number" not in r.stderr
    leader.wait(10)
    assert _wait_until(lambda: not _group(leader.pid), 10), f"left: {_group(leader.pid)}"


@pytest.mark.parametrize("shell", SHELLS)
def test_stream_kill_guard_kills_nothing_on_a_wrong_starttime(
    shell: list[str], group: list[subprocess.Popen[bytes]]
) -> None:
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    group.append(p)
    r = _sh(shell, KILL_SCRIPT, str(p.pid), "1")
    assert r.returncode == 0 and _live(p.pid)


def _run_dir(tmp_path: Path, rid: str, pid: int) -> Path:
    d = tmp_path / "runs" / rid
    d.mkdir(parents=True)
    (d / "run.sh").write_text(": wrapper\n")
    (d / "pid").write_text(f"{pid}\n")
    (d / "starttime").write_text(_starttime(pid) + "\n")
    (d / "log").write_text("")
    (d / "meta.json").write_text("{}")
    return d


@pytest.mark.parametrize("shell", SHELLS)
def test_stop_terms_the_group_under_every_shell(
    shell: list[str], tmp_path: Path, group: list[subprocess.Popen[bytes]]
) -> None:
    # a server group that obeys TERM: stop must end it with TERM, not wait out the grace and KILL
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 301 & wait"], start_new_session=True)
    group.append(leader)
    assert _wait_until(lambda: len(_group(leader.pid)) == 3, 10)
    d = _run_dir(tmp_path, "abc123", leader.pid)
    r = _sh(shell, STOP_SCRIPT, str(d), "3", "abc123")
    assert "STATE STOPPED TERM" in r.stdout, (r.stdout, r.stderr)
    assert "WARN" not in r.stdout
    leader.wait(10)
    assert _wait_until(lambda: not _group(leader.pid), 10)


@pytest.mark.parametrize("shell", SHELLS)
def test_list_does_not_count_a_zombie_wrapper_as_alive(shell: list[str], tmp_path: Path) -> None:
    z = subprocess.Popen(["sh", "-c", "exit 0"])
    try:
        assert _wait_until(lambda: (_stat(z.pid) or ["?"])[0] == "Z", 10)
        _run_dir(tmp_path, "zzz111", z.pid)
        live = subprocess.Popen(["sleep", "300"])
        try:
            _run_dir(tmp_path, "live22", live.pid)
            r = _sh(shell, LIST_SCRIPT, env=dict(os.environ, TUNEDECK_HOME=str(tmp_path)))
            rows = {f[1]: f for f in (line.split("\t") for line in r.stdout.splitlines()) if f[0] == "RUN"}
            assert rows["zzz111"][4] == "0", r.stdout  # alive column
            assert rows["live22"][4] == "1", r.stdout
        finally:
            live.kill()
            live.wait()
    finally:
        z.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_stop_of_a_wrapper_that_ends_as_it_is_read_says_exited(shell: list[str], tmp_path: Path) -> None:
    """The wrapper writes its rc and ends just as stop reads its /proc entry (a server that failed
    a moment before the stop): that is an exit, not a pid taken over by another process."""
    wrapper = subprocess.Popen(["sleep", "300"])
    d = _run_dir(tmp_path, "race01", wrapper.pid)
    (d / "rc").write_text("1\n")
    flag = tmp_path / "reading"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real_sed = shutil.which("sed")
    assert real_sed
    # the first read of the wrapper's stat waits until the wrapper has ended and been reaped
    (bindir / "sed").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"/proc/{wrapper.pid}/stat"*)\n'
        f"  if [ ! -e {flag} ]; then : > {flag}; while [ -e /proc/{wrapper.pid} ]; do sleep 0.01; done; fi;;\n"
        "esac\n"
        f'exec {real_sed} "$@"\n'
    )
    (bindir / "sed").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    script = tmp_path / "stop.sh"
    script.write_text(STOP_SCRIPT)
    with script.open() as stdin:
        stop = subprocess.Popen(
            [*shell, "-s", "--", str(d), "2", "race01"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    try:
        assert _wait_until(flag.exists, 30)
        wrapper.kill()
        wrapper.wait(10)  # reaped: its /proc entry is gone
        out, err = stop.communicate(timeout=60)
    finally:
        wrapper.kill()
        stop.kill()
    assert "STATE EXITED 1" in out, (out, err)
    assert "STALE" not in out
