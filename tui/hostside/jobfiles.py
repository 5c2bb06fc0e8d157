"""The layout of a host-side job folder, shared by the host runtime and the laptop.

``${TUNEDECK_HOME}/<kind>/<id>/`` (kind ``bench`` or ``ab``)::

    run.sh pid starttime rc log argv.json env.json meta.json   the detached wrapper (launcher)
    spec.json      what to run (an A/B's copy has its secrets redacted once read)
    events.jsonl   progress events, one JSON object a line, append-only
    report.json    an A/B's final report (atomic replace)
    data/results/<run_id>/{meta.json,samples.jsonl,summary.json}
                   every benchmark level, in the results-store layout

The job's last event has ``type`` ``exit`` (``rc``, ``error``); a job killed
without one is known by its ``rc`` file or by its process being gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TypedDict

SPEC = "spec.json"
EVENTS = "events.jsonl"
REPORT = "report.json"
DATA = "data"
RESULTS = "data/results"
JOURNAL = "data/journal"

log = logging.getLogger(__name__)


class ExitRecord(TypedDict, total=False):
    """A job's last event: its exit status and error (None: none), ``synthetic`` when the
    laptop wrote it for a job that ended without one (killed: its ``rc`` file, if any)."""

    type: str
    rc: Optional[int]
    error: Optional[str]
    synthetic: bool


def exit_record(rc: Optional[int], error: Optional[str], *, synthetic: bool = False) -> ExitRecord:
    """The ``exit`` event, as the host-side job writes it and the laptop reads it."""
    rec = ExitRecord(type="exit", rc=rc, error=error)
    if synthetic:
        rec["synthetic"] = True
    return rec


def read_exit(ev: Mapping[str, Any]) -> ExitRecord:
    """An ``exit`` event as read from a host (its fields checked: a wrong type reads as None)."""
    rc, error = ev.get("rc"), ev.get("error")
    return exit_record(
        rc if isinstance(rc, int) and not isinstance(rc, bool) else None,
        error if isinstance(error, str) else None,
        synthetic=ev.get("synthetic") is True,
    )


class EventLog:
    """Append-only JSON lines, written by a thread so the event loop never waits on the disk.

    One ``os.write`` per line on an ``O_APPEND`` descriptor; fsync at most once a
    second and on close. A write failure (disk full) is kept and raised by
    :meth:`check` and :meth:`close`, so the job stops with a clear error.
    """

    def __init__(self, path: Path, *, sync_every: float = 1.0) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._q: queue.Queue[bytes | None] = queue.Queue()
        self._error: OSError | None = None
        self._sync_every = sync_every
        self._thread = threading.Thread(target=self._loop, name="event-log", daemon=True)
        self._thread.start()

    def write(self, obj: Mapping[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), default=str) + "\n"
        self._q.put(line.encode("utf-8"))

    def _loop(self) -> None:
        last_sync = time.monotonic()
        dirty = False
        while True:
            try:
                item = self._q.get(timeout=self._sync_every)
            except queue.Empty:
                item = b""
            if item is None:
                break
            if item and self._error is None:
                try:
                    os.write(self._fd, item)
                    dirty = True
                except OSError as e:
                    self._error = e
                    log.error("writing %s failed: %s", self.path, e)
            if dirty and time.monotonic() - last_sync >= self._sync_every and self._error is None:
                try:
                    os.fsync(self._fd)
                except OSError as e:
                    self._error = e
                dirty, last_sync = False, time.monotonic()
        if dirty and self._error is None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                self._error = e

    @property
    def failed(self) -> bool:
        return self._error is not None

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        if self._fd < 0:
            return
        self._q.put(None)
        self._thread.join()
        os.close(self._fd)
        self._fd = -1
        self.check()


def on_stop_signal(action: Callable[[], object]) -> None:
    """Run ``action`` on the first SIGTERM, SIGINT or SIGHUP only: a stop signals the job's process
    group and its environment marker, and a second cancel must not cut the cleanup (a partial
    summary being written, the server an A/B started being stopped)."""
    loop = asyncio.get_running_loop()
    fired = False

    def handler() -> None:
        nonlocal fired
        if not fired:
            fired = True
            log.info("stop requested")
            action()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, handler)


def read_spec(job_dir: Path) -> dict[str, Any]:
    try:
        spec = json.loads((job_dir / SPEC).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{job_dir / SPEC}: missing") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{job_dir / SPEC}: unreadable ({e})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{job_dir / SPEC}: not a JSON object")
    return spec
