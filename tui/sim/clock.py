"""Fixed timing (``--sim-fixed-ttft-ms`` / ``--sim-fixed-itl-ms``): one clock for every request.

A request's first token is due at arrival + TTFT, its k-th at arrival + TTFT + k × ITL
(an absolute schedule: lateness never adds up). With one TTFT and one ITL for all,
requests stay in due order in two FIFO queues (waiting for the first token, decoding),
so one timer serves them all: each time it fires, every chunk that is due is written in
one pass, in due order. A long pass is cut into slices of ``SLICE_S`` seconds with a
turn of the event loop in between, so requests that arrive meanwhile are read (and
stamped) at once instead of after the whole pass.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from tunedeck.sim.formats import Req

#: seconds of writing before the loop gets a turn to read its sockets
SLICE_S = 0.0003
#: event-loop timers fire on whole milliseconds: a chunk due within half of one is written now
EARLY = 0.0005


class FixedClock:
    """Writes each request's chunks on its absolute schedule through ``emit(r, now)``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ttft: float, itl: float, emit: Callable[[Req, float], None]
    ) -> None:
        self.loop = loop
        self.ttft = ttft
        self.itl = itl
        self.emit = emit
        self.first: deque[Req] = deque()  # by arrival, so by first-token time
        self.decode: deque[Req] = deque()  # by next token time (the same ITL keeps the order)
        self.handle: asyncio.TimerHandle | None = None  # the timer, or None while a pass is queued or nothing is due
        self.handle_due = 0.0
        self.queued = False

    def add(self, r: Req) -> None:
        """Schedule ``r`` (``r.arrival`` on the monotonic clock; ``r.due`` is set here)."""
        r.due = r.arrival + self.ttft
        self.first.append(r)
        if not self.queued and (self.handle is None or r.due < self.handle_due):
            self._arm()

    def _next_due(self) -> float | None:
        f, d = self.first, self.decode
        while f and f[0].finish is not None:
            f.popleft()
        while d and d[0].finish is not None:
            d.popleft()
        if f and d:
            return float(min(f[0].due, d[0].due))
        if f:
            return float(f[0].due)
        if d:
            return float(d[0].due)
        return None

    def _arm(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        due = self._next_due()
        if due is None:
            return
        if due - time.monotonic() <= EARLY:
            self.queued = True
            self.loop.call_soon(self._pass)
        else:
            self.handle = self.loop.call_at(due, self._pass)  # the loop's clock is the monotonic one
            self.handle_due = due

    def _pass(self) -> None:
        self.handle = None
        self.queued = False
        first, decode, itl, emit = self.first, self.decode, self.itl, self.emit
        now = time.monotonic()
        horizon = now + EARLY
        until = now + SLICE_S
        while True:
            if first and (not decode or first[0].due <= decode[0].due):
                q = first
            elif decode:
                q = decode
            else:
                break
            r = q[0]
            if r.finish is not None:
                q.popleft()
                continue
            if r.due > horizon:
                break
            q.popleft()
            emit(r, now)
            if r.finish is None:
                r.due = r.arrival + self.ttft + r.out * itl
                decode.append(r)
            if time.monotonic() >= until:
                break
        self._arm()
