"""The host sampler's channel to the laptop (one SSH channel): JSON lines written from a thread
that notices a reader gone (:class:`Output`), and the laptop's heartbeat read from stdin
(:class:`Heartbeat`). Standard library only, Python >= 3.9."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from typing import Any, Dict, Optional


class Output:
    """Writes JSON lines to a file descriptor from a thread; notices a reader that went away.

    ``os.write`` to a closed pipe raises (SIGPIPE is ignored): :attr:`gone` is set.
    A write still pending after ``keepalive`` seconds also counts as gone (the
    channel is full and nobody drains it).
    """

    def __init__(self, fd: int, keepalive: float) -> None:
        self.fd = fd
        self.keepalive = keepalive
        self.gone = threading.Event()
        self.reason = ""
        self._q: "queue.Queue[Optional[bytes]]" = queue.Queue(maxsize=256)
        self._writing_since = 0.0
        self._thread = threading.Thread(target=self._loop, name="out", daemon=True)
        self._thread.start()

    def emit(self, obj: Dict[str, Any]) -> None:
        if self.gone.is_set():
            return
        line = (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        try:
            self._q.put_nowait(line)
        except queue.Full:
            self._lose(f"{self._q.maxsize} lines waiting: nobody reads the channel")

    def stalled(self) -> bool:
        since = self._writing_since
        return since > 0 and time.monotonic() - since > self.keepalive

    def _lose(self, why: str) -> None:
        if not self.gone.is_set():
            self.reason = why
            self.gone.set()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            self._writing_since = time.monotonic()
            try:
                view = memoryview(item)
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except OSError as e:
                self._lose(f"stdout closed ({e.strerror or e})")
                return
            finally:
                self._writing_since = 0.0
                self._q.task_done()

    def drain(self, timeout: float) -> None:
        """Wait until every queued line was written (or the reader is gone), at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while (
            (self._q.unfinished_tasks or self._writing_since) and not self.gone.is_set() and time.monotonic() < deadline
        ):
            time.sleep(0.02)

    def close(self) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass


class Heartbeat:
    """Reads the laptop's heartbeat (any bytes) from a file descriptor in a thread.

    :meth:`lost` says why the laptop counts as gone: stdin closed, or nothing came
    for ``timeout`` seconds (a link that died without a word)."""

    def __init__(self, fd: int, timeout: float) -> None:
        self.fd = fd
        self.timeout = timeout
        self.last = time.monotonic()
        self.closed = ""
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError as e:
                self.closed = f"stdin unreadable ({e.strerror or e})"
                return
            if not data:
                self.closed = "stdin closed (the laptop ended the channel)"
                return
            self.last = time.monotonic()

    def lost(self) -> str:
        if self.closed:
            return self.closed
        quiet = time.monotonic() - self.last
        if quiet > self.timeout:
            return f"no heartbeat from the laptop for {quiet:.0f} s (limit {self.timeout:g} s)"
        return ""


__all__ = ["Heartbeat", "Output"]
