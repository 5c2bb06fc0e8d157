"""One benchmark level fanned out over worker processes (``python -m tunedeck.bench.worker`` runs the
other side): each worker gets its share of the users as a job line, says when it is ready, starts at
one shared t0, and streams its samples, ticks and end report back as JSON lines."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from tunedeck.bench.client import EndpointConfig, RequestSpec
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.health import client_health
from tunedeck.bench.levels import Level, LoadShape, Progress, connect_stats, preconnect_count
from tunedeck.bench.records import SampleRecord

_pc = time.perf_counter


def _package_root() -> str:
    """The folder (or zip archive) that holds the ``tunedeck`` package."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_argv() -> List[str]:
    """How to start a worker: this interpreter (isolated if this one is), the package root put on sys.path.

    No PYTHONPATH needed, so it works from a zip archive and under ``python -I``.
    """
    code = (
        "import sys; sys.path.insert(0, %r); from tunedeck.bench.worker import main; raise SystemExit(main())"
        % _package_root()
    )
    return [sys.executable] + (["-I"] if sys.flags.isolated else []) + ["-c", code]


def _worker_job(
    cfg: BenchConfig, ep: EndpointConfig, specs: List[RequestSpec], shape: LoadShape, n: int, w: int
) -> Optional[Dict[str, Any]]:
    """Worker ``w``'s share of the level (of ``n``), as the job line it reads; None when it has no users."""
    part = shape.share(n, w)
    if part is None:
        return None
    # a conversation stays in one worker (its turns need the answers before them)
    mine = [asdict(s) for i, s in enumerate(specs) if (i if s.session is None else s.session) % n == w]
    return {
        "worker": w,
        "endpoint": asdict(ep),
        "specs": mine,
        "concurrency": part.concurrency,
        "rate": part.rate if math.isfinite(part.rate) else "inf",
        "burstiness": part.burstiness,
        "seed": part.seed,
        "warmup": (cfg.warmup // n) + (1 if w < cfg.warmup % n else 0),
        "read_timeout": cfg.read_timeout,
        "input_len": cfg.input_len,
        "output_len": cfg.output_len,
        "token_ids": cfg.token_ids,
        "preconnect": preconnect_count(len(mine), part.concurrency) if part.preopen else 0,
        "api_key_file": cfg.api_key_file,
    }


async def _start_worker(argv: List[str], job: Dict[str, Any]) -> "asyncio.subprocess.Process":
    p = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 26,
    )
    assert p.stdin is not None
    p.stdin.write(json.dumps(job).encode() + b"\n")
    await p.stdin.drain()
    return p


async def _wait_ready(procs: List["asyncio.subprocess.Process"]) -> List[float]:
    """Every worker's ready line; the connect times of the connections they opened ahead."""
    connect: List[float] = []
    for p in procs:
        assert p.stdout is not None
        line = await p.stdout.readline()
        if not line.startswith(b'{"ready"'):
            raise RuntimeError(f"bench worker failed to start: {line[:300]!r}")
        connect.extend(json.loads(line).get("connect_times") or [])
    return connect


class _WorkerLines:
    """What the workers of a level report: their samples (to ``on_sample``), their ticks merged
    into ``prog``, and their end reports."""

    def __init__(self, n: int, prog: Progress, on_sample: Callable[[SampleRecord], None]) -> None:
        self.prog = prog
        self.on_sample = on_sample
        self.reports: List[Dict[str, Any]] = []
        self.inflight = [0] * n
        self.cpu = [0.0] * n
        self.lag = [0.0] * n
        self.ends: List[float] = []

    async def read(self, k: int, p: "asyncio.subprocess.Process") -> None:
        assert p.stdout is not None
        while True:
            line = await p.stdout.readline()
            if not line:
                return
            msg = json.loads(line)
            if "s" in msg:
                self.on_sample(msg["s"])
            elif "tick" in msg:
                self._tick(k, msg["tick"])
            elif "end" in msg:
                self.reports.append(msg["end"])
                if isinstance(msg["end"].get("t_end"), float):
                    self.ends.append(msg["end"]["t_end"])

    def _tick(self, k: int, tk: Dict[str, Any]) -> None:
        prog = self.prog
        for b, c in tk["bins"].items():
            prog.bins[int(b)] = prog.bins.get(int(b), 0) + c
        self.inflight[k] = tk["in_flight"]
        self.cpu[k] = tk["cpu"]
        self.lag[k] = tk["lag_ms"]
        prog.load1 = tk.get("load1")
        prog.steal = tk.get("steal") or 0.0

    async def ticker(self, emit: Callable[[Dict[str, Any]], None]) -> None:
        prog = self.prog
        while True:
            await asyncio.sleep(1.0 - ((_pc() - prog.t0) % 1.0) + 0.02)
            prog.in_flight = sum(self.inflight)
            prog.cpu = list(self.cpu)
            prog.lag_ms = max(self.lag) if self.lag else 0.0
            emit(prog.tick(_pc()))


async def _interrupt(procs: List["asyncio.subprocess.Process"], readers: Sequence["asyncio.Future[None]"]) -> None:
    """Interrupted: let the workers hand over their partial samples before they go."""
    for p in procs:
        if p.returncode is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    await asyncio.wait(readers, timeout=5)
    for r in readers:
        r.cancel()


async def _stop_workers(procs: List["asyncio.subprocess.Process"]) -> None:
    for p in procs:
        if p.returncode is None:
            try:
                p.terminate()
            except ProcessLookupError:
                pass
    for p in procs:
        if p.returncode is None:
            try:
                await asyncio.wait_for(p.wait(), 5)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()


async def run_level_workers(
    cfg: BenchConfig,
    ep: EndpointConfig,
    level: Level,
    before_go: Optional[Callable[[], Awaitable[None]]] = None,
) -> Tuple[float, Dict[str, Any], bool]:
    """The level in ``cfg.workers`` processes; ``before_go`` is awaited once every worker is ready,
    right before t0. Returns (duration, client health, finished)."""
    prog, emit = level.prog, level.emit
    n = max(1, cfg.workers)
    procs = []
    argv = worker_argv()
    for w in range(n):
        job = _worker_job(cfg, ep, level.specs, level.shape, n, w)
        if job is not None:
            procs.append(await _start_worker(argv, job))
    try:
        connect = await _wait_ready(procs)
        if cfg.preconnect:
            emit({"type": "connected", "level": prog.level, **connect_stats(connect)})
        if before_go is not None:
            await before_go()
        t0 = _pc() + 0.05
        prog.t0 = t0
        level.set_t0(t0)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"go {t0!r}\n".encode())
            await p.stdin.drain()
        lines = _WorkerLines(len(procs), prog, level.on_sample)
        tk = asyncio.ensure_future(lines.ticker(emit))
        readers = [asyncio.ensure_future(lines.read(k, p)) for k, p in enumerate(procs)]
        try:
            await asyncio.wait(readers)
        except asyncio.CancelledError:
            await _interrupt(procs, readers)
            raise
        finally:
            ends = lines.ends
            duration = (max(ends) if len(ends) == len(procs) and ends else _pc()) - t0
            tk.cancel()
        for r in readers:
            r.result()  # a broken worker line is an error, not a silent loss
        rcs = [await p.wait() for p in procs]
        finished = all(rc == 0 for rc in rcs) and len(lines.reports) == len(procs)
        health = client_health(lines.reports)
        if cfg.preconnect:
            health.update(connect_stats(connect))
        return duration, health, finished
    finally:
        await _stop_workers(procs)
