"""LocalHost children inherit only stdin/stdout/stderr, on uvloop (which ignores close_fds) as on asyncio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.integration.test_launcher import fake
from tunedeck.hostops.localhost import LocalHost
from tunedeck.util.aio import run_async

pytestmark = pytest.mark.timeout(60)

# the child's open descriptors; the listing's own one is closed again by then: left out
LIST = (
    "import os; fds = sorted(map(int, os.listdir('/proc/self/fd'))); "
    "print(*[fd for fd in fds if os.path.exists('/proc/self/fd/%d' % fd)])"
)


def _children_fds(fast: bool) -> list[list[int]]:
    async def main() -> list[list[int]]:
        h = LocalHost()
        # an inheritable descriptor of the caller's (like the ones a parent shell or uvloop leaves)
        r, w = os.pipe()
        os.set_inheritable(w, True)
        try:
            res = [await h.run([sys.executable, "-c", LIST])]
            res += [await h.run([sys.executable, "-c", LIST], input="x")]
            async with h.stream([sys.executable, "-c", LIST]) as s:
                out = b"".join([c async for c in s]).decode()
        finally:
            os.close(r)
            os.close(w)
        return [[int(v) for v in line.split()] for line in [x.stdout for x in res] + [out]]

    return run_async(main(), fast=fast)


@pytest.mark.parametrize("fast", [True, False], ids=["uvloop", "asyncio"])
def test_local_children_inherit_only_stdio(fast: bool) -> None:
    for fds in _children_fds(fast):
        assert fds == [0, 1, 2]


def test_detached_launch_then_wait_finishes_promptly() -> None:
    """The detached server must not hold the launching command's pipes: `launch --wait` returns once ready."""
    argv, _ = fake("sglang", None, "--load-seconds", "0.5")
    t0 = time.monotonic()
    r = subprocess.run(
        [*tunedeck_cmd(), "launch", "--wait", "--json", "--cmd", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=40,
    )
    try:
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["progress"]["state"] == "ready"
        assert time.monotonic() - t0 < 20
    finally:
        s = subprocess.run(
            [*tunedeck_cmd(), "stop", "--yes", "--json", "--grace", "3"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert s.returncode == 0, s.stderr


def test_local_stream_dies_with_tunedeck_even_on_kill_9(tmp_path: Path) -> None:
    """A `tail -F` started by a LocalHost stream ends when the process that started it is
    killed with SIGKILL (no cleanup code runs): nothing is orphaned. The log stays quiet, so
    tail never writes and never gets SIGPIPE: only the pipe watchdog can end it."""
    import signal
    import subprocess
    import sys
    import time

    log = tmp_path / "log"
    log.write_text("x\n")
    marker = f"tdmark{os.getpid()}"
    code = (
        "import asyncio, sys\n"
        "from tunedeck.hostops.localhost import LocalHost\n"
        "from tunedeck.util.aio import run_async\n"
        "async def main():\n"
        f"    s = LocalHost().stream(['sh', '-c', 'exec tail -F \"$1\"', {marker!r}, {str(log)!r}])\n"
        "    async for chunk in s:\n"
        "        print('got', flush=True)\n"
        "        await asyncio.sleep(3600)\n"
        "run_async(main())\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).resolve().parents[2])
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "got"

        def tails() -> list[str]:
            out = subprocess.run(["pgrep", "-f", f"tail -F {log}"], capture_output=True, text=True).stdout
            return out.split()

        assert tails(), "the stream's tail should be running"
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 5
        while tails() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tails(), "tail outlived the process that streamed it"
    finally:
        if p.poll() is None:
            p.kill()
        for pid in tails():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
