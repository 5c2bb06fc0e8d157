"""Driving one level of a benchmark: warmup, the closed or open loop, progress ticks, in this
process (fanned out over worker processes: :mod:`tunedeck.bench.fanout`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tunedeck.bench import metrics
from tunedeck.bench.client import (
    EndpointConfig,
    Live,
    RequestSpec,
    new_sample,
    prepare,
    prompt_text,
    quiet_gc,
    stream_request,
)
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.dispatch import EagerDispatch, sleep_until
from tunedeck.bench.health import ClientMonitor, client_health
from tunedeck.bench.http import HttpClient, Request, Written
from tunedeck.bench.prompts import arrival_offsets, make_prompts
from tunedeck.bench.records import SampleRecord
from tunedeck.util.aio import cancel_and_wait

log = logging.getLogger(__name__)

_pc = time.perf_counter


@dataclass(frozen=True)
class LoadShape:
    """How a level sends its requests: what :func:`drive` needs besides the process's own client,
    requests and sinks. One per level, in-process or split over workers (:meth:`share`)."""

    #: requests (or conversations) in flight at most; None: no cap
    concurrency: Optional[int] = None
    #: requests a second (Gamma arrivals); inf: all at t0
    rate: float = math.inf
    #: the Gamma shape (1 = Poisson)
    burstiness: float = 1.0
    #: the arrivals' random seed
    seed: int = 0
    #: keep connections idle ahead of a schedule (off with ``--no-preconnect``)
    preopen: bool = True

    def share(self, n: int, w: int) -> Optional[LoadShape]:
        """Worker ``w``'s part of the level over ``n`` workers; None when the cap leaves it no users."""
        conc = self.concurrency
        wc = None if conc is None else conc // n + (1 if w < conc % n else 0)
        if wc == 0:
            return None
        rate = self.rate / n if math.isfinite(self.rate) else self.rate
        return replace(self, concurrency=wc, rate=rate, seed=self.seed + w)


def schedule_of(specs: Sequence[RequestSpec]) -> Optional[List[float]]:
    """Each request's ``at_s`` when the level replays a schedule (a trace), else None.

    ValueError when only some requests carry one: a schedule covers every request.
    """
    have = sum(1 for sp in specs if sp.at_s is not None)
    if not have:
        return None
    if have != len(specs):
        raise ValueError(f"RequestSpec.at_s: set on {have} of {len(specs)} requests; a replay needs it on every one")
    out = [float(sp.at_s) for sp in specs if sp.at_s is not None]
    bad = next((x for x in out if not (x >= 0 and math.isfinite(x))), None)
    if bad is not None:
        raise ValueError(f"RequestSpec.at_s {bad!r}: expected finite seconds >= 0")
    return out


def is_conversation(specs: Sequence[RequestSpec]) -> bool:
    return any(sp.session is not None for sp in specs)


def sessions_of(specs: Sequence[RequestSpec]) -> List[List[RequestSpec]]:
    """The conversations, each in turn order, ordered by first appearance in ``specs``."""
    by: Dict[int, List[RequestSpec]] = {}
    for sp in specs:
        if sp.session is None:
            raise ValueError(f"RequestSpec {sp.index}: session missing; a conversation level needs it on every request")
        by.setdefault(sp.session, []).append(sp)
    out = []
    for turns in by.values():
        turns.sort(key=lambda t: t.turn)
        for a, b in zip(turns, turns[1:]):
            if a.turn == b.turn:
                raise ValueError(f"session {a.session}: turn {a.turn} appears twice")
        out.append(turns)
    return out


async def drive(
    client: HttpClient,
    ep: EndpointConfig,
    specs: Sequence[RequestSpec],
    shape: LoadShape,
    *,
    t0: Optional[float],
    live: Live,
    on_sample: Callable[[SampleRecord], None],
    prepared: Optional[Sequence[Request]] = None,
    started: Optional[Callable[[float], None]] = None,
) -> float:
    """Send ``specs`` with the given load shape; returns t0 (when the first request was dispatched).

    ``t0``: a ``perf_counter`` time to start at (workers share one), or None
    for now. ``on_sample`` gets every record (also partial ones on cancel).
    ``prepared``: the requests built beforehand with :func:`prepare`.
    ``started(t0)`` is called right before the first dispatch.

    Specs carrying ``at_s`` are sent at t0 + at_s (no cap unless
    ``shape.concurrency`` is given), on the same path as the Gamma arrivals of a
    finite ``rate``; both record each request's scheduled and actual send
    time and the dispatcher's lateness. Without a cap each request is written
    the moment it falls due, by whichever read notices first
    (:class:`~tunedeck.bench.dispatch.EagerDispatch`). Specs carrying ``session``
    are conversations (:func:`_converse`).
    """
    concurrency, rate = shape.concurrency, shape.rate
    at = schedule_of(specs)
    conversation = is_conversation(specs)
    reqs: Sequence[Optional[Request]] = prepared if prepared is not None else [None] * len(specs)
    # a schedule: the trace's times, or Gamma arrivals (all at t0 for an uncapped closed loop)
    timed = at is not None or math.isfinite(rate)
    eager = timed and not concurrency and not conversation
    if eager:  # written from a callback: built now, before t0
        ready: List[Request] = [r if r is not None else prepare(client, ep, sp) for r, sp in zip(reqs, specs)]
        reqs = ready
    if t0 is not None:
        await sleep_until(t0)
    # a shared t0 anchors the schedule (workers replaying one trace keep one clock), even when woken late
    start = t0 if t0 is not None else _pc()
    live.t0 = start
    if started is not None:
        started(start)
    if conversation:
        await _converse(client, ep, specs, shape, start, live, on_sample)
        return start
    if at is None and not math.isfinite(rate) and concurrency:
        it = iter(zip(specs, reqs))

        async def lane() -> None:
            for spec, req in it:
                on_sample(
                    await stream_request(
                        client, ep, spec, request=req, queued_at=start, live=live, on_partial=on_sample
                    )
                )

        await _gather_cancel([asyncio.ensure_future(lane()) for _ in range(min(concurrency, len(specs)))])
        return start
    offsets = at if at is not None else arrival_offsets(len(specs), rate, shape.burstiness, shape.seed)
    order = sorted(range(len(specs)), key=offsets.__getitem__) if at is not None else range(len(specs))
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    tasks: "List[asyncio.Future[Any]]" = []

    async def one(spec: RequestSpec, req: Optional[Request], due: float, written: Optional[Written] = None) -> None:
        # written: on the wire already (eager); else the lateness runs from this task's start on
        disp = written.sent if written is not None else _pc() if timed else None
        if sem is None:
            await send(spec, req, due, disp, written)
            return
        async with sem:  # under a concurrency cap nothing is written ahead of its slot
            await send(spec, req, due, disp, None)

    async def send(
        spec: RequestSpec, req: Optional[Request], due: float, disp: Optional[float], written: Optional[Written]
    ) -> None:
        on_sample(
            await stream_request(
                client,
                ep,
                spec,
                request=req,
                queued_at=due,
                live=live,
                on_partial=on_sample,
                level_start=start,
                dispatched_at=disp,
                written=written,
            )
        )

    try:
        if eager:
            seq = list(order)
            dues = [start + offsets[i] for i in seq]

            def launch(k: int, written: Optional[Written]) -> None:
                i = seq[k]
                tasks.append(asyncio.ensure_future(one(specs[i], reqs[i], dues[k], written)))

            sender = EagerDispatch(
                client,
                ep.url,
                dues,
                [ready[i] for i in seq],
                launch,
                client.sends_per_tick or len(seq),
                keep=shape.preopen,
            )
            await sender.run()
            if sender.unready:
                log.info(
                    "%d of %d scheduled requests found no idle connection and opened one", sender.unready, len(seq)
                )
        else:
            for i in order:
                due = start + offsets[i]
                await sleep_until(due)
                tasks.append(asyncio.ensure_future(one(specs[i], reqs[i], due)))
    except asyncio.CancelledError:
        await cancel_and_wait(tasks, "benchmark requests")
        raise
    await _gather_cancel(tasks)
    return start


async def _converse(
    client: HttpClient,
    ep: EndpointConfig,
    specs: Sequence[RequestSpec],
    shape: LoadShape,
    start: float,
    live: Live,
    on_sample: Callable[[SampleRecord], None],
) -> None:
    """Conversations: each session's turns in order, up to ``concurrency`` sessions at once.

    Turn k carries the session's earlier prompts and the answers actually
    received, and is due ``think_s`` after turn k-1's answer ended. A session
    starts at its first turn's ``at_s``, else at the Gamma arrival of a finite
    ``rate``, else at once (then waits for a slot). A failed turn ends its
    session: the turns after it are recorded as failed (``SessionAborted``),
    never sent without the context they need.
    """
    sessions = sessions_of(specs)
    firsts = [t[0].at_s for t in sessions]
    if all(a is not None for a in firsts):
        starts = [float(a) for a in firsts if a is not None]
    else:
        starts = arrival_offsets(len(sessions), shape.rate, shape.burstiness, shape.seed)
    sem = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None

    def drop_text(s: SampleRecord) -> None:
        s.pop("_answer", None)
        on_sample(s)

    async def turns_of(turns: List[RequestSpec], due: float, disp: float) -> None:
        history: List[Tuple[str, str]] = []
        for k, sp in enumerate(turns):
            req = prepare(client, ep, sp, history)
            if k:
                await sleep_until(due)
                disp = _pc()
            s = await stream_request(
                client,
                ep,
                sp,
                request=req,
                queued_at=due,
                live=live,
                on_partial=drop_text,
                level_start=start,
                dispatched_at=disp,
                keep_text=True,
            )
            answer = s.pop("_answer", "")
            on_sample(s)
            if not s["success"]:
                for rest in turns[k + 1 :]:
                    r = new_sample(rest)
                    r["error_type"] = "SessionAborted"
                    r["error"] = f"session {sp.session}: turn {sp.turn} failed ({s['error_type']}); not sent"
                    on_sample(r)
                return
            history.append((prompt_text(sp.prompt), answer))
            if k + 1 < len(turns):
                due = _pc() + max(0.0, turns[k + 1].think_s)

    async def session(turns: List[RequestSpec], due: float) -> None:
        await sleep_until(due)
        disp = _pc()
        if sem is None:
            await turns_of(turns, due, disp)
            return
        async with sem:
            await turns_of(turns, due, disp)

    await _gather_cancel([asyncio.ensure_future(session(t, start + off)) for t, off in zip(sessions, starts)])


async def _gather_cancel(tasks: "List[asyncio.Future[Any]]") -> None:
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        await cancel_and_wait(tasks, "benchmark requests")
        raise


async def warmup(client: HttpClient, ep: EndpointConfig, n: int, cfg: BenchConfig, conc: Optional[int]) -> int:
    """``n`` requests (not recorded) at up to the level's concurrency; returns how many succeeded."""
    if n <= 0:
        return 0
    specs = make_prompts(
        n, cfg.input_len, cfg.output_len, cfg.seed + 7919, token_ids=cfg.token_ids and ep.endpoint != "chat"
    )
    lanes = max(1, min(n, conc or n))
    ok = 0
    it = iter(specs)

    async def lane() -> None:
        nonlocal ok
        for s in it:
            r = await stream_request(client, ep, s)
            ok += bool(r["success"])

    await asyncio.gather(*(lane() for _ in range(lanes)))
    return ok


def preconnect_count(n: int, conc: Optional[int]) -> int:
    """Connections opened before t0: one per concurrent request (at most 64 without a cap)."""
    return max(0, min(n, conc if conc else 64))


class Progress:
    """Per-level live state: finished samples and the 1-s event bins."""

    def __init__(self, level: int, t0: float, total: int, goodput: Optional[Mapping[str, float]] = None) -> None:
        self.level = level
        self.t0 = t0
        self.total = total
        self.completed = 0
        self.failed = 0
        #: requests cut short by a stop (never counted as failed)
        self.cancelled = 0
        #: the SLO targets in seconds; None: no goodput asked for
        self.slo = metrics.slo_seconds(goodput) if goodput else None
        #: successful requests within every target (the summary's request_goodput × duration)
        self.good = 0
        self.output_tokens = 0
        self.ttft: List[float] = []
        self.itl_recent: List[float] = []
        self.bins: Dict[int, int] = {}
        self.in_flight = 0
        self.cpu: List[float] = []
        self.lag_ms = 0.0
        self.load1: Optional[float] = None
        self.steal = 0.0

    def add_sample(self, s: SampleRecord) -> None:
        if s.get("success"):
            self.completed += 1
            self.output_tokens += int(s.get("output_tokens") or 0)
            if self.slo is not None and metrics.meets_slo(s, self.slo):
                self.good += 1
            self.ttft.append(s["ttft"])
            if len(self.ttft) > self.WINDOW:
                del self.ttft[: self.WINDOW // 2]
            itl = s.get("itl") or []
            self.itl_recent.extend(itl[-64:])
            if len(self.itl_recent) > self.WINDOW:
                del self.itl_recent[: self.WINDOW // 2]
        elif metrics.is_cancelled(s):
            self.cancelled += 1
        else:
            self.failed += 1

    #: live percentiles cover the most recent values only: sorting them each second stays well under 1 ms
    WINDOW = 8192

    def tick(self, now: float) -> Dict[str, Any]:
        el = now - self.t0
        last = int(el) - 1
        tt = sorted(self.ttft)
        it = sorted(self.itl_recent)
        return {
            "type": "tick",
            "level": self.level,
            "t": round(el, 3),
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "in_flight": self.in_flight,
            "total": self.total,
            "second": last,
            "tok_s": self.bins.get(last, 0) if last >= 0 else 0,
            "output_tokens": self.output_tokens,
            # None without targets: "no goodput asked for" is not "no request was good"
            "good": self.good if self.slo is not None else None,
            # None (not 0) until a first token / gap was seen: a missing value is never 0
            "ttft_p50_ms": metrics.percentile_sorted(tt, 50) * 1000 if tt else None,
            "ttft_p99_ms": metrics.percentile_sorted(tt, 99) * 1000 if tt else None,
            "itl_p50_ms": metrics.percentile_sorted(it, 50) * 1000 if it else None,
            "itl_p99_ms": metrics.percentile_sorted(it, 99) * 1000 if it else None,
            "cpu": [round(c, 3) for c in self.cpu],
            "lag_ms": round(self.lag_ms, 2),
            "load1": self.load1,
            "steal": round(self.steal, 4),
        }


def connect_stats(times: Sequence[float]) -> Dict[str, Any]:
    return {
        "connections": len(times),
        "connect_ms_mean": metrics.mean(times) * 1000 if times else None,
        "connect_ms_max": max(times) * 1000 if times else None,
    }


@dataclass(frozen=True)
class Level:
    """One level to run, in this process (:func:`run_level_inproc`) or in worker processes
    (:func:`~tunedeck.bench.fanout.run_level_workers`): its requests, how they are sent, its live
    state, and where its records and events go."""

    specs: List[RequestSpec]
    shape: LoadShape
    prog: Progress
    on_sample: Callable[[SampleRecord], None]
    emit: Callable[[Dict[str, Any]], None]
    #: called with t0 when the timed phase starts
    set_t0: Callable[[float], None]


async def run_level_inproc(
    client: HttpClient, ep: EndpointConfig, level: Level, prepared: Optional[Sequence[Request]]
) -> Tuple[float, Dict[str, Any], bool]:
    """Returns (duration, client health, finished)."""
    prog, emit = level.prog, level.emit
    live = Live()
    prog.bins = live.bins
    mon = ClientMonitor()
    mon.start()
    started = asyncio.get_running_loop().create_future()

    def on_start(t0: float) -> None:
        prog.t0 = t0
        level.set_t0(t0)
        if not started.done():
            started.set_result(t0)

    async def ticker() -> None:
        await started
        while True:
            await asyncio.sleep(1.0 - ((_pc() - prog.t0) % 1.0) + 0.001)
            prog.in_flight = live.in_flight
            prog.cpu = [mon.last_cpu]
            prog.lag_ms = mon.last_lag_ms
            prog.load1 = mon.last_load1
            prog.steal = mon.last_steal
            emit(prog.tick(_pc()))

    tk = asyncio.ensure_future(ticker())
    finished = False
    end: Optional[float] = None
    try:
        with quiet_gc():
            await drive(
                client,
                ep,
                level.specs,
                level.shape,
                t0=None,
                live=live,
                on_sample=level.on_sample,
                prepared=prepared,
                started=on_start,
            )
            end = _pc()
        finished = True
    finally:
        duration = (end if end is not None else _pc()) - prog.t0
        await cancel_and_wait([tk], "benchmark progress ticker")
        rep = await mon.stop()
    return duration, client_health([rep]), finished
