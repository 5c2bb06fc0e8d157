"""The benchmark engine: load shapes, warmup, sweeps, progress, client health.

Standard library only, Python >= 3.9 (it also runs on GPU hosts with the
host's own interpreter); uvloop is used when that interpreter has it.

Load shapes (like ``vllm bench serve``):

* **closed loop** (``request_rate = inf``): every request is due at t0 and
  gated by the concurrency cap, so exactly ``C`` are in flight;
  ``client_queue_time`` is the wait for a slot.
* **open loop** (finite ``request_rate``): Gamma inter-arrival times
  (shape = burstiness, scale = 1 / (rate × burstiness); burstiness 1 =
  Poisson), seeded; an optional concurrency cap.

The timed phase runs from the dispatch of the first timed request to the end
of the last response. Everything else happens before t0: meta.json, warmup,
prompts, serializing the requests, GC settings and opening the connections
(one per concurrent request, like vLLM's warm pool; their connect times are
reported separately). Samples go to a writer thread, so no disk I/O runs on
the event loop while timing.

Prompts: for ``/v1/completions``, exactly ``input_len`` token ids (seeded;
vLLM and SGLang accept ``prompt: [ids]``). For chat, seeded common words,
calibrated with the server's ``/tokenize`` where it exists (else an
estimate, flagged). Each response's ``usage.prompt_tokens`` is checked
against the length sent; differences are counted in the summary.

Progress: ``emit`` receives plain dicts (the JSON shape of
:class:`tui.bench.records.BenchEvent`): ``waiting``, ``start``,
``level_start``, ``connected``, ``tick`` (once per second), ``sample`` (per
request, when asked), ``level_done``, ``done``.

Client health: each process measures its own CPU time
(:func:`time.process_time`), event-loop lateness, and the machine's load
and steal (``/proc/loadavg``, ``/proc/stat``). ``client_bound``: the client
itself was the limit; ``machine_busy``: other load on the machine delayed it.
``workers > 1`` runs the requests in that many processes
(``python -m tui.bench.worker``); ``perf_counter`` is CLOCK_MONOTONIC on
Linux, so their timestamps share one clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

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
from tui.bench.http import HttpClient, HTTPError, InvalidURL, Request, base_url, split_url

log = logging.getLogger(__name__)

_pc = time.perf_counter

#: a client process above this CPU (cores, timed-phase mean) is the limit on its own
CPU_BOUND_FRACTION = 0.85
#: loop lag p99 above this means timestamps were late; the client's own CPU says whose fault
LAG_BOUND_MS = 5.0
#: loop lag counts as the client's own doing when the client used at least this much CPU
CPU_BUSY_FRACTION = 0.5
#: machine steal above this fraction of CPU time, or load above the core count: machine busy
STEAL_BUSY_FRACTION = 0.05

#: token ids drawn for synthetic prompts: above the special tokens, below 32000 (every common vocab is larger)
TOKEN_ID_RANGE = (1000, 30000)

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
    model: Optional[str] = None
    endpoint: str = "completions"
    num_prompts: Optional[int] = None  # None: max(5 × C, 10)
    input_len: int = 128
    output_len: int = 128
    concurrency: List[int] = field(default_factory=lambda: [1])
    request_rate: List[float] = field(default_factory=lambda: [math.inf])
    burstiness: float = 1.0
    warmup: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0
    seed: int = 0
    goodput: Dict[str, float] = field(default_factory=dict)
    percentiles: List[float] = field(default_factory=lambda: list(metrics.DEFAULT_PERCENTILES))
    read_timeout: float = DEFAULT_READ_TIMEOUT
    request_deadline: Optional[float] = None
    ready_timeout: float = 120.0
    workers: int = 1
    #: the HTTP client (one: tui.bench.http); kept so older callers passing "lean" still work
    transport: str = "lean"
    label: Optional[str] = None
    progress_samples: bool = False
    #: open one connection per concurrent request before t0 (vLLM's warm pool)
    preconnect: bool = True
    #: completions prompts as token ids (exact length); False sends text like chat
    token_ids: bool = True

    def validate(self) -> None:
        """ValueError naming the first bad setting (``BenchConfig.<field>: ...``)."""
        try:
            split_url(base_url(self.url))
        except InvalidURL as e:
            raise ValueError(f"BenchConfig.url: {e}") from None
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"BenchConfig.endpoint {self.endpoint!r}: expected 'completions' or 'chat'")
        for name in ("input_len", "output_len", "workers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"BenchConfig.{name} {v!r}: expected a whole number >= 1")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"BenchConfig.warmup {self.warmup!r}: expected a whole number >= 0")
        if self.num_prompts is not None and (not isinstance(self.num_prompts, int) or self.num_prompts < 1):
            raise ValueError(f"BenchConfig.num_prompts {self.num_prompts!r}: expected a whole number >= 1")
        for c in self.concurrency:
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                raise ValueError(f"BenchConfig.concurrency {c!r}: every value must be a whole number >= 1")
        for r in self.request_rate:
            if not isinstance(r, (int, float)) or not r > 0:
                raise ValueError(f"BenchConfig.request_rate {r!r}: every value must be > 0 (math.inf: all at once)")
        for k, v in self.goodput.items():
            if k not in metrics.GOODPUT_KEYS:
                raise ValueError(f"BenchConfig.goodput {k!r}: key must be one of {', '.join(metrics.GOODPUT_KEYS)}")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0 or math.isinf(v):
                raise ValueError(f"BenchConfig.goodput {k}={v!r}: expected a finite number of ms >= 0")
        if not self.burstiness > 0 or math.isinf(self.burstiness):
            raise ValueError(f"BenchConfig.burstiness {self.burstiness!r}: expected a finite number > 0")
        for name in ("read_timeout", "ready_timeout"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"BenchConfig.{name} {v!r}: expected seconds > 0")
        self.levels()

    def levels(self) -> List[Tuple[Optional[int], float]]:
        """(max_concurrency, request_rate) per sweep level."""
        cs: List[Optional[int]] = list(self.concurrency) or [None]
        rs = list(self.request_rate) or [math.inf]
        if len(rs) > 1 and len(cs) > 1:
            raise ValueError("sweep over concurrency or over request rate, not both")
        if self.transport != "lean":
            raise ValueError(f"transport {self.transport!r}: the benchmark has one HTTP client ('lean')")
        return [(c, r) for c in cs for r in rs]

    def prompts_for(self, c: Optional[int]) -> int:
        if self.num_prompts:
            return self.num_prompts
        return max(5 * (c or 1), 10)


# ---------------------------------------------------------------- prompts


def make_prompts(n: int, input_len: int, output_len: int, seed: int, *, token_ids: bool = False
                 ) -> List[RequestSpec]:
    """Seeded synthetic prompts: ``input_len`` token ids (exact) or words (an estimate)."""
    rng = random.Random(seed)
    out = []
    n_tok = max(1, input_len)
    if token_ids:
        lo, hi = TOKEN_ID_RANGE
        rr = rng.randrange
        for i in range(n):
            out.append(RequestSpec([rr(lo, hi) for _ in range(n_tok)], n_tok, output_len, i, True))
        return out
    choice = rng.choice
    for i in range(n):
        words = [choice(WORDS) for _ in range(n_tok)]
        out.append(RequestSpec(" ".join(words), len(words), output_len, i, False))
    return out


async def calibrate_chat_prompts(client: HttpClient, base: str, model: str, specs: List[RequestSpec],
                                 input_len: int, seed: int, *, rounds: int = 8) -> str:
    """Adjust each chat prompt's word count until the server's ``/tokenize`` counts ``input_len``.

    Counts the whole chat request (template included) like the engines do for
    usage.prompt_tokens. Returns how lengths are known: ``"server-tokenizer"``
    (every prompt counted; ``exact`` set where the count matched) or
    ``"estimate"`` when the server has no usable ``/tokenize``.
    """
    url = base_url(base) + "/tokenize"
    rng = random.Random(seed + 104729)

    async def count(text: str) -> Optional[int]:
        r = await client.post_json(url, {"model": model, "messages": [{"role": "user", "content": text}]},
                                   timeout=10.0)
        if r.status != 200:
            return None
        try:
            c = r.json().get("count")
        except (ValueError, AttributeError):
            return None
        return c if isinstance(c, int) and not isinstance(c, bool) else None

    short = [w for w in WORDS if len(w) <= 2]

    async def fit(words: List[str]) -> Tuple[Optional[int], List[str]]:
        """Add or drop words until the count is ``input_len`` (or ``rounds`` tries); the closest wins."""
        c = await count(" ".join(words))
        best: Tuple[Optional[int], List[str]] = (c, list(words))
        for _ in range(rounds):
            if c is None or c == input_len:
                break
            diff = input_len - c
            step = diff // 2 if abs(diff) > 3 else diff
            if step > 0:
                pool = WORDS if abs(diff) > 3 else short
                words.extend(rng.choice(pool) for _ in range(step))
            else:
                del words[max(1, len(words) + step):]
            c = await count(" ".join(words))
            if c is not None and (best[0] is None or abs(c - input_len) < abs(best[0] - input_len)):
                best = (c, list(words))
        return best

    if not specs:
        return "estimate"
    try:
        c0, words0 = await fit(str(specs[0].prompt).split())
    except HTTPError as e:
        log.info("no /tokenize at %s (%s): chat prompt lengths are estimates", url, e)
        return "estimate"
    if c0 is None:
        log.info("%s does not count chat prompts: their lengths are estimates", url)
        return "estimate"
    sp0 = specs[0]
    specs[0] = RequestSpec(" ".join(words0), c0, sp0.output_len, sp0.index, c0 == input_len)
    n_words = len(words0)  # a good start for every other prompt
    sem = asyncio.Semaphore(32)

    async def fit_one(i: int) -> None:
        spec = specs[i]
        words = str(spec.prompt).split()
        while len(words) < n_words:
            words.append(rng.choice(WORDS))
        del words[max(1, n_words):]
        async with sem:
            try:
                c, words = await fit(words)
            except HTTPError as e:
                log.warning("prompt %d: /tokenize failed (%s); its length is an estimate", spec.index, e)
                return
        if c is not None:
            specs[i] = RequestSpec(" ".join(words), c, spec.output_len, spec.index, c == input_len)

    await asyncio.gather(*(fit_one(i) for i in range(1, len(specs))))
    return "server-tokenizer"


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> List[float]:
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


async def wait_ready(client: HttpClient, base: str, timeout: float, *, interval: float = 0.5) -> List[str]:
    """Poll ``/v1/models`` (or ``/health``) until the server answers 200; returns the model ids.

    Raises :class:`NotReady` after ``timeout`` seconds, naming the last error.
    """
    base = base_url(base)
    deadline = _pc() + timeout
    last = "no answer"
    while True:
        left = deadline - _pc()
        try:
            r = await client.get(base + "/v1/models", timeout=max(0.2, min(5.0, left)))
            if r.status == 200:
                try:
                    data = r.json().get("data") or []
                    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
                except (ValueError, AttributeError):
                    return []
            if r.status == 404:
                h = await client.get(base + "/health", timeout=max(0.2, min(5.0, left)))
                if h.status == 200:
                    return []
                last = f"/health answered HTTP {h.status}"
            else:
                last = f"/v1/models answered HTTP {r.status}"
        except HTTPError as e:
            last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if _pc() + interval > deadline:
            raise NotReady(f"{base}: server not ready after {timeout:g} s (last: {last})")
        await asyncio.sleep(interval)


async def engine_info(client: HttpClient, base: str) -> Dict[str, Any]:
    """Best effort: engine version from vLLM ``/version`` or SGLang ``/get_server_info``."""
    base = base_url(base)
    for path in ("/version", "/get_server_info", "/server_info"):
        try:
            r = await client.get(base + path, timeout=2.0)
        except HTTPError as e:
            log.debug("%s%s: %s", base, path, e)
            continue
        if r.status == 200:
            try:
                j = r.json()
            except ValueError:
                continue
            if isinstance(j, dict) and j.get("version"):
                return {"version": str(j["version"]), "source": path,
                        "engine": "vllm" if path == "/version" else "sglang"}
    return {"version": None, "source": None, "engine": None}


# ---------------------------------------------------------------- client health


def read_cpu_times() -> Optional[Tuple[float, float, float]]:
    """(total, idle + iowait, steal) jiffies of the whole machine from ``/proc/stat``; None off Linux."""
    try:
        with open("/proc/stat", "rb") as f:
            line = f.readline()
    except OSError:
        return None
    parts = line.split()
    if not parts or parts[0] != b"cpu":
        return None
    v = [float(x) for x in parts[1:]]
    v += [0.0] * (8 - len(v))
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    total = sum(v[:8])
    return total, v[3] + v[4], v[7]


def read_load1() -> Optional[float]:
    try:
        with open("/proc/loadavg", "rb") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class ClientMonitor:
    """This process's CPU (per 1 s), event-loop lateness (per 50 ms tick), the machine's load and steal."""

    def __init__(self) -> None:
        self.cpu: List[float] = []
        self.lag: List[float] = []
        self.load1: List[float] = []
        self._tasks: "List[asyncio.Task[Any]]" = []
        self.last_cpu = 0.0
        self.last_lag_ms = 0.0
        self.last_load1: Optional[float] = None
        self.last_steal = 0.0
        self._cpu0 = (time.process_time(), _pc())
        self._stat0 = read_cpu_times()
        self._stopped: Optional[Tuple[float, float]] = None

    def start(self) -> None:
        self._cpu0 = (time.process_time(), _pc())
        self._stat0 = read_cpu_times()
        self._tasks = [asyncio.ensure_future(self._cpu_loop()), asyncio.ensure_future(self._lag_loop())]

    async def _cpu_loop(self) -> None:
        prev = time.process_time()
        pt = _pc()
        stat_prev = read_cpu_times()
        while True:
            await asyncio.sleep(1.0)
            now = time.process_time()
            t = _pc()
            self.last_cpu = (now - prev) / max(1e-6, t - pt)
            self.cpu.append(self.last_cpu)
            prev, pt = now, t
            ld = read_load1()
            if ld is not None:
                self.last_load1 = ld
                self.load1.append(ld)
            st = read_cpu_times()
            if st is not None and stat_prev is not None and st[0] > stat_prev[0]:
                self.last_steal = (st[2] - stat_prev[2]) / (st[0] - stat_prev[0])
            stat_prev = st

    async def _lag_loop(self) -> None:
        step = 0.05
        while True:
            t = _pc()
            await asyncio.sleep(step)
            lag = max(0.0, _pc() - t - step)
            self.lag.append(lag)
            self.last_lag_ms = lag * 1000

    async def stop(self) -> Dict[str, Any]:
        self._stopped = (time.process_time(), _pc())
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return self.report()

    def report(self) -> Dict[str, Any]:
        c1, t1 = self._stopped or (time.process_time(), _pc())
        c0, t0 = self._cpu0
        wall = t1 - t0
        st1 = read_cpu_times()
        machine: Dict[str, Any] = {"ncpu": os.cpu_count() or 1,
                                   "load1_max": max(self.load1) if self.load1 else read_load1()}
        if st1 is not None and self._stat0 is not None and st1[0] > self._stat0[0]:
            dt = st1[0] - self._stat0[0]
            machine["busy"] = 1.0 - (st1[1] - self._stat0[1]) / dt
            machine["steal"] = (st1[2] - self._stat0[2]) / dt
        return {
            "cpu": list(self.cpu),
            "cpu_avg": (c1 - c0) / wall if wall > 0.05 else 0.0,
            "cpu_seconds": c1 - c0,
            "lag_p99_ms": metrics.percentile(self.lag, 99) * 1000 if self.lag else 0.0,
            "lag_max_ms": max(self.lag) * 1000 if self.lag else 0.0,
            "machine": machine,
        }


def client_health(reports: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Merge worker reports: ``client_bound`` (the client was the limit) and ``machine_busy`` (other load)."""
    means = [float(r.get("cpu_avg") or 0.0) for r in reports]
    maxes = [max(r["cpu"]) if r.get("cpu") else float(r.get("cpu_avg") or 0.0) for r in reports]
    lag99 = max((float(r.get("lag_p99_ms") or 0.0) for r in reports), default=0.0)
    lagmax = max((float(r.get("lag_max_ms") or 0.0) for r in reports), default=0.0)
    cpu_mean = max(means) if means else 0.0
    machines = [r.get("machine") or {} for r in reports]
    ncpu = max((int(m.get("ncpu") or 1) for m in machines), default=os.cpu_count() or 1)
    loads = [float(m["load1_max"]) for m in machines if isinstance(m.get("load1_max"), (int, float))]
    steals = [float(m["steal"]) for m in machines if isinstance(m.get("steal"), (int, float))]
    busys = [float(m["busy"]) for m in machines if isinstance(m.get("busy"), (int, float))]
    load1 = max(loads) if loads else None
    steal = max(steals) if steals else None
    lagging = lag99 > LAG_BOUND_MS
    reasons: List[str] = []
    if cpu_mean > CPU_BOUND_FRACTION:
        reasons.append(f"a client process used {cpu_mean:.2f} of a core")
    elif lagging and cpu_mean >= CPU_BUSY_FRACTION:
        reasons.append(f"loop lag p99 {lag99:.1f} ms with the client at {cpu_mean:.2f} of a core")
    client_bound = bool(reasons)
    busy_reasons: List[str] = []
    if steal is not None and steal > STEAL_BUSY_FRACTION:
        busy_reasons.append(f"steal {steal * 100:.0f} %")
    if load1 is not None and load1 > ncpu:
        busy_reasons.append(f"load {load1:.1f} on {ncpu} cores")
    if lagging and not client_bound:
        busy_reasons.append(f"loop lag p99 {lag99:.1f} ms while the client used {cpu_mean:.2f} of a core")
    return {
        "workers": len(reports),
        "cpu_mean": cpu_mean,
        "cpu_max": max(maxes) if maxes else 0.0,
        "cpu_per_worker": means,
        "cpu_seconds": sum(float(r.get("cpu_seconds") or 0.0) for r in reports),
        "loop_lag_p99_ms": lag99,
        "loop_lag_max_ms": lagmax,
        "machine_ncpu": ncpu,
        "machine_load1_max": load1,
        "machine_steal": steal,
        "machine_busy_frac": max(busys) if busys else None,
        "client_bound": client_bound,
        "client_bound_reason": "; ".join(reasons),
        "machine_busy": bool(busy_reasons),
        "machine_busy_reason": "; ".join(busy_reasons),
    }


# ---------------------------------------------------------------- driving one level


async def drive(
    client: HttpClient,
    ep: EndpointConfig,
    specs: Sequence[RequestSpec],
    *,
    concurrency: Optional[int],
    rate: float,
    burstiness: float,
    seed: int,
    t0: Optional[float],
    live: Live,
    on_sample: Callable[[Dict[str, Any]], None],
    prepared: Optional[Sequence[Request]] = None,
    started: Optional[Callable[[float], None]] = None,
) -> float:
    """Send ``specs`` with the given load shape; returns t0 (when the first request was dispatched).

    ``t0``: a ``perf_counter`` time to start at (workers share one), or None
    for now. ``on_sample`` gets every record (also partial ones on cancel).
    ``prepared``: the requests built beforehand with :func:`prepare`.
    ``started(t0)`` is called right before the first dispatch.
    """
    reqs: Sequence[Optional[Request]] = prepared if prepared is not None else [None] * len(specs)
    if t0 is not None:
        delay = t0 - _pc()
        if delay > 0:
            await asyncio.sleep(delay)
    start = _pc()
    live.t0 = start
    if started is not None:
        started(start)
    if not math.isfinite(rate) and concurrency:
        it = iter(zip(specs, reqs))

        async def lane() -> None:
            for spec, req in it:
                on_sample(await stream_request(client, ep, spec, request=req, queued_at=start, live=live,
                                               on_partial=on_sample))

        await _gather_cancel([asyncio.ensure_future(lane()) for _ in range(min(concurrency, len(specs)))])
        return start
    offsets = arrival_offsets(len(specs), rate, burstiness, seed)
    sem = asyncio.Semaphore(concurrency) if concurrency else None
    tasks: "List[asyncio.Future[Any]]" = []

    async def one(spec: RequestSpec, req: Optional[Request], due: float) -> None:
        if sem is None:
            on_sample(await stream_request(client, ep, spec, request=req, queued_at=due, live=live,
                                           on_partial=on_sample))
            return
        async with sem:
            on_sample(await stream_request(client, ep, spec, request=req, queued_at=due, live=live,
                                           on_partial=on_sample))

    try:
        for spec, req, off in zip(specs, reqs, offsets):
            due = start + off
            delay = due - _pc()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(spec, req, due)))
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    await _gather_cancel(tasks)
    return start


async def _gather_cancel(tasks: "List[asyncio.Future[Any]]") -> None:
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def warmup(client: HttpClient, ep: EndpointConfig, n: int, cfg: BenchConfig, conc: Optional[int]) -> int:
    """``n`` requests (not recorded) at up to the level's concurrency; returns how many succeeded."""
    if n <= 0:
        return 0
    specs = make_prompts(n, cfg.input_len, cfg.output_len, cfg.seed + 7919,
                         token_ids=cfg.token_ids and ep.endpoint != "chat")
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


# ---------------------------------------------------------------- progress


class Progress:
    """Per-level live state: finished samples and the 1-s event bins."""

    def __init__(self, level: int, t0: float, total: int, goodput: Optional[Mapping[str, float]] = None) -> None:
        self.level = level
        self.t0 = t0
        self.total = total
        self.completed = 0
        self.failed = 0
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

    def add_sample(self, s: Mapping[str, Any]) -> None:
        if s.get("success"):
            self.completed += 1
            self.output_tokens += int(s.get("output_tokens") or 0)
            if self.slo is not None and metrics.meets_slo(s, self.slo):
                self.good += 1
            self.ttft.append(s["ttft"])
            if len(self.ttft) > self.WINDOW:
                del self.ttft[:self.WINDOW // 2]
            itl = s.get("itl") or []
            self.itl_recent.extend(itl[-64:])
            if len(self.itl_recent) > self.WINDOW:
                del self.itl_recent[:self.WINDOW // 2]
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


def _client_location(cfg: BenchConfig, where: Optional[str]) -> Dict[str, Any]:
    try:
        host = urlsplit(cfg.url).hostname or ""
    except ValueError:
        host = ""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    return {
        "hostname": socket.gethostname(),
        "where": where or ("same-host" if loopback else "remote"),
        "server_url": cfg.url,
        "transport": "lean",
        "workers": cfg.workers,
        "pid": os.getpid(),
        "python": "%d.%d.%d" % sys.version_info[:3],
    }


def _connect_stats(times: Sequence[float]) -> Dict[str, Any]:
    return {"connections": len(times),
            "connect_ms_mean": metrics.mean(times) * 1000 if times else None,
            "connect_ms_max": max(times) * 1000 if times else None}


# ---------------------------------------------------------------- in-process level


async def _run_level_inproc(
    client: HttpClient,
    ep: EndpointConfig,
    cfg: BenchConfig,
    specs: List[RequestSpec],
    conc: Optional[int],
    rate: float,
    prog: Progress,
    on_sample: Callable[[Dict[str, Any]], None],
    emit: Callable[[Dict[str, Any]], None],
    prepared: Optional[Sequence[Request]],
    set_t0: Callable[[float], None],
) -> Tuple[float, Dict[str, Any], bool]:
    """Returns (duration, client health, finished)."""
    live = Live()
    prog.bins = live.bins
    mon = ClientMonitor()
    mon.start()
    started = asyncio.get_running_loop().create_future()

    def on_start(t0: float) -> None:
        prog.t0 = t0
        set_t0(t0)
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
            await drive(client, ep, specs, concurrency=conc, rate=rate, burstiness=cfg.burstiness,
                        seed=cfg.seed, t0=None, live=live, on_sample=on_sample, prepared=prepared,
                        started=on_start)
            end = _pc()
        finished = True
    finally:
        duration = (end if end is not None else _pc()) - prog.t0
        tk.cancel()
        await asyncio.gather(tk, return_exceptions=True)
        rep = await mon.stop()
    return duration, client_health([rep]), finished


# ---------------------------------------------------------------- multi-process level


def _package_root() -> str:
    """The folder (or zip archive) that holds the ``tui`` package."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_argv() -> List[str]:
    """How to start a worker: this interpreter (isolated if this one is), the package root put on sys.path.

    No PYTHONPATH needed, so it works from a zip archive and under ``python -I``.
    """
    code = ("import sys; sys.path.insert(0, %r); from tui.bench.worker import main; raise SystemExit(main())"
            % _package_root())
    return [sys.executable] + (["-I"] if sys.flags.isolated else []) + ["-c", code]


async def _run_level_workers(
    cfg: BenchConfig,
    ep: EndpointConfig,
    specs: List[RequestSpec],
    conc: Optional[int],
    rate: float,
    prog: Progress,
    on_sample: Callable[[Dict[str, Any]], None],
    emit: Callable[[Dict[str, Any]], None],
    set_t0: Callable[[float], None],
) -> Tuple[float, Dict[str, Any], bool]:
    n = max(1, cfg.workers)
    procs = []
    argv = worker_argv()
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
            "input_len": cfg.input_len,
            "output_len": cfg.output_len,
            "token_ids": cfg.token_ids,
            "preconnect": preconnect_count(len(mine), wc) if cfg.preconnect else 0,
        }
        p = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26,
        )
        assert p.stdin is not None
        p.stdin.write(json.dumps(job).encode() + b"\n")
        await p.stdin.drain()
        procs.append(p)
    try:
        connect: List[float] = []
        for p in procs:
            assert p.stdout is not None
            line = await p.stdout.readline()
            if not line.startswith(b'{"ready"'):
                raise RuntimeError(f"bench worker failed to start: {line[:300]!r}")
            connect.extend(json.loads(line).get("connect_times") or [])
        if cfg.preconnect:
            emit({"type": "connected", "level": prog.level, **_connect_stats(connect)})
        t0 = _pc() + 0.05
        prog.t0 = t0
        set_t0(t0)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"go {t0!r}\n".encode())
            await p.stdin.drain()
        reports: List[Dict[str, Any]] = []
        inflight = [0] * len(procs)
        cpu = [0.0] * len(procs)
        lag = [0.0] * len(procs)
        ends: List[float] = []

        async def reader(k: int, p: "asyncio.subprocess.Process") -> None:
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
                    prog.load1 = tk.get("load1")
                    prog.steal = tk.get("steal") or 0.0
                elif "end" in msg:
                    reports.append(msg["end"])
                    if isinstance(msg["end"].get("t_end"), float):
                        ends.append(msg["end"]["t_end"])

        async def ticker() -> None:
            while True:
                await asyncio.sleep(1.0 - ((_pc() - prog.t0) % 1.0) + 0.02)
                prog.in_flight = sum(inflight)
                prog.cpu = list(cpu)
                prog.lag_ms = max(lag) if lag else 0.0
                emit(prog.tick(_pc()))

        tk = asyncio.ensure_future(ticker())
        readers = [asyncio.ensure_future(reader(k, p)) for k, p in enumerate(procs)]
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
            duration = (max(ends) if len(ends) == len(procs) and ends else _pc()) - t0
            tk.cancel()
        for r in readers:
            r.result()  # a broken worker line is an error, not a silent loss
        rcs = [await p.wait() for p in procs]
        finished = all(rc == 0 for rc in rcs) and len(reports) == len(procs)
        health = client_health(reports)
        if cfg.preconnect:
            health.update(_connect_stats(connect))
        return duration, health, finished
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
    emit: Optional[Callable[[Dict[str, Any]], None]] = None,
    meta_extra: Optional[Mapping[str, Any]] = None,
    client_where: Optional[str] = None,
    save: bool = True,
    results_dir: Union[str, "os.PathLike[str]", None] = None,
) -> List[Dict[str, Any]]:
    """Readiness wait, then every sweep level: meta → warmup → connections → timed run → summary.

    Returns one summary per level (vLLM keys + ours); a bad setting raises
    ValueError naming it, before anything is sent. Cancelling (Ctrl-C)
    keeps every finished or partial sample and writes a ``partial`` summary.
    ``emit`` receives each progress event as a plain dict (JSON-ready; see
    :class:`tui.bench.records.BenchEvent`). ``results_dir``: where run folders
    go (default ``data_dir()/results``).
    """
    from tui.bench.store import RunWriter, finite, new_run_id, summarize

    cfg.validate()
    emit = emit or (lambda _m: None)
    levels = cfg.levels()
    summaries: List[Dict[str, Any]] = []
    async with make_client(read_timeout=cfg.read_timeout) as client:
        emit({"type": "waiting", "url": cfg.url, "timeout": cfg.ready_timeout})
        models = await wait_ready(client, cfg.url, cfg.ready_timeout)
        if not cfg.model:
            if not models:
                raise NotReady(f"{cfg.url}: /v1/models lists no model; pass --model")
            cfg.model = models[0]
        engine = await engine_info(client, cfg.url)
        ep = EndpointConfig(cfg.url, cfg.model, cfg.endpoint, cfg.ignore_eos, cfg.temperature,
                            request_deadline=cfg.request_deadline)
        chat = cfg.endpoint == "chat"
        token_ids = cfg.token_ids and not chat
        sweep_id = new_run_id("sweep-") if len(levels) > 1 else None
        emit({"type": "start", "levels": [{"concurrency": c, "request_rate": _rate_json(r)} for c, r in levels],
              "model": cfg.model, "sweep_id": sweep_id, "goodput": dict(cfg.goodput)})
        for li, (conc, rate) in enumerate(levels):
            n = cfg.prompts_for(conc)
            specs = make_prompts(n, cfg.input_len, cfg.output_len, cfg.seed, token_ids=token_ids)
            if token_ids:
                prompt_source = "token-ids"
            elif chat:
                prompt_source = await calibrate_chat_prompts(client, cfg.url, cfg.model, specs, cfg.input_len,
                                                             cfg.seed)
            else:
                prompt_source = "estimate"
            params = {
                "endpoint": cfg.endpoint, "num_prompts": n, "input_len": cfg.input_len,
                "output_len": cfg.output_len, "max_concurrency": conc, "request_rate": _rate_json(rate),
                "burstiness": cfg.burstiness, "warmup": cfg.warmup, "ignore_eos": cfg.ignore_eos,
                "temperature": cfg.temperature, "seed": cfg.seed, "goodput": dict(cfg.goodput),
                "percentiles": list(cfg.percentiles), "read_timeout": cfg.read_timeout,
                "request_deadline": cfg.request_deadline,
                "dataset": "random-token-ids" if token_ids else "synthetic-words",
                "prompt_lengths": prompt_source,
                "tokenizer": cfg.model if prompt_source in ("token-ids", "server-tokenizer") else None,
                "workers": cfg.workers, "transport": "lean", "preconnect": cfg.preconnect,
            }
            meta: Dict[str, Any] = {
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
            writer = RunWriter(run_id, meta, base=results_dir) if save else None
            samples: List[Dict[str, Any]] = []
            prog = Progress(li, _pc(), n, cfg.goodput)

            def on_sample(s: Dict[str, Any], *, _w: Any = writer, _p: Progress = prog) -> None:
                s.pop("_events", None)
                samples.append(s)
                _p.add_sample(s)
                if _w is not None:
                    _w.append(s)
                if cfg.progress_samples:
                    emit({"type": "sample", "level": _p.level, "index": s.get("index"),
                          "success": s["success"], "error_type": s["error_type"], "ttft": s["ttft"],
                          "latency": s["latency"], "output_tokens": s["output_tokens"]})

            def set_t0(t: float, _w: Any = writer) -> None:
                # handed to the writer thread: no file I/O here, the timed phase has begun
                if _w is not None:
                    _w.update_meta(bench_start=t, bench_start_wall=time.time())

            emit({"type": "level_start", "level": li, "run_id": run_id, "concurrency": conc,
                  "request_rate": _rate_json(rate), "num_prompts": n, "warmup": cfg.warmup,
                  "run_dir": str(writer.dir) if writer is not None else None})
            finished = False
            duration = 0.0
            health: Dict[str, Any] = {}
            connect: Dict[str, Any] = {}
            try:
                if cfg.workers > 1:
                    duration, health, finished = await _run_level_workers(
                        cfg, ep, specs, conc, rate, prog, on_sample, emit, set_t0)
                else:
                    await warmup(client, ep, cfg.warmup, cfg, conc)
                    prepared = [prepare(client, ep, sp) for sp in specs]
                    if cfg.preconnect:
                        times = await client.warm(ep.url, preconnect_count(n, conc))
                        connect = _connect_stats(times)
                        emit({"type": "connected", "level": li, **connect})
                    opened = client.connections_opened
                    duration, health, finished = await _run_level_inproc(
                        client, ep, cfg, specs, conc, rate, prog, on_sample, emit, prepared, set_t0)
                    connect["connections_opened_timed"] = client.connections_opened - opened
            finally:
                if not duration:
                    duration = _pc() - prog.t0
                health = {**health, **{k: v for k, v in connect.items()}}
                meta_now = writer.meta if writer else {**meta, "run_id": run_id}
                summary = summarize(samples, meta_now, duration=duration, partial=not finished, client=health)
                if writer is not None:
                    writer.write_summary(summary)
                    writer.close()
                summaries.append(summary)
                emit({"type": "level_done", "level": li, "run_id": run_id, "summary": finite(summary)})
        emit({"type": "done", "run_ids": [s["run_id"] for s in summaries]})
    return summaries


def _rate_json(r: float) -> Union[float, str]:
    return "inf" if not math.isfinite(r) else r
