"""Sending a schedule's requests on time (trace replay, request rate), standard library only.

A request that falls due is written at once by whichever callback notices first: the read of any
stream (``Conn.data_received``), any stream handing over its next batch
(``Response.next_batch``), or the dispatcher's own wake-up (:func:`sleep_until`). Those check the
client's :class:`~tunedeck.bench.httppool.Gate`, one float comparison each. Left to the dispatcher's
own turn, a due request would wait behind every stream's tokens of a decode step (the engines emit
a step's tokens for all running requests at once, and one loop iteration parses them all), and
then for its own task's first step, one iteration later: whole same-millisecond bursts would go
out late together.

The request is written on an idle pooled connection (:meth:`HttpClient.write_now`); its task then
reads the response. :class:`EagerDispatch` keeps a few connections idle ahead of the schedule, so
a due send is one ``transport.write``; when none is idle the request's task opens one, and that
connect counts as lateness.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from typing import Callable, Optional, Sequence

from tunedeck.bench.http import HttpClient, Request, Written
from tunedeck.util.aio import cancel_and_wait

log = logging.getLogger(__name__)

_pc = time.perf_counter

#: the last stretch before a scheduled send is spent yielding to the loop instead of in a timer:
#: the selector's timeout has a resolution of 1 ms (epoll rounds it up), so a timer alone wakes
#: up to a millisecond late; this costs at most this much CPU per scheduled send
SPIN_S = 0.0015

#: connections kept idle for the requests due within this many seconds (plus :data:`SPARE`)
LOOKAHEAD_S = 0.25

#: idle connections kept beyond the requests due within :data:`LOOKAHEAD_S`
SPARE = 4

#: at most this many connections kept idle ahead of the schedule
SPARE_MAX = 64


async def sleep_until(due: float) -> None:
    """Sleep until ``perf_counter() >= due``; never returns early (uvloop's millisecond timers
    can fire up to a millisecond before their time, so short remainders are slept again), and
    not late by a timer's resolution (the last :data:`SPIN_S` yield to the loop)."""
    while True:
        delay = due - _pc()
        if delay <= 0:
            return
        await asyncio.sleep(delay - SPIN_S if delay > SPIN_S else 0)


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class EagerDispatch:
    """Writes each request the moment it falls due, from whichever callback notices first.

    ``due``: the ``perf_counter`` times, in order; ``requests``: what to send at each.
    ``launch(k, written)`` is called for the ``k``-th as it goes out: ``written`` is the request
    already on the wire, or None when no idle connection was ready (the task it starts opens
    one). At most ``per_call`` requests are written per call, so a burst yields to the reads
    between its parts (the rest go at the next read or loop iteration). With ``keep``,
    connections are opened ahead of the schedule (:meth:`_keep`). :meth:`run` returns once
    every request was launched.
    """

    def __init__(
        self,
        client: HttpClient,
        url: str,
        due: Sequence[float],
        requests: Sequence[Request],
        launch: Callable[[int, Optional[Written]], None],
        per_call: int,
        *,
        keep: bool = True,
    ) -> None:
        if len(due) != len(requests):
            raise ValueError(f"EagerDispatch: {len(due)} due times for {len(requests)} requests")
        self.client = client
        self.url = url
        self.due = list(due)
        self.requests = requests
        self.launch = launch
        self.per_call = max(1, per_call)
        self.keep = keep
        #: the next request to go
        self.k = 0
        #: requests that found no idle connection (their tasks opened one)
        self.unready = 0
        self._keeper_wake: "Optional[asyncio.Future[None]]" = None

    @property
    def done(self) -> bool:
        return self.k >= len(self.due)

    def fire(self, now: float) -> None:
        """Write the requests due by ``now`` (at most ``per_call``) and arm the gate for the next."""
        due, k, n = self.due, self.k, len(self.due)
        end = min(n, k + self.per_call)
        while k < end and due[k] <= now:
            w = self.client.write_now(self.requests[k])
            if w is None:
                self.unready += 1
            self.k = k + 1  # before launching: a launch that raised never sends one twice
            self.launch(k, w)
            k += 1
        if k < n:
            self.client.gate.arm(due[k], self._from_read)
        else:
            self.client.gate.disarm()
        kw = self._keeper_wake
        if kw is not None and not kw.done():
            kw.set_result(None)

    def _from_read(self, now: float) -> None:
        """The gate's action, inside another connection's read callback: a failure must not end
        that connection; the dispatcher's own loop calls :meth:`fire` again, which raises it."""
        try:
            self.fire(now)
        except Exception:  # logged; the dispatcher's own call raises it
            log.exception("scheduled sends: a check from a read callback failed (%d of %d gone)", self.k, len(self.due))
            self.client.gate.disarm()

    async def run(self) -> None:
        """Send every request on time; the gate lets reads send due ones in between."""
        if self.done:
            return
        gate = self.client.gate
        if gate.armed:
            raise RuntimeError("EagerDispatch: the client's gate is armed already (one schedule per client at a time)")
        gate.arm(self.due[self.k], self._from_read)
        keepers = [asyncio.ensure_future(self._keep())] if self.keep else []
        try:
            while not self.done:
                delay = self.due[self.k] - _pc()
                if delay > 0:
                    await asyncio.sleep(delay - SPIN_S if delay > SPIN_S else 0)
                    continue
                self.fire(_pc())
                await asyncio.sleep(0)  # the reads of this iteration go between two calls
        finally:
            gate.disarm()
            await cancel_and_wait(keepers, "connection keeper of a schedule")

    async def _keep(self) -> None:
        """Keep connections idle for the requests due soon, so each due send is one write."""
        loop = asyncio.get_running_loop()
        client, url, due = self.client, self.url, self.due
        while not self.done:
            now = _pc()
            want = min(SPARE_MAX, bisect.bisect_right(due, now + LOOKAHEAD_S, self.k) - self.k + SPARE)
            if client.idle_count(url) < want:
                await client.warm(url, want)
            if self.done:
                return
            # again after the next send, or before the next due time (the server may have closed
            # idle connections meanwhile), by the timer not sooner than in 50 ms
            fut: "asyncio.Future[None]" = loop.create_future()
            self._keeper_wake = fut
            h = loop.call_later(max(0.05, due[self.k] - LOOKAHEAD_S - _pc()), _wake, fut)
            try:
                await fut
            finally:
                h.cancel()
                self._keeper_wake = None
