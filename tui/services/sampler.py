"""The laptop's end of the host sampler (:mod:`tunedeck.hostside.sampler`): one channel per host.

:class:`HostSampler` ships the runtime (:func:`tunedeck.services.runtime.ensure`),
starts ``python -I tunedeck-host-….pyz sample …`` with ``host.stream`` and keeps
the newest message of each kind. Readers (:mod:`tunedeck.collectors.sampled`) wait on
:meth:`HostSampler.wait_change` and read the fields; nothing here parses GPU rows
or metrics.

``state``: ``starting``, ``running`` (lines arrive), ``lost`` (the channel
ended; restarted with backoff), ``unavailable`` (the host has no usable Python:
:class:`~tunedeck.services.runtime.RuntimeUnavailable`; the collectors fall back to
one command per poll) or ``closed``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from tunedeck.hostops.hosts import Host, HostError
from tunedeck.services import runtime
from tunedeck.util.aio import within
from tunedeck.util.retry import Backoff

log = logging.getLogger(__name__)

#: states in which a reader should stop waiting for the first lines
SETTLED = ("running", "lost", "refused", "unavailable", "closed")


@dataclass(eq=False)
class HostSampler:
    """The sampler of one host. :meth:`start` is idempotent; :meth:`aclose` ends it on the host."""

    host: Host
    _: KW_ONLY
    interval: float = 1.0
    apps_interval: float = 5.0
    keepalive: float = 45.0
    lifetime: float = 3600.0
    python: str | None = None
    #: None: the host's own (:attr:`~tunedeck.hostops.hosts.Host.nvidia_smi`, when the sampler starts)
    smi: str | None = None
    max_backoff: float = 30.0
    #: a ``--sim`` target: where the host has no nvidia-smi, the simulated one (its sim GPUs)
    sim: bool = False
    state: str = field(default="starting", init=False)
    reason: str = field(default="", init=False)
    #: newest message of each kind (``gpu``/``gpu_error`` share ``gpu``), and a counter per kind
    latest: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    seq: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict, init=False, repr=False)
    servers: dict[int, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    hello: dict[str, Any] | None = field(default=None, init=False, repr=False)
    #: how many times the sampler process was started (tests, diagnostics)
    starts: int = field(default=0, init=False)
    #: the last link error; a refusal (host key, auth) stops the restarts until :meth:`start` again
    error: HostError | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _bad_lines: int = field(default=0, init=False, repr=False)

    # ------------------------------------------------------------------ readers
    def start(self) -> None:
        """Start reading (again after a refusal: the user acted, one new attempt)."""
        if self.state == "closed":
            return
        if self._task is None or self._task.done():
            if self.state == "refused":
                self.state, self.reason, self.error = "starting", "", None
            self._task = asyncio.ensure_future(self._run())

    async def wait_settled(self, timeout: float | None = None) -> str:
        """Wait until the sampler runs, failed or is unavailable; returns the state."""
        self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state not in SETTLED:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            await self.wait_change(left)
        return self.state

    async def wait_change(self, timeout: float | None) -> bool:
        """Wait for the next message or state change; False on timeout."""
        ev = self._changed
        try:
            await within(ev.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def _notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    def _set_state(self, state: str, reason: str = "") -> None:
        if self.state == "closed":
            return
        if state != self.state or reason != self.reason:
            self.state, self.reason = state, reason
            self._notify()

    # ------------------------------------------------------------------ the channel
    @property
    def heartbeat(self) -> float:
        """Seconds between two heartbeats on the sampler's stdin: it ends after ``keepalive``
        seconds without one (or when stdin closes), so a link that died without a word, or a
        laptop that froze, leaves no sampler behind."""
        return self.keepalive / 3

    def argv(self, rt: runtime.Runtime) -> list[str]:
        return rt.argv(
            "sample",
            "--home",
            rt.home,
            "--interval",
            f"{self.interval:g}",
            "--apps-interval",
            f"{self.apps_interval:g}",
            "--keepalive",
            f"{self.keepalive:g}",
            "--heartbeat",
            f"{self.keepalive:g}",
            "--lifetime",
            f"{self.lifetime:g}",
            "--smi",
            self.smi or self.host.nvidia_smi,
        )

    async def _run(self) -> None:
        backoff = Backoff(1.0, self.max_backoff)
        target = getattr(self.host, "target", "local")
        while self.state != "closed":  # a flag too: wait_for can swallow a cancellation (< 3.12)
            try:
                ensure = runtime.ensure_sim if self.sim else runtime.ensure
                rt = await ensure(self.host, python=self.python)
            except runtime.RuntimeUnavailable as e:
                log.warning("%s: no host sampler, polling with one command each: %s", target, e)
                self._set_state("unavailable", str(e))
                return
            except HostError as e:
                self.error = e
                if not e.retryable:  # host key or auth: nothing connects again until the user acts
                    log.warning("%s: host sampler refused: %s", target, e)
                    self._set_state("refused", str(e))
                    return
                log.warning("%s: cannot start the host sampler: %s", target, e)
                self._set_state("lost", str(e))
                await asyncio.sleep(backoff.next())
                continue
            except OSError as e:
                log.warning("%s: cannot start the host sampler: %s", target, e)
                self._set_state("lost", str(e))
                await asyncio.sleep(backoff.next())
                continue
            before = self.seq.get("hello", 0)
            byes = self.seq.get("bye", 0)
            why = await self._follow(rt)
            if self.state == "closed":
                return
            if self.seq.get("bye", 0) != byes:
                log.info("%s: host sampler reached its lifetime; starting the next", target)
                continue  # planned: no "lost" state, no wait
            if self.error is not None and not self.error.retryable:
                log.warning("%s: host sampler refused: %s", target, self.error)
                self._set_state("refused", str(self.error))
                return
            if self.seq.get("hello", 0) != before:
                backoff.reset()  # it ran: the next failure starts the backoff again
            wait = backoff.next()
            log.warning("%s: host sampler ended: %s; restarting in %.0f s", target, why, wait)
            self._set_state("lost", why)
            await asyncio.sleep(wait)

    async def _follow(self, rt: runtime.Runtime) -> str:
        """Read one sampler process until it ends; returns why it ended."""
        self.starts += 1
        try:
            async with self.host.stream_lines(self.argv(rt), heartbeat=self.heartbeat) as lines:
                async for line in lines:
                    self._on_line(line)
                status, tail = lines.exit_status, lines.stderr_tail.strip()
        except HostError as e:
            self.error = e
            return e.message
        except OSError as e:
            return f"{type(e).__name__}: {e}"
        last = tail.splitlines()[-1] if tail else ""
        return f"exit status {status}" + (f": {last}" if last else "")

    def _on_line(self, line: str) -> None:
        if self.state == "closed":
            return
        try:
            msg = json.loads(line)
            kind = msg["t"]
        except (ValueError, KeyError, TypeError):
            self._bad_lines += 1
            if self._bad_lines <= 3:
                log.warning("host sampler: not a sample line: %r", line[:200])
            return
        if kind == "runs":
            self.runs[str(msg.get("kind"))] = list(msg.get("runs") or [])
        elif kind == "server":
            port = msg.get("port")
            if isinstance(port, int):
                self.servers[port] = msg
        elif kind == "hello":
            self.hello = msg
        key = "gpu" if kind == "gpu_error" else kind
        self.latest[key] = msg
        self.seq[key] = self.seq.get(key, 0) + 1
        if self.state != "running":
            self.state, self.reason, self.error = "running", "", None
        self._notify()

    async def aclose(self) -> None:
        """End the sampler on the host (the stream's close kills it) and stop restarting it."""
        self.state = "closed"
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=10)
            if not done:
                log.error(
                    "%s: the host sampler's reader did not stop within 10 s", getattr(self.host, "target", "local")
                )
            elif not task.cancelled() and task.exception() is not None:
                log.error("host sampler reader failed: %r", task.exception())
        self._notify()
