"""The host-side nvidia-smi loop (tui/hostside/smiloop.py): ``close`` leaves nothing running, even
when the loop's thread was starting nvidia-smi as the stop came (a sampler at the end of its
lifetime left such a process behind for good: the thread is a daemon, and the sampler exited)."""

from __future__ import annotations

import subprocess
import threading

from tests.waits import until
from tunedeck.hostside import smiloop
from tunedeck.hostside.smiloop import SmiLoop

ROWS = "while :; do echo '0, 1'; sleep 0.5; done"  # a block a line (BLOCK_GAP is 0.2 s)


def test_a_start_that_races_the_stop_is_ended_before_close_returns(monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = subprocess.Popen

    def slow_start(*a, **kw):
        # the patch is the whole process's subprocess.Popen: only the loop's own start is held
        if threading.current_thread() is loop._thread:
            entered.set()
            release.wait(10)
        return real(*a, **kw)

    monkeypatch.setattr(smiloop.subprocess, "Popen", slow_start)
    stop = threading.Event()
    loop = SmiLoop(["sh", "-c", ROWS], lambda rows: None, lambda rc, text: None, quiet=None, stop=stop, name="t")
    loop.start()
    until(entered.is_set, 10, what="the loop's start of nvidia-smi")
    stop.set()
    threading.Timer(0.3, release.set).start()  # the start completes after the stop, during close()
    loop.close()
    assert loop.proc is not None and loop.proc.poll() is not None  # started, then ended and reaped
    assert not loop._thread.is_alive()


def test_close_ends_a_running_loop_and_its_process():
    stop = threading.Event()
    blocks: list[list[str]] = []
    loop = SmiLoop(["sh", "-c", ROWS], blocks.append, lambda rc, text: None, quiet=None, stop=stop, name="t")
    loop.start()
    until(lambda: blocks, 5, what="a block of rows")
    assert set(blocks[0]) == {"0, 1"}
    stop.set()
    loop.close()
    assert loop.proc is not None and loop.proc.poll() is not None
    assert not loop._thread.is_alive()
