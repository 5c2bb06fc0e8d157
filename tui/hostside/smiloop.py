"""The host sampler's two ``nvidia-smi … -lms`` streams (GPUs, compute processes): one long-lived
process each, its output cut into blocks of rows, restarted with backoff when it ends or goes quiet.
Standard library only, Python >= 3.9."""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
from dataclasses import InitVar, dataclass, field
from typing import Callable, List, Optional

from tunedeck.util.retry import Backoff

#: the GPU fields asked of nvidia-smi, in order (the laptop's GPU collector asks the same:
#: ``tunedeck.collectors.smi.QUERY_GPU_FIELDS``)
GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.mem",
)
#: the compute-process fields, in order (``tunedeck.collectors.smi.QUERY_APPS_FIELDS``)
APPS_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")

#: a line of rows from nvidia-smi within this many seconds of the previous one is the same block
BLOCK_GAP = 0.2
#: how long :meth:`SmiLoop.close` waits for the loop's thread (it sees the stop within a second
#: and ends its process within 3 s more)
CLOSE_JOIN_S = 10.0


@dataclass(eq=False)
class SmiLoop:
    """One long-lived ``nvidia-smi … -lms`` process, restarted with backoff when it ends.

    ``on_block(rows)`` gets each block of rows (a burst of lines), ``on_error(status, text)``
    each failure. ``quiet`` seconds without any row count as a failure (the process is
    ended and started again)."""

    argv: List[str]
    on_block: Callable[[List[str]], None]
    on_error: Callable[[Optional[int], str], None]
    quiet: Optional[float]
    stop: threading.Event
    #: the loop thread's name
    name: InitVar[str]
    idle_block: Optional[float] = None
    proc: Optional[subprocess.Popen[bytes]] = field(default=None, init=False)
    starts: int = field(default=0, init=False)

    def __post_init__(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        while not self.stop.is_set():
            ok = self._once()
            if self.stop.is_set():
                return
            if ok:
                backoff.reset()
            self.stop.wait(backoff.next())

    def _once(self) -> bool:
        if shutil.which(self.argv[0]) is None:  # not even a fork while it is missing
            self.on_error(None, f"{self.argv[0]}: not found (No such file or directory)")
            return False
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True
            )
        except OSError as e:
            self.on_error(None, f"{self.argv[0]}: {e.strerror or e}")
            return False
        self.starts += 1
        proc = self.proc
        stdout = proc.stdout
        assert stdout is not None
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()

        def pump() -> None:
            for raw in iter(stdout.readline, b""):
                lines.put(raw)
            lines.put(None)

        reader = threading.Thread(target=pump, name="smi-read", daemon=True)
        reader.start()
        block: List[str] = []
        noise: List[str] = []
        got = False
        last_row = last_block = time.monotonic()
        ended = False
        while not self.stop.is_set():
            try:
                raw = lines.get(timeout=BLOCK_GAP if block else 1.0)
            except queue.Empty:
                if block:
                    self.on_block(block)
                    block, got, last_block = [], True, time.monotonic()
                elif self.idle_block is not None and time.monotonic() - last_block > self.idle_block:
                    self.on_block([])  # a loop that lists nothing prints nothing: say so
                    last_block = time.monotonic()
                elif self.quiet is not None and time.monotonic() - last_row > self.quiet:
                    self.on_error(None, "\n".join(noise[-6:]) or f"no output from nvidia-smi for {self.quiet:g} s")
                    break
                continue
            if raw is None:
                ended = True
                break
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.split(",", 1)[0].strip().isdigit():
                block.append(line)
                last_row = time.monotonic()
            elif line.strip():
                noise = (noise + [line.strip()])[-6:]
        if block:
            self.on_block(block)
            got = True
        self._end(proc)
        if ended and not self.stop.is_set():
            self.on_error(proc.returncode, "\n".join(noise).strip())
        return got

    @staticmethod
    def _reap(proc: "subprocess.Popen[bytes]") -> None:
        """TERM ``proc`` if it runs, KILL it after 3 s, and wait for it."""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @classmethod
    def _end(cls, proc: "subprocess.Popen[bytes]") -> None:
        cls._reap(proc)
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        """End the nvidia-smi process now and reap it (the caller set ``stop`` first). A start
        that raced the stop is ended by the loop's thread, which this waits for: the thread is a
        daemon, and a process that exited without it left that nvidia-smi running for good."""
        if self.proc is not None:
            self._reap(self.proc)
        if self._thread.is_alive():
            self._thread.join(CLOSE_JOIN_S)
        if self.proc is not None:
            self._reap(self.proc)


__all__ = ["APPS_FIELDS", "BLOCK_GAP", "GPU_FIELDS", "SmiLoop"]
