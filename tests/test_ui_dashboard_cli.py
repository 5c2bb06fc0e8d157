"""``tunedeck`` without a subcommand: clear errors, and the app really starts in a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest

from tests.conftest import REPO, tunedeck_cmd


def test_bad_target_is_one_line_error():
    r = subprocess.run([*tunedeck_cmd(), "--host", "bad host"], capture_output=True, text=True, cwd=REPO,
                       timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip() == "tunedeck: target 'bad host': invalid host name 'bad host'"
    assert "Traceback" not in r.stderr


def test_no_terminal_says_so():
    r = subprocess.run([*tunedeck_cmd(), "--host", "local"], capture_output=True, text=True, cwd=REPO,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert "needs a terminal" in r.stderr and "status --json" in r.stderr


@pytest.mark.timeout(40)
def test_dashboard_starts_in_a_pty_and_quits_on_ctrl_q():
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", LINES="36")
    proc = subprocess.Popen([*tunedeck_cmd(), "--host", "local"], stdin=slave, stdout=slave, stderr=slave,
                            cwd=REPO, env=env, start_new_session=True)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 20
        while b"tunedeck" not in out or b"local" not in out:
            assert time.monotonic() < deadline, out[-2000:]
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                out += os.read(master, 65536)
        os.write(master, b"\x11")  # ctrl+q
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
