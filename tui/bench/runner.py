"""The benchmark engine: load shapes, warmup, sweeps, progress, client health.

Load shapes (like ``vllm bench serve``):

* **closed loop** (``request_rate = inf``): every request is due at t0 and
  gated by the concurrency cap, so exactly ``C`` are in flight;
  ``client_queue_time`` is the wait for a slot.
* **open loop** (finite ``request_rate``): Gamma inter-arrival times
  (shape = burstiness, scale = 1 / (rate × burstiness); burstiness 1 =
  Poisson), seeded; an optional concurrency cap.

Synthetic prompts: ``input_len`` words drawn (seeded) from a list of common
short English words, separated by single spaces. Each word is one token
for a tokenizer-free simulator (which counts whitespace-separated words)
and about one token for real BPE tokenizers; the server's
``usage.prompt_tokens`` replaces the estimate whenever it is reported.

Progress: ``emit`` receives plain dicts once per second (``type: tick``)
plus ``start``/``level_start``/``level_done``/``done`` (and ``sample`` per
finished request when asked); the CLI prints them as JSON lines.

Client health: each worker measures its own CPU (psutil) and event-loop
lateness; a run is ``client_bound`` when a worker averaged more than half a
core or its loop lag p99 exceeded 5 ms. ``workers > 1`` runs the requests
in that many processes (``python -m tui.bench.worker``); ``perf_counter`` is
CLOCK_MONOTONIC on Linux, so their timestamps share one clock.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import httpx

from tui.bench import metrics
from tui.bench.client import (
    DEFAULT_READ_TIMEOUT,
    EndpointConfig,
    Live,
    RequestSpec,
    make_client,
    prepare,
    quiet_gc,
    stream_request,
)

_pc = time.perf_counter

#: how a ``--workers`` process is started (the host-side runtime points it at its zipapp)
WORKER_COMMAND = [sys.executable, "-m", "tui.bench.worker"]

CPU_BOUND_FRACTION = 0.5
LAG_BOUND_MS = 5.0

WORDS = (
    "the of and to in is it you that he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different home "
    "us move try kind hand picture again change off play spell air away animal house point page letter mother "
    "answer found study still learn should world high every near add food between own below country plant "
    "last school father keep tree never start city earth eye light thought head under story saw left few "
    "while along might close something seem next hard open example begin life always those both paper together"
).split()


class NotReady(Exception):
    """The server did not become ready within the bounded wait (error kind NOT_READY)."""

    kind = "NOT_READY"


@dataclass
class BenchConfig:
    url: str
    model: str | None = None
    endpoint: str = "completions"
    num_prompts: int | None = None  # None: max(5 × C, 10)
    input_len: int = 128
    output_len: int = 128
    concurrency: list[int] = field(default_factory=lambda: [1])
    request_rate: list[float] = field(default_factory=lambda: [math.inf])
    burstiness: float = 1.0
    warmup: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0
    seed: int = 0
    goodput: dict[str, float] = field(default_factory=dict)
    percentiles: list[float] = field(default_factory=lambda: list(metrics.DEFAULT_PERCENTILES))
    read_timeout: float = DEFAULT_READ_TIMEOUT
    request_deadline: float | None = None
    ready_timeout: float = 120.0
    workers: int = 1
    transport: str = "lean"
    label: str | None = None
    progress_samples: bool = False

    def levels(self) -> list[tuple[int | None, float]]:
        """(max_concurrency, request_rate) per sweep level."""
        cs: list[int | None] = list(self.concurrency) or [None]
        rs = list(self.request_rate) or [math.inf]
        if len(rs) > 1 and len(cs) > 1:
            raise ValueError("sweep over concurrency or over request rate, not both")
        return [(c, r) for c in cs for r in rs]

    def prompts_for(self, c: int | None) -> int:
        if self.num_prompts:
            return self.num_prompts
        return max(5 * (c or 1), 10)


def make_prompts(n: int, input_len: int, output_len: int, seed: int) -> list[RequestSpec]:
    """Seeded synthetic prompts of ``input_len`` words each."""
    rng = random.Random(seed)
    out = []
    choice = rng.choice
    for i in range(n):
        words = [choice(WORDS) for _ in range(max(1, input_len))]
        out.append(RequestSpec(" ".join(words), len(words), output_len, i))
    return out


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds after t0 at which each request is due (first at 0, then Gamma gaps)."""
    if not math.isfinite(rate):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError("request rate and burstiness must be > 0")
    rng = random.Random(seed + 1_000_003)
    theta = 1.0 / (rate * burstiness)
    t = 0.0
    out = []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out


# ---------------------------------------------------------------- readiness / discovery


async def wait_ready(client: httpx.AsyncClient, base: str, timeout: float, *, interval: float = 0.5) -> list[str]:
    """Poll ``/v1/models`` (or ``/health``) until the server answers 200; returns the model ids.

    Raises :class:`NotReady` after ``timeout`` seconds, naming the last error.
    """
    base = base.rstrip("/").removesuffix("/v1")
    deadline = _pc() + timeout
    last = "no answer"
    while True:
        left = deadline - _pc()
        try:
            r = await client.get(base + "/v1/models", timeout=max(0.2, min(5.0, left)))
            if r.status_code == 200:
                try:
                    data = r.json().get("data") or []
                    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
                except (ValueError, AttributeError):
                    return []
            if r.status_code == 404:
                h = await client.get(base + "/health", timeout=max(0.2, min(5.0, left)))
                if h.status_code == 200:
                    return []
                last = f"/health answered HTTP {h.status_code}"
            else:
                last = f"/v1/models answered HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if _pc() + interval > deadline:
            raise NotReady(f"{base}: server not ready after {timeout:g} s (last: {last})")
        await asyncio.sleep(interval)


async def engine_info(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """Best effort: engine version from vLLM ``/version`` or SGLang ``/get_server_info``."""
    base = base.rstrip("/").removesuffix("/v1")
    for path in ("/version", "/get_server_info", "/server_info"):
        try:
            r = await client.get(base + path, timeout=2.0)
        except httpx.HTTPError:
            continue
        if r.status_code == 200:
            try:
                j = r.json()
            except ValueError:
                continue
            if isinstance(j, dict) and j.get("version"):
                return {"version": str(j["version"]), "source": path,
                        "engine": "vllm" if path == "/version" else "sglang"}
    return {"version": None, "source": None, "engine": None}


# ---------------------------------------------------------------- client health


class ClientMonitor:
    """CPU of this process (per 1 s) and event-loop lateness (per 50 ms tick)."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self.cpu: list[float] = []
        self.lag: list[float] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.last_cpu = 0.0
        self.last_lag_ms = 0.0

    def start(self) -> None:
        ct = self._proc.cpu_times()
        self._cpu0 = (ct.user + ct.system, _pc())
        self._tasks = [asyncio.create_task(self._cpu_loop()), asyncio.create_task(self._lag_loop())]

    async def _cpu_loop(self) -> None:
        ct = self._proc.cpu_times()
        prev = ct.user + ct.system
        pt = _pc()
        while True:
            await asyncio.sleep(1.0)
            ct = self._proc.cpu_times()
            now = ct.user + ct.system
            t = _pc()
            self.last_cpu = (now - prev) / max(1e-6, t - pt)
            self.cpu.append(self.last_cpu)
            prev, pt = now, t

    async def _lag_loop(self) -> None:
        step = 0.05
        while True:
            t = _pc()
            await asyncio.sleep(step)
            lag = max(0.0, _pc() - t - step)
            self.lag.append(lag)
            self.last_lag_ms = lag * 1000

    async def stop(self) -> dict[str, Any]:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except BaseException:
                pass
        return self.report()

    def report(self) -> dict[str, Any]:
        ct = self._proc.cpu_times()
        c0, t0 = getattr(self, "_cpu0", (ct.user + ct.system, _pc()))
        wall = _pc() - t0
        return {
            "cpu": list(self.cpu),
            "cpu_avg": (ct.user + ct.system - c0) / wall if wall > 0.05 else 0.0,
            "cpu_seconds": ct.user + ct.system - c0,
            "lag_p99_ms": metrics.percentile(self.lag, 99) * 1000 if self.lag else 0.0,
            "lag_max_ms": max(self.lag) * 1000 if self.lag else 0.0,
        }


def client_health(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge worker reports; ``client_bound`` when any worker was saturated."""
    means = [float(r.get("cpu_avg") or 0.0) for r in reports]
    maxes = [max(r["cpu"]) if r.get("cpu") else float(r.get("cpu_avg") or 0.0) for r in reports]
    lag99 = max((r.get("lag_p99_ms", 0.0) for r in reports), default=0.0)
    cpu_mean = max(means) if means else 0.0
    return {
        "workers": len(reports),
        "cpu_mean": cpu_mean,
        "cpu_max": max(maxes) if maxes else 0.0,
        "cpu_per_worker": means,
        "cpu_seconds": sum(float(r.get("cpu_seconds") or 0.0) for r in reports),
        "loop_lag_p99_ms": lag99,
        "loop_lag_max_ms": max((r.get("lag_max_ms", 0.0) for r in reports), default=0.0),
        "client_bound": cpu_mean > CPU_BOUND_FRACTION or lag99 > LAG_BOUND_MS,
    }


# ---------------------------------------------------------------- driving one level


async def drive(
    client: httpx.AsyncClient,
    ep: EndpointConfig,
    specs: Sequence[RequestSpec],
    *,
    concurrency: int | None,
    rate: float,
    burstiness: float,
    seed: int,
    t0: float,
    live: Live,
    on_sample: Callable[[dict[str, Any]], None],
    prepared: Sequence[httpx.Request] | None = None,
) -> None:
    """Send ``specs`` with the given load shape; ``on_sample`` gets every record (also partial ones on cancel).

    ``prepared``: the requests built beforehand with :func:`prepare` (one per spec).
    """
    reqs: Sequence[httpx.Request | None] = prepared if prepared is not None else [None] * len(specs)
    if not math.isfinite(rate) and concurrency:
        it = iter(zip(specs, reqs))

        async def lane() -> None:
            for spec, req in it:
                on_sample(await stream_request(client, ep, spec, request=req, queued_at=t0, live=live,
                                               on_partial=on_sample))

        await _gather_cancel([asyncio.create_task(lane()) for _ in range(min(concurrency, len(specs)))])
        return
    offsets = arrival_offsets(len(specs), rate, burstiness, seed)
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    tasks: list[asyncio.Task[None]] = []

    async def one(spec: RequestSpec, req: httpx.Request | None, due: float) -> None:
        if sem is None:
            on_sample(await stream_request(client, ep, spec, request=req, queued_at=due, live=live,
                                           on_partial=on_sample))
            return
        async with sem:
            on_sample(await stream_request(client, ep, spec, request=req, queued_at=due, live=live,
                                           on_partial=on_sample))

    try:
        for spec, req, off in zip(specs, reqs, offsets):
            due = t0 + off
            delay = due - _pc()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(spec, req, due)))
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    await _gather_cancel(tasks)


async def _gather_cancel(tasks: list[asyncio.Task[None]]) -> None:
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def warmup(client: httpx.AsyncClient, ep: EndpointConfig, n: int, cfg: BenchConfig, conc: int | None) -> int:
    """``n`` requests (not recorded) at up to the level's concurrency; returns how many succeeded."""
    if n <= 0:
        return 0
    specs = make_prompts(n, cfg.input_len, cfg.output_len, cfg.seed + 7919)
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


# ---------------------------------------------------------------- progress


class Progress:
    """Per-level live state: finished samples and the 1-s event bins."""

    def __init__(self, level: int, t0: float, total: int) -> None:
        self.level = level
        self.t0 = t0
        self.total = total
        self.completed = 0
        self.failed = 0
        self.output_tokens = 0
        self.ttft: list[float] = []
        self.itl_recent: list[float] = []
        self.bins: dict[int, int] = {}
        self.in_flight = 0
        self.cpu: list[float] = []
        self.lag_ms = 0.0

    def add_sample(self, s: Mapping[str, Any]) -> None:
        if s.get("success"):
            self.completed += 1
            self.output_tokens += int(s.get("output_tokens") or 0)
            self.ttft.append(s["ttft"])
            itl = s.get("itl") or []
            self.itl_recent.extend(itl[-256:])
            if len(self.itl_recent) > 50_000:
                del self.itl_recent[:25_000]
        else:
            self.failed += 1

    def tick(self, now: float) -> dict[str, Any]:
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
            "in_flight": self.in_flight,
            "total": self.total,
            "second": last,
            "tok_s": self.bins.get(last, 0) if last >= 0 else 0,
            "output_tokens": self.output_tokens,
            # None (not 0) until a first token / gap was seen: a missing value is never 0
            "ttft_p50_ms": metrics.percentile_sorted(tt, 50) * 1000 if tt else None,
            "ttft_p99_ms": metrics.percentile_sorted(tt, 99) * 1000 if tt else None,
            "itl_p50_ms": metrics.percentile_sorted(it, 50) * 1000 if it else None,
            "itl_p99_ms": metrics.percentile_sorted(it, 99) * 1000 if it else None,
            "cpu": [round(c, 3) for c in self.cpu],
            "lag_ms": round(self.lag_ms, 2),
        }


def _client_location(cfg: BenchConfig, where: str | None) -> dict[str, Any]:
    host = httpx.URL(cfg.url).host
    loopback = host in ("127.0.0.1", "localhost", "::1")
    return {
        "hostname": socket.gethostname(),
        "where": where or ("same-host" if loopback else "remote"),
        "server_url": cfg.url,
        "transport": cfg.transport,
        "workers": cfg.workers,
        "pid": os.getpid(),
    }


# ---------------------------------------------------------------- in-process level


async def _run_level_inproc(
    client: httpx.AsyncClient,
    ep: EndpointConfig,
    cfg: BenchConfig,
    specs: list[RequestSpec],
    conc: int | None,
    rate: float,
    prog: Progress,
    on_sample: Callable[[dict[str, Any]], None],
    emit: Callable[[dict[str, Any]], None],
    prepared: Sequence[httpx.Request] | None = None,
) -> tuple[float, dict[str, Any], bool]:
    """Returns (duration, client health, finished)."""
    mon = ClientMonitor()
    mon.start()
    live = Live(prog.t0)
    prog.bins = live.bins

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0 - ((_pc() - prog.t0) % 1.0) + 0.001)
            prog.in_flight = live.in_flight
            prog.cpu = [mon.last_cpu]
            prog.lag_ms = mon.last_lag_ms
            emit(prog.tick(_pc()))

    tk = asyncio.create_task(ticker())
    finished = False
    try:
        with quiet_gc():
            await drive(client, ep, specs, concurrency=conc, rate=rate, burstiness=cfg.burstiness,
                        seed=cfg.seed, t0=prog.t0, live=live, on_sample=on_sample, prepared=prepared)
        finished = True
    finally:
        duration = _pc() - prog.t0
        tk.cancel()
        try:
            await tk
        except BaseException:
            pass
        rep = await mon.stop()
    return duration, client_health([rep]), finished


# ---------------------------------------------------------------- multi-process level


async def _run_level_workers(
    cfg: BenchConfig,
    ep: EndpointConfig,
    specs: list[RequestSpec],
    conc: int | None,
    rate: float,
    prog: Progress,
    on_sample: Callable[[dict[str, Any]], None],
    emit: Callable[[dict[str, Any]], None],
    set_t0: Callable[[float], None],
) -> tuple[float, dict[str, Any], bool]:
    n = max(1, cfg.workers)
    procs = []
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for w in range(n):
        wc = None if conc is None else conc // n + (1 if w < conc % n else 0)
        if wc == 0:
            continue
        mine = [asdict(s) for i, s in enumerate(specs) if i % n == w]
        job = {
            "worker": w,
            "endpoint": asdict(ep),
            "specs": mine,
            "concurrency": wc,
            "rate": rate / n if math.isfinite(rate) else "inf",
            "burstiness": cfg.burstiness,
            "seed": cfg.seed + w,
            "warmup": (cfg.warmup // n) + (1 if w < cfg.warmup % n else 0),
            "read_timeout": cfg.read_timeout,
            "transport": cfg.transport,
            "input_len": cfg.input_len,
            "output_len": cfg.output_len,
        }
        p = await asyncio.create_subprocess_exec(
            *WORKER_COMMAND,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, limit=1 << 26,
        )
        assert p.stdin is not None
        p.stdin.write(json.dumps(job).encode() + b"\n")
        await p.stdin.drain()
        procs.append(p)
    try:
        for p in procs:
            assert p.stdout is not None
            line = await p.stdout.readline()
            if not line.startswith(b'{"ready"'):
                raise RuntimeError(f"bench worker failed to start: {line[:300]!r}")
        t0 = _pc() + 0.05
        prog.t0 = t0
        set_t0(t0)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"go {t0!r}\n".encode())
            await p.stdin.drain()
        reports: list[dict[str, Any]] = []
        inflight = [0] * len(procs)
        cpu = [0.0] * len(procs)
        lag = [0.0] * len(procs)

        async def reader(k: int, p: asyncio.subprocess.Process) -> None:
            assert p.stdout is not None
            while True:
                line = await p.stdout.readline()
                if not line:
                    return
                msg = json.loads(line)
                if "s" in msg:
                    on_sample(msg["s"])
                elif "tick" in msg:
                    tk = msg["tick"]
                    for b, c in tk["bins"].items():
                        prog.bins[int(b)] = prog.bins.get(int(b), 0) + c
                    inflight[k] = tk["in_flight"]
                    cpu[k] = tk["cpu"]
                    lag[k] = tk["lag_ms"]
                elif "end" in msg:
                    reports.append(msg["end"])

        async def ticker() -> None:
            while True:
                await asyncio.sleep(1.0 - ((_pc() - prog.t0) % 1.0) + 0.02)
                prog.in_flight = sum(inflight)
                prog.cpu = list(cpu)
                prog.lag_ms = max(lag) if lag else 0.0
                emit(prog.tick(_pc()))

        tk = asyncio.create_task(ticker())
        readers = [asyncio.create_task(reader(k, p)) for k, p in enumerate(procs)]
        try:
            await asyncio.wait(readers)
        except asyncio.CancelledError:
            # Interrupted: let the workers hand over their partial samples before they go.
            for p in procs:
                if p.returncode is None:
                    try:
                        p.send_signal(signal.SIGINT)
                    except ProcessLookupError:
                        pass
            await asyncio.wait(readers, timeout=5)
            for r in readers:
                r.cancel()
            raise
        finally:
            duration = _pc() - t0
            tk.cancel()
        for r in readers:
            r.result()  # a broken worker line is an error, not a silent loss
        rcs = [await p.wait() for p in procs]
        finished = all(rc == 0 for rc in rcs) and len(reports) == len(procs)
        return duration, client_health(reports), finished
    finally:
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


# ---------------------------------------------------------------- the benchmark


async def run_benchmark(
    cfg: BenchConfig,
    *,
    emit: Callable[[dict[str, Any]], None] | None = None,
    meta_extra: Mapping[str, Any] | None = None,
    client_where: str | None = None,
    save: bool = True,
) -> list[dict[str, Any]]:
    """Readiness wait, then every sweep level: meta → warmup → timed run → summary.

    Returns one summary per level (vLLM keys + ours). Cancelling (Ctrl-C)
    keeps every finished or partial sample and writes a ``partial`` summary.
    """
    from tui.bench.store import RunWriter, new_run_id, summarize

    emit = emit or (lambda _m: None)
    levels = cfg.levels()
    summaries: list[dict[str, Any]] = []
    async with make_client(transport=cfg.transport, read_timeout=cfg.read_timeout) as client:
        emit({"type": "waiting", "url": cfg.url, "timeout": cfg.ready_timeout})
        models = await wait_ready(client, cfg.url, cfg.ready_timeout)
        if not cfg.model:
            if not models:
                raise NotReady(f"{cfg.url}: /v1/models lists no model; pass --model")
            cfg.model = models[0]
        engine = await engine_info(client, cfg.url)
        ep = EndpointConfig(cfg.url, cfg.model, cfg.endpoint, cfg.ignore_eos, cfg.temperature,
                            request_deadline=cfg.request_deadline)
        sweep_id = new_run_id("sweep-") if len(levels) > 1 else None
        emit({"type": "start", "levels": [{"concurrency": c, "request_rate": _rate_json(r)} for c, r in levels],
              "model": cfg.model, "sweep_id": sweep_id})
        for li, (conc, rate) in enumerate(levels):
            n = cfg.prompts_for(conc)
            params = {
                "endpoint": cfg.endpoint, "num_prompts": n, "input_len": cfg.input_len,
                "output_len": cfg.output_len, "max_concurrency": conc, "request_rate": _rate_json(rate),
                "burstiness": cfg.burstiness, "warmup": cfg.warmup, "ignore_eos": cfg.ignore_eos,
                "temperature": cfg.temperature, "seed": cfg.seed, "goodput": dict(cfg.goodput),
                "percentiles": list(cfg.percentiles), "read_timeout": cfg.read_timeout,
                "request_deadline": cfg.request_deadline, "dataset": "synthetic-words",
                "workers": cfg.workers, "transport": cfg.transport,
            }
            meta: dict[str, Any] = {
                "date": time.strftime("%Y%m%d-%H%M%S"),
                "created": time.time(),
                "label": cfg.label,
                "model": cfg.model,
                "url": cfg.url,
                "target": cfg.url,
                "engine": engine,
                "client": _client_location(cfg, client_where),
                "params": params,
                "sweep_id": sweep_id,
                "level": li,
            }
            if meta_extra:
                meta.update({k: v for k, v in meta_extra.items() if k not in ("params", "client")})
                if isinstance(meta_extra.get("client"), Mapping):
                    meta["client"].update(meta_extra["client"])
            run_id = new_run_id()
            writer = RunWriter(run_id, meta) if save else None
            specs = make_prompts(n, cfg.input_len, cfg.output_len, cfg.seed)
            samples: list[dict[str, Any]] = []
            prog = Progress(li, _pc(), n)

            def on_sample(s: dict[str, Any], *, _w=writer, _p=prog) -> None:
                s.pop("_events", None)
                samples.append(s)
                _p.add_sample(s)
                if _w is not None:
                    _w.append(s)
                if cfg.progress_samples:
                    emit({"type": "sample", "level": _p.level, "index": s.get("index"),
                          "success": s["success"], "error_type": s["error_type"], "ttft": s["ttft"],
                          "latency": s["latency"], "output_tokens": s["output_tokens"]})

            emit({"type": "level_start", "level": li, "run_id": run_id, "concurrency": conc,
                  "request_rate": _rate_json(rate), "num_prompts": n, "warmup": cfg.warmup})
            finished = False
            duration = 0.0
            health: dict[str, Any] = {}
            try:
                if cfg.workers > 1:
                    def set_t0(t: float, _w=writer) -> None:
                        if _w is not None:
                            _w.update_meta(bench_start=t, bench_start_wall=time.time())

                    duration, health, finished = await _run_level_workers(
                        cfg, ep, specs, conc, rate, prog, on_sample, emit, set_t0)
                else:
                    await warmup(client, ep, cfg.warmup, cfg, conc)
                    prepared = [prepare(client, ep, sp) for sp in specs]
                    prog.t0 = _pc()
                    if writer is not None:
                        writer.update_meta(bench_start=prog.t0, bench_start_wall=time.time())
                    duration, health, finished = await _run_level_inproc(
                        client, ep, cfg, specs, conc, rate, prog, on_sample, emit, prepared)
            finally:
                if not duration:
                    duration = _pc() - prog.t0
                summary = summarize(samples, writer.meta if writer else {**meta, "run_id": run_id},
                                    duration=duration, partial=not finished, client=health)
                if writer is not None:
                    writer.write_summary(summary)
                    writer.close()
                summaries.append(summary)
                emit({"type": "level_done", "level": li, "run_id": run_id, "summary": summary})
        emit({"type": "done", "run_ids": [s["run_id"] for s in summaries]})
    return summaries


def _rate_json(r: float) -> float | str:
    return "inf" if not math.isfinite(r) else r
