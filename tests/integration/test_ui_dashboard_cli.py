"""``tunedeck`` without a subcommand: clear errors, and the app really starts in a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from tests.conftest import REPO, tunedeck_cmd


def test_bad_target_is_one_line_error():
    r = subprocess.run([*tunedeck_cmd(), "--host", "bad host"], capture_output=True, text=True, cwd=REPO, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip() == "tunedeck: target 'bad host': invalid host name 'bad host'"
    assert "Traceback" not in r.stderr


def test_no_terminal_says_so():
    r = subprocess.run(
        [*tunedeck_cmd(), "--host", "local"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2
    assert "needs a terminal" in r.stderr and "status --json" in r.stderr


ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")


def _screen_bytes(out: bytes) -> bytes:
    return ANSI.sub(b"", out)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args,expect", [(["--host", "local"], [b"local"]), (["--demo"], [b"GPUs (8)", b"H200", b"demo \xc2\xb7 connected"])]
)
def test_dashboard_starts_in_a_pty_and_quits_on_ctrl_q(args, expect):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", LINES="36")
    proc = subprocess.Popen(
        [*tunedeck_cmd(), *args], stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env, start_new_session=True
    )
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while not all(e in _screen_bytes(out) for e in [b"tunedeck", *expect]):
            assert time.monotonic() < deadline, _screen_bytes(out)[-3000:]
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
