"""Helpers for tests that run the simulator as a real process on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from tests.conftest import REPO, tunedeck_cmd
from tests.ports import free_port  # noqa: F401  (imported from here by many tests)

READY = {"sglang": "The server is fired up and ready to roll!", "vllm": "Application startup complete."}


class SimProc:
    """``tunedeck sim ENGINE ...`` as a subprocess; output collected by a thread. Always ``stop()`` it.
    ``netns``: run it inside that network namespace (a namespaced host's loopback, tests/nshosts.py)."""

    def __init__(self, engine: str, *args: str, env: dict[str, str] | None = None, netns: str | None = None) -> None:
        self.engine = engine
        e = dict(os.environ)
        e.update(env or {})
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.proc = subprocess.Popen(
            [*prefix, *tunedeck_cmd(), "sim", engine, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=e,
            start_new_session=True,
        )
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = self.proc.stdout.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                return
            with self._lock:
                self._buf += chunk

    @property
    def raw(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", "replace")

    def lines(self) -> list[str]:
        return [x for x in re.split(r"[\r\n]+", self.raw) if x]

    def wait_for(self, text: str, timeout: float = 20.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.raw:
                return True
            if self.proc.poll() is not None:
                time.sleep(0.1)
                return text in self.raw
            time.sleep(0.05)
        return False

    def wait_ready(self, timeout: float = 20.0) -> None:
        if not self.wait_for(READY[self.engine], timeout):
            raise AssertionError(f"sim {self.engine} not ready; output tail:\n{self.raw[-3000:]}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        rc = self.proc.wait(timeout)
        self._t.join(2)
        return rc

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._t.join(2)
        return self.proc.returncode

    def __enter__(self) -> "SimProc":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _num(x: float) -> str:
    return f"{x:g}"


def _sim(engine: str, port: int, model: tuple[str, ...], load_s: float, *extra: str, **kw: Any) -> SimProc:
    return SimProc(engine, *model, "--port", str(port), "--sim-load-seconds", _num(load_s), *extra, **kw)


def vllm_sim(
    port: int,
    *extra: str,
    ttft_ms: float = 50,
    itl_ms: float = 10,
    load_s: float = 0.5,
    netns: str | None = None,
) -> SimProc:
    """``tunedeck sim vllm m -tp 8`` on ``port`` with a fixed TTFT and inter-token latency (ms),
    loaded in ``load_s`` seconds; ``extra``: more of its options."""
    timing = ("--sim-fixed-ttft-ms", _num(ttft_ms), "--sim-fixed-itl-ms", _num(itl_ms))
    return _sim("vllm", port, ("m", "-tp", "8"), load_s, *timing, *extra, netns=netns)


def sglang_sim(port: int, *extra: str, load_s: float = 0.3) -> SimProc:
    """``tunedeck sim sglang --model-path m --tp-size 8`` on ``port`` with its ``/metrics``,
    loaded in ``load_s`` seconds; ``extra``: more of its options."""
    return _sim("sglang", port, ("--model-path", "m", "--tp-size", "8"), load_s, "--enable-metrics", *extra)


def sse_events(text: str) -> Iterator[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:"):
                yield line[5:].lstrip(" ")


def sim_ttft_ms(rec: Path, start_wall: float, n: int) -> float:
    """The mean TTFT (ms) the simulator recorded (``--sim-record-timestamps rec``) for the ``n``
    requests that arrived first from ``start_wall`` on (a level's ``bench_start_wall``): the server's
    own clock, the truth a client's figure is checked against."""
    timed = [json.loads(x) for x in rec.read_text().splitlines() if x.strip()]
    timed = sorted((x for x in timed if x["arrival"] >= start_wall - 0.005), key=lambda x: x["arrival"])[:n]
    assert len(timed) == n, (len(timed), n)
    return sum(x["ttft"] for x in timed) / n * 1000
