"""The simulated server's typed state: its configuration (from the engine's flags, fixed at start)
and what changes while it runs (phase, queues, KV cache, memory, GPU use). The server
(:class:`tunedeck.sim.engine.SimServer`) owns one :class:`ServerState` and hands it to its parts: the
HTTP API, the scheduler and the engine's start-up."""

from __future__ import annotations

import argparse
import os
import socket
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, TextIO

from tunedeck.sim import capmodel, perf, raynode, rendezvous
from tunedeck.sim.formats import Req
from tunedeck.sim.gpus import GpuConfig, ServerRecord, load_config
from tunedeck.sim.httpd import HttpServer
from tunedeck.sim.metrics import Metrics
from tunedeck.sim.prefix import BLOCK, PrefixCache
from tunedeck.sim.simlog import Log, ModelFacts, model_facts


@dataclass(frozen=True)
class SimConfig:
    """What the flags (and the simulated GPUs) fix for the server's life."""

    engine: str
    #: the parsed flags (each engine's start-up reads its own)
    args: argparse.Namespace
    pid: int
    speed: float
    load_s: float
    seed: int
    model: str
    served: str
    #: ranks on this node
    tp: int
    #: the first global rank on this node (SGLang multi-node)
    rank_base: int
    host: str
    port: int
    context_len: int
    facts: ModelFacts
    gpu_cfg: GpuConfig
    #: the simulated GPUs this server's ranks hold
    gpus: list[int]
    spec: perf.SpecConfig | None
    perf: perf.PerfConfig
    #: fixed timing (``--sim-fixed-ttft-ms`` / ``--sim-fixed-itl-ms``) and its delays in seconds
    fixed: bool
    fixed_ttft: float
    fixed_itl: float
    max_running: int
    prefill_budget: int
    decode_log_interval: int
    #: the prefix cache's block (None where the flags disable caching: SGLang
    #: --disable-radix-cache, vLLM --disable-prefix-caching)
    cache_block: int | None
    #: the prefill chunk size (None: prompts are not split)
    chunk_size: int | None
    #: vLLM's stat-line interval
    stats_interval: float


def sim_config(engine: str, args: argparse.Namespace) -> SimConfig:
    """The configuration of a server started with ``args`` (raises ``ConfigError`` on a bad gpus.json)."""
    a = args
    if engine == "sglang":
        model = a.model_path
        served = a.served_model_name or a.model_path
        world = max(1, a.tp_size) * max(1, a.pp_size)
        tp = rendezvous.local_ranks(a, world)
        rank_base = rendezvous.first_rank(a, world)
        host = a.host
        context_len = a.context_length or 131072
    else:
        model = a.model_tag or a.model
        served = (a.served_model_name or [model])[0]
        tp = max(1, a.tensor_parallel_size) * max(1, a.pipeline_parallel_size) * max(1, a.data_parallel_size)
        rank_base = 0
        host = a.host or "0.0.0.0"
        context_len = _parse_len(a.max_model_len) or 131072
    facts = model_facts(model, tp)
    gpu_cfg = load_config()
    serve = capmodel.serve_config_of(engine, a, tp, os.environ)
    fixed = a.sim_fixed_ttft_ms is not None or a.sim_fixed_itl_ms is not None
    # how it serves (the running-request cap, the prefill budget and chunk, the step-time model):
    # the capacity model's own derivation, so the model and the served behaviour agree
    if engine == "sglang":
        decode_log_interval = max(1, a.decode_log_interval)
        caching = not a.disable_radix_cache
        block = a.page_size if a.page_size and a.page_size > BLOCK else BLOCK
    else:
        decode_log_interval = 0
        caching = a.enable_prefix_caching is not False
        block = a.block_size or BLOCK
    return SimConfig(
        engine=engine,
        args=a,
        pid=os.getpid(),
        speed=a.sim_speed,
        load_s=a.sim_load_seconds,
        seed=a.sim_seed,
        model=model,
        served=served,
        tp=tp,
        rank_base=rank_base,
        host=host,
        port=a.port,
        context_len=context_len,
        facts=facts,
        gpu_cfg=gpu_cfg,
        gpus=_gpu_indices(engine, a, gpu_cfg, tp),
        spec=serve.perf.spec,
        perf=serve.perf,
        fixed=fixed,
        fixed_ttft=(a.sim_fixed_ttft_ms if a.sim_fixed_ttft_ms is not None else 50.0) / 1000.0 / a.sim_speed,
        fixed_itl=(a.sim_fixed_itl_ms if a.sim_fixed_itl_ms is not None else 20.0) / 1000.0 / a.sim_speed,
        max_running=serve.max_running,
        prefill_budget=serve.prefill_budget,
        decode_log_interval=decode_log_interval,
        cache_block=block if caching else None,
        chunk_size=serve.chunk_size,
        stats_interval=a.sim_stats_interval or float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10") or 10),
    )


def _gpu_indices(engine: str, a: argparse.Namespace, gpu_cfg: GpuConfig, tp: int) -> list[int]:
    visible = list(range(gpu_cfg.count))
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        try:
            visible = [int(x) for x in cvd.split(",") if x.strip() != ""]
        except ValueError:
            pass
    start = a.sim_gpu_start
    step = 1
    if engine == "sglang":
        start = start if start is not None else a.base_gpu_id
        step = max(1, a.gpu_id_step)
    start = start or 0
    idx = [start + i * step for i in range(tp)]
    return [visible[i] for i in idx if 0 <= i < len(visible)]


def _parse_len(v: object) -> int | None:
    if v is None:
        return None
    s = str(v).strip().lower()
    mult = 1
    if s.endswith("k"):
        mult, s = 1000, s[:-1]
    elif s.endswith("m"):
        mult, s = 1000000, s[:-1]
    try:
        return int(float(s) * mult)
    except ValueError:
        return None


class GpuUse:
    """What the server holds on its simulated GPUs, published for ``nvidia-smi`` (and the other Ray
    nodes' simulated workers)."""

    def __init__(self, cfg: SimConfig) -> None:
        self.engine = cfg.engine
        self.gpus = cfg.gpus
        self.rank_base = cfg.rank_base
        self.record = ServerRecord(cfg.engine, cfg.gpus)
        #: vLLM on Ray: the other Ray nodes (their simulated workers hold the bundles placed there)
        self.ray_nodes: raynode.WorkerNodes | None = None
        self.mem_used_gib = 0.0
        self.util = 0

    def publish(self, force: bool = True) -> None:
        used_mib = int(self.mem_used_gib * 1024)
        names = (
            [f"sglang::scheduler_TP{i + self.rank_base}" for i in range(len(self.gpus))]
            if self.engine == "sglang"
            else [f"VLLM::Worker_TP{i}" for i in range(len(self.gpus))]
        )
        per = {}
        for rank, g in enumerate(self.gpus):
            wob = (rank * 37) % 5
            u = used_mib + (wob if used_mib else 0)
            per[g] = {"used_mib": u, "util": self.util, "procs": [{"name": names[rank], "used_mib": u}] if u else []}
        self.record.publish(per, force=force)
        if self.ray_nodes is not None:
            self.ray_nodes.use(used_mib, self.util)

    def set_mem(self, gib: float, util: int | None = None, *, force: bool = True) -> None:
        """``force=False``: a step of a ramp (weight shards, graph captures), published at most every
        0.25 s; a start-up squeezed into a second makes dozens of steps, and the server's publisher
        writes the latest figures every 0.5 s whatever was skipped."""
        self.mem_used_gib = gib
        if util is not None:
            self.util = util
        self.publish(force=force)

    def close(self) -> None:
        """The server is gone: its record goes, the other Ray nodes are told."""
        self.record.remove()
        if self.ray_nodes is not None:
            self.ray_nodes.close()


@dataclass
class ServerState:
    """Everything the parts of one simulated server share."""

    cfg: SimConfig
    log: Log
    metrics: Metrics
    gpu: GpuUse
    #: the prefix cache (None where the flags disable it)
    cache: PrefixCache | None
    #: ``--sim-record-timestamps``: open for the server's lifetime
    rec_file: TextIO | None
    #: starting → warmup → ready → stopping
    phase: str = "starting"
    waiting: deque[Req] = field(default_factory=deque)
    running: list[Req] = field(default_factory=list)
    #: the SGLang request being prefilled chunk by chunk
    chunked: Req | None = None
    #: SGLang's ``/health`` while busy: answered after the scheduler's next step
    step_waiters: list[Callable[[], None]] = field(default_factory=list)
    #: the KV cache in tokens (0 until the start-up allocated it) and the memory of each part, GiB
    kv_tokens: int = 0
    kv_gib: float = 0.0
    weights_gib: float = 0.0
    graph_gib: float = 0.0
    #: SGLang's latest decode line's throughput, and the speculative steps since start
    #: (``/get_server_info``'s ``avg_spec_accept_length``, as SGLang's scheduler keeps it)
    last_gen_tput: float = 0.0
    accept_total_sum: int = 0
    accept_total_n: int = 0
    #: the listening socket and the HTTP server on it, once the start-up made them
    sock: socket.socket | None = None
    http: HttpServer | None = None

    def close_files(self) -> None:
        """The record of the server's GPU use, the Ray channel and the timestamps file."""
        self.gpu.close()
        if self.rec_file:
            self.rec_file.close()


def server_state(cfg: SimConfig) -> ServerState:
    """A starting server's state (opens ``--sim-record-timestamps``)."""
    a = cfg.args
    log = Log(cfg.engine, cfg.pid)
    log.rank_base = cfg.rank_base
    gpu = GpuUse(cfg)
    rec_file = None
    if a.sim_record_timestamps:
        rec_file = open(  # noqa: SIM115 - open for the server's lifetime, closed on its last flush
            a.sim_record_timestamps, "a", buffering=1, encoding="utf-8"
        )
    metrics = Metrics(cfg.engine, cfg.served, tp=cfg.tp, spec_positions=cfg.spec.num_steps if cfg.spec else 0)
    cache = PrefixCache(cfg.cache_block) if cfg.cache_block is not None else None
    metrics.prefix_caching = cache is not None
    metrics.gpu_memory_utilization = getattr(a, "gpu_memory_utilization", 0.92)
    return ServerState(cfg=cfg, log=log, metrics=metrics, gpu=gpu, cache=cache, rec_file=rec_file)
