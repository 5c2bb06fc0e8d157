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

Prompts come from the workload source (:mod:`tunedeck.bench.workloads`, chosen by
``cfg.workload``; docs/workloads.md), built for every level once the server
answers ``/v1/models`` and before any request is sent, so a bad workload stops
the run with one line. Requests that would not fit the context limit are skipped
and counted: ``--context-limit`` when given, else the served model's
``max_model_len`` from that ``/v1/models`` answer (recorded as ``context_limit``
with its source). The default, ``random``:
for ``/v1/completions``, exactly ``input_len`` token ids (seeded; vLLM and
SGLang accept ``prompt: [ids]``); for chat, seeded common words. Text prompts
with target lengths (random on chat, ``text``) are fitted with the server's
``/tokenize`` where it exists (else an estimate, flagged). Each response's
``usage.prompt_tokens`` is checked against the length sent; differences are
counted in the summary. Each level's meta and summary record the workload
(name, options, sha256 of the prompt set) and the lengths sent.

Progress: ``emit`` receives plain dicts (the JSON shape of
:class:`tunedeck.bench.records.BenchEvent`): ``waiting``, ``start``,
``level_start``, ``connected``, ``tick`` (once per second), ``sample`` (per
request, when asked), ``level_done``, ``done``.

Client health: each process measures its own CPU time
(:func:`time.process_time`), event-loop lateness, and the machine's load
and steal (``/proc/loadavg``, ``/proc/stat``). ``client_bound``: the client
itself was the limit; ``machine_busy``: other load on the machine delayed it.
``workers > 1`` runs the requests in that many processes
(``python -m tunedeck.bench.worker``); ``perf_counter`` is CLOCK_MONOTONIC on
Linux, so their timestamps share one clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Union
from urllib.parse import urlsplit

from tunedeck.bench.client import (
    EndpointConfig,
    make_client,
    prepare,
)
from tunedeck.bench.config import BenchConfig, NotReady
from tunedeck.bench.counters import Snapshot, level_figures, read_counters
from tunedeck.bench.fanout import run_level_workers
from tunedeck.bench.http import HttpClient
from tunedeck.bench.httpcore import HTTPError, base_url
from tunedeck.bench.levels import (
    Level,
    LoadShape,
    Progress,
    connect_stats,
    preconnect_count,
    run_level_inproc,
    warmup,
)
from tunedeck.bench.prompts import calibrate_prompts
from tunedeck.bench.records import LevelSummaryRecord, SampleRecord
from tunedeck.bench.workloads import Workload, WorkloadSpec, build_workload, length_distributions, prompt_set_sha256

log = logging.getLogger(__name__)

_pc = time.perf_counter


# ---------------------------------------------------------------- prompts


# ---------------------------------------------------------------- readiness / discovery


async def wait_ready(client: HttpClient, base: str, timeout: float, *, interval: float = 0.5) -> List[Dict[str, Any]]:
    """Poll ``/v1/models`` (or ``/health``) until the server answers 200; returns its model cards
    (``/v1/models``'s ``data``, each with a string ``id``; none when only ``/health`` answered).

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
                    return [{**m, "id": str(m["id"])} for m in data if isinstance(m, dict) and m.get("id")]
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


def served_context_length(cards: Sequence[Mapping[str, Any]], model: str) -> Optional[int]:
    """The context length (prompt plus output tokens) the server gives ``model``: ``max_model_len``
    on its ``/v1/models`` card, where vLLM and SGLang both report it (SGLang's ``/get_model_info``
    has no such field). An adapter's card may carry none (vLLM's LoRA cards): its base model's
    (``parent``) counts. None when the server does not say."""
    by_id = {str(c.get("id")): c for c in cards}
    card = by_id.get(model)
    seen: Set[str] = set()
    while card is not None and str(card.get("id")) not in seen:
        seen.add(str(card.get("id")))
        n = card.get("max_model_len")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
        parent = card.get("parent")
        card = by_id.get(parent) if isinstance(parent, str) else None
    return None


def context_limit(spec: WorkloadSpec, cards: Sequence[Mapping[str, Any]], model: str) -> Dict[str, Any]:
    """The context limit a run applies and where it comes from, as results record it:
    ``{"tokens": N, "source": "option"}`` (``--context-limit``, which wins), ``"server"`` (the
    served model's context length), or ``{"tokens": None, "source": None}`` when neither says."""
    option = spec.params.get("context_limit")
    if option is not None:
        return {"tokens": option, "source": "option"}
    n = served_context_length(cards, model)
    return {"tokens": n, "source": "server" if n is not None else None}


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
                return {
                    "version": str(j["version"]),
                    "source": path,
                    "engine": "vllm" if path == "/version" else "sglang",
                }
    return {"version": None, "source": None, "engine": None}


# ---------------------------------------------------------------- client health


# ---------------------------------------------------------------- driving one level


# ---------------------------------------------------------------- progress


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


# ---------------------------------------------------------------- in-process level


# ---------------------------------------------------------------- multi-process level


# ---------------------------------------------------------------- the benchmark


async def run_benchmark(
    cfg: BenchConfig,
    *,
    emit: Optional[Callable[[Dict[str, Any]], None]] = None,
    meta_extra: Optional[Mapping[str, Any]] = None,
    client_where: Optional[str] = None,
    save: bool = True,
    results_dir: Union[str, "os.PathLike[str]", None] = None,
) -> List[LevelSummaryRecord]:
    """Readiness wait, then every sweep level: meta → warmup → connections → timed run → summary.

    Returns one summary per level (vLLM keys + ours); a bad setting raises
    ValueError naming it, before anything is sent. Cancelling (Ctrl-C)
    keeps every finished or partial sample and writes a ``partial`` summary.
    ``emit`` receives each progress event as a plain dict (JSON-ready; see
    :class:`tunedeck.bench.records.BenchEvent`). ``results_dir``: where run folders
    go (default ``data_dir()/results``).
    """
    from tunedeck.bench.store import RunWriter, finite, new_run_id, summarize

    cfg.validate()
    emit = emit or (lambda _m: None)
    levels = cfg.levels()
    chat = cfg.endpoint == "chat"
    token_ids = cfg.token_ids and not chat
    wspec = cfg.workload_spec()
    summaries: List[LevelSummaryRecord] = []
    async with make_client(read_timeout=cfg.read_timeout, headers=cfg.auth_headers()) as client:
        emit({"type": "waiting", "url": cfg.url, "timeout": cfg.ready_timeout})
        cards = await wait_ready(client, cfg.url, cfg.ready_timeout)
        if not cfg.model:
            if not cards:
                raise NotReady(f"{cfg.url}: /v1/models lists no model; pass --model")
            cfg.model = cards[0]["id"]
        context = context_limit(wspec, cards, cfg.model)
        if context["source"] is None:
            log.warning(
                "%s: /v1/models gives no max_model_len for %s: no context limit applied (--context-limit N sets one)",
                cfg.url,
                cfg.model,
            )
        # every level's requests before any is sent: a bad workload stops here, with one line
        built: Dict[int, Workload] = {}
        for conc, _rate in levels:
            n = cfg.prompts_for(conc)
            if n not in built:
                built[n] = build_workload(
                    wspec,
                    n,
                    cfg.seed,
                    token_ids=token_ids,
                    server_context=context["tokens"] if context["source"] == "server" else None,
                )
        engine = await engine_info(client, cfg.url)
        ep = EndpointConfig(
            cfg.url, cfg.model, cfg.endpoint, cfg.ignore_eos, cfg.temperature, request_deadline=cfg.request_deadline
        )
        sweep_id = new_run_id("sweep-") if len(levels) > 1 else None
        emit(
            {
                "type": "start",
                "levels": [{"concurrency": c, "request_rate": _rate_json(r)} for c, r in levels],
                "model": cfg.model,
                "sweep_id": sweep_id,
                "goodput": dict(cfg.goodput),
                "context_limit": dict(context),
            }
        )
        for li, (conc, rate) in enumerate(levels):
            wl = built[cfg.prompts_for(conc)]
            specs = [dataclasses.replace(sp) for sp in wl.specs]
            n = len(specs)
            if wl.lengths == "token-ids":
                prompt_source = "token-ids"
            elif _fits_with_tokenize(wl) and (chat or wl.name == "text"):
                prompt_source = await calibrate_prompts(client, cfg.url, cfg.model, specs, cfg.seed, chat=chat)
            else:
                prompt_source = "estimate"
            workload = {**wl.record(), "sha256": prompt_set_sha256(specs)}
            params = {
                "endpoint": cfg.endpoint,
                "num_prompts": n,
                "input_len": _common({sp.prompt_len for sp in wl.specs}),
                "output_len": _common({sp.output_len for sp in wl.specs}),
                "max_concurrency": conc,
                "request_rate": _rate_json(rate),
                "burstiness": cfg.burstiness,
                "warmup": cfg.warmup,
                "ignore_eos": cfg.ignore_eos,
                "temperature": cfg.temperature,
                "seed": cfg.seed,
                "goodput": dict(cfg.goodput),
                "percentiles": list(cfg.percentiles),
                "read_timeout": cfg.read_timeout,
                "request_deadline": cfg.request_deadline,
                "dataset": wl.name if wl.name != "random" else ("random-token-ids" if token_ids else "synthetic-words"),
                "prompt_lengths": prompt_source,
                "tokenizer": cfg.model if prompt_source in ("token-ids", "server-tokenizer") else None,
                "workers": cfg.workers,
                "transport": "lean",
                "preconnect": cfg.preconnect,
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
                "workload": workload,
                "workload_lengths": length_distributions(specs),
                "workload_skipped": dict(wl.skipped),
                "context_limit": dict(context),
            }
            if meta_extra:
                meta.update({k: v for k, v in meta_extra.items() if k not in ("params", "client")})
                if isinstance(meta_extra.get("client"), Mapping):
                    meta["client"].update(meta_extra["client"])
            run_id = new_run_id()
            writer = RunWriter(run_id, meta, base=results_dir) if save else None
            samples: List[SampleRecord] = []
            prog = Progress(li, _pc(), n, cfg.goodput)

            def on_sample(
                s: SampleRecord,
                *,
                _w: Optional[RunWriter] = writer,
                _p: Progress = prog,
                _all: List[SampleRecord] = samples,
            ) -> None:
                s.pop("_events", None)
                _all.append(s)
                _p.add_sample(s)
                if _w is not None:
                    _w.append(s)
                if cfg.progress_samples:
                    emit(
                        {
                            "type": "sample",
                            "level": _p.level,
                            "index": s.get("index"),
                            "success": s["success"],
                            "error_type": s["error_type"],
                            "ttft": s["ttft"],
                            "latency": s["latency"],
                            "output_tokens": s["output_tokens"],
                        }
                    )

            def set_t0(t: float, _w: Optional[RunWriter] = writer) -> None:
                # handed to the writer thread: no file I/O here, the timed phase has begun
                if _w is not None:
                    _w.update_meta(bench_start=t, bench_start_wall=time.time())

            emit(
                {
                    "type": "level_start",
                    "level": li,
                    "run_id": run_id,
                    "concurrency": conc,
                    "request_rate": _rate_json(rate),
                    "num_prompts": n,
                    "warmup": cfg.warmup,
                    "run_dir": str(writer.dir) if writer is not None else None,
                }
            )
            finished = False
            duration = 0.0
            health: Dict[str, Any] = {}
            connect: Dict[str, Any] = {}
            counters: List[Optional[Snapshot]] = []

            async def counters_before(_c: List[Optional[Snapshot]] = counters) -> None:
                # after warmup, right before t0: the level's own traffic only
                _c.append(await read_counters(client, cfg.url) if cfg.server_counters else None)

            level = Level(
                specs, LoadShape(conc, rate, cfg.burstiness, cfg.seed, cfg.preconnect), prog, on_sample, emit, set_t0
            )
            try:
                if cfg.workers > 1:
                    duration, health, finished = await run_level_workers(cfg, ep, level, before_go=counters_before)
                else:
                    await warmup(client, ep, cfg.warmup, cfg, conc)
                    prepared = [prepare(client, ep, sp) for sp in specs]
                    if cfg.preconnect:
                        times = await client.warm(ep.url, preconnect_count(n, conc))
                        connect = connect_stats(times)
                        emit({"type": "connected", "level": li, **connect})
                    await counters_before()
                    opened = client.connections_opened
                    duration, health, finished = await run_level_inproc(client, ep, level, prepared)
                    connect["connections_opened_timed"] = client.connections_opened - opened
                if cfg.server_counters:
                    counters.append(await read_counters(client, cfg.url))
            finally:
                if not duration:
                    duration = _pc() - prog.t0
                health = {**health, **{k: v for k, v in connect.items()}}
                if cfg.server_counters:
                    figures = level_figures(*(counters + [None, None])[:2])
                    if writer is not None:
                        writer.update_meta(server_counters=figures)
                    else:
                        meta["server_counters"] = figures
                meta_now = writer.meta if writer else {**meta, "run_id": run_id}
                summary = summarize(samples, meta_now, duration=duration, partial=not finished, client=health)
                if writer is not None:
                    writer.write_summary(summary)
                    writer.close()
                summaries.append(summary)
                emit({"type": "level_done", "level": li, "run_id": run_id, "summary": finite(summary)})
        emit({"type": "done", "run_ids": [s["run_id"] for s in summaries]})
    return summaries


def _common(values: Set[int]) -> Optional[int]:
    """The one length every request has, or None when they differ."""
    return next(iter(values)) if len(values) == 1 else None


def _fits_with_tokenize(wl: Workload) -> bool:
    """Text prompts of a source whose lengths are targets (fitting them keeps nothing shared apart)."""
    return wl.name == "text" or (wl.name == "random" and not wl.params.get("prefix_len"))


def _rate_json(r: float) -> Union[float, str]:
    return "inf" if not math.isfinite(r) else r
