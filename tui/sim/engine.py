"""``tunedeck sim sglang|vllm``: a simulated inference server, one real process.

Start-up prints the engine's real log lines in order (see serving-engines.md
§4.2/§4.3) spread over ``--sim-load-seconds``; the HTTP port is bound where the
engine binds it (vLLM: before loading, accepting only once ready; SGLang: after
CUDA-graph capture); then it serves the OpenAI API with continuous batching
driven by :mod:`tui.sim.perf`, streams SSE in the engine's exact format, keeps
Prometheus metrics and prints the runtime stat lines. Everything goes to
stdout, flushed per line, so a log tail sees progress live.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import random
import re
import signal
import socket
import sys
import time
import traceback
import uuid
from collections import deque
from typing import Any, Callable, Coroutine

from tui.sim import perf, raycluster, raynode, rendezvous
from tui.sim.api import Api, Req
from tui.sim.clock import FixedClock
from tui.sim.engine_args import (
    SGLANG_ALIASES,
    VLLM_BACKENDS,
    VLLM_SPEC_METHODS,
    VLLM_VERSION,
    help_search,
    preprocess_vllm_argv,
    sglang_parser,
    vllm_parser,
)
from tui.sim.gpus import ServerRecord, load_config, used_by_others
from tui.sim.httpd import HttpServer
from tui.sim.metrics import Metrics

VLLM_ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/docs/oauth2-redirect", "HEAD, GET"),
    ("/redoc", "HEAD, GET"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/invocations", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
]
VLLM_LOGO = [
    "",
    "       █     █     █▄   ▄█",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
]


# ====================================================================== helpers


def fmt_interval(s: float) -> str:
    s = max(0, int(s))
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_rate(n: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?it/s"
    r = n / elapsed
    return f"{r:5.2f}it/s" if r >= 1 else f"{1 / r:5.2f}s/it"


BAR_PARTS = " ▏▎▍▌▋▊▉"


def tqdm_bar(frac: float, width: int = 10) -> str:
    frac = min(1.0, max(0.0, frac))
    full, rem = divmod(int(frac * width * 8), 8)
    s = "█" * full
    if full < width:
        s += (BAR_PARTS[rem] if rem else " ") + " " * (width - full - 1)
    return s


def tqdm_frame(desc: str, n: int, total: int, elapsed: float, *, shards: bool = False) -> str:
    pct = 100.0 * n / total if total else 100.0
    remaining = "?" if n == 0 else fmt_interval(elapsed / n * (total - n))
    tail = f"{n}/{total} [{fmt_interval(elapsed)}<{remaining}, {fmt_rate(n, elapsed)}]"
    if shards:
        return f"{desc}: {pct:3.0f}% Completed | {tail}"
    prefix = f"{desc}: " if desc else ""
    return f"{prefix}{pct:3.0f}%|{tqdm_bar(n / total if total else 1.0)}| {tail}"


def sglang_capture_bs(max_bs: int) -> list[int]:
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 513, 16))
    return [b for b in bs if b <= max_bs]


def model_facts(model: str, tp: int) -> dict[str, Any]:
    """Guess size, architecture and KV footprint from the model name (sim only)."""
    low = model.lower()
    m = re.findall(r"(\d+(?:\.\d+)?)\s*b(?![a-z])", low)
    params = float(m[-1]) if m else 70.0
    mla = "deepseek" in low and ("v3" in low or "r1" in low or "v2" in low)
    if "deepseek" in low and not m:
        params = 671.0
    if re.search(r"fp8|int8|w8a8", low) or (mla and params > 600):
        bpp = 1.0
    elif re.search(r"int4|awq|gptq|w4a16|nvfp4|mxfp4", low):
        bpp = 0.5
    else:
        bpp = 2.0
    if mla:
        arch, mtype = "DeepseekV3ForCausalLM", "deepseek_v3"
        per_token = 61 * 576 * 2  # latent KV, replicated on every rank
        layers = 61
    else:
        if "qwen3" in low:
            arch, mtype = "Qwen3ForCausalLM", "qwen3"
        elif "qwen" in low:
            arch, mtype = "Qwen2ForCausalLM", "qwen2"
        elif "mistral" in low or "mixtral" in low:
            arch, mtype = "MistralForCausalLM", "mistral"
        else:
            arch, mtype = "LlamaForCausalLM", "llama"
        layers = 80 if params >= 60 else (48 if params >= 20 else 32)
        kv_heads = 8
        per_token = 2 * layers * max(1, kv_heads // max(1, tp)) * 128 * 2
    weights_gib = params * 1e9 * bpp / (1 << 30)
    return {
        "params_b": params,
        "bytes_per_param": bpp,
        "mla": mla,
        "arch": arch,
        "model_type": mtype,
        "kv_bytes_per_token": per_token,
        "weights_gib_total": weights_gib,
        "layers": layers,
        "shards": max(1, min(163, math.ceil(weights_gib / 4.6))),
    }


class Log:
    """Writes the engine's log prefixes to stdout, one flush per write."""

    def __init__(self, engine: str, pid: int) -> None:
        self.engine = engine
        self.pid = pid
        self.ms = os.environ.get("SGLANG_LOG_MS", "") not in ("", "0")
        self.out = sys.stdout
        #: the first global rank on this node: a second node's schedulers are TP8..TP15 at tp 16
        self.rank_base = 0

    def raw(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass

    def ts(self) -> str:
        t = time.time()
        s = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        return f"{s}.{int(t * 1000) % 1000:03d}" if self.ms else s

    def sg(self, msg: str, rank: int | None = None) -> None:
        r = f" TP{rank + self.rank_base}" if rank is not None else ""
        self.raw(f"[{self.ts()}{r}] {msg}\n")

    def vl(
        self,
        msg: str,
        *,
        proc: str = "APIServer",
        pid: int | None = None,
        level: str = "INFO",
        where: str = "api_server.py:1",
        ip: str | None = None,
    ) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        at = f", ip={ip}" if ip else ""  # a Ray actor's line, as Ray prefixes it on the driver
        self.raw(f"({proc} pid={pid or self.pid}{at}) {level} {stamp} [{where}] {msg}\n")

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        pad = f"{level}:".ljust(9)
        if self.engine == "sglang":
            self.raw(f"[{self.ts()}] {pad} {msg}\n")
        else:
            self.raw(f"(APIServer pid={self.pid}) {pad} {msg}\n")


class Fatal(Exception):
    """Start-up ends like a real failure: the text is already printed; ``code`` is the exit."""

    def __init__(self, code: int, kill: bool = False) -> None:
        super().__init__(code)
        self.code = code
        self.kill = kill


# ====================================================================== the simulator


class Sim(Api):
    def __init__(self, engine: str, args: Any) -> None:
        self.e = engine
        self.a = args
        self.pid = os.getpid()
        self.log = Log(engine, self.pid)
        self.speed = args.sim_speed
        self.load_s = args.sim_load_seconds
        self.seed = args.sim_seed
        if engine == "sglang":
            self.model = args.model_path
            self.served = args.served_model_name or args.model_path
            self.tp = rendezvous.local_ranks(args, max(1, args.tp_size) * max(1, args.pp_size))
            self.log.rank_base = rendezvous.first_rank(args, max(1, args.tp_size) * max(1, args.pp_size))
            self.host = args.host
            self.port = args.port
            self.context_len = args.context_length or 131072
        else:
            self.model = args.model_tag or args.model
            self.served = (args.served_model_name or [self.model])[0]
            self.tp = (
                max(1, args.tensor_parallel_size)
                * max(1, args.pipeline_parallel_size)
                * max(1, args.data_parallel_size)
            )
            self.host = args.host or "0.0.0.0"
            self.port = args.port
            self.context_len = _parse_len(args.max_model_len) or 131072
        self.facts = model_facts(self.model, self.tp)
        self.gpu_cfg = load_config()
        self.gpus = self._gpu_indices()
        self.record = ServerRecord(engine, self.gpus)
        #: vLLM on Ray: the other Ray nodes (their simulated workers hold the bundles placed there)
        self.ray_nodes: raynode.WorkerNodes | None = None
        #: (pid, ip, rank) of each Ray worker on another node
        self.ray_workers: list[tuple[int, str, int]] = []
        self.spec = self._spec()
        self.perf = self._perf_config()
        self.phase = "starting"
        self.http: HttpServer | None = None
        #: the tasks that live as long as the server (scheduler, metrics publisher, …): referenced
        #: here, and a crash of one ends the server loudly instead of leaving it hung
        self._background_tasks: set[asyncio.Task[None]] = set()
        self.sock: socket.socket | None = None
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.wake: asyncio.Event | None = None
        self.stop_event: asyncio.Event | None = None
        self.step_waiters: list[Callable[[], None]] = []
        self.mem_used_gib = 0.0
        self.util = 0
        self.kv_tokens = 0
        self.kv_gib = 0.0
        self.weights_gib = 0.0
        self.graph_gib = 0.0
        self.steps = 0
        self.decode_steps_since_log = 0
        self.gen_since_log = 0
        self.log_t = 0.0
        self.prompt_since_log = 0
        self.accept_sum = 0
        self.accept_n = 0
        self.last_gen_tput = 0.0
        self.rec_file = None
        if args.sim_record_timestamps:
            self.rec_file = open(args.sim_record_timestamps, "a", buffering=1, encoding="utf-8")
        self.fixed = args.sim_fixed_ttft_ms is not None or args.sim_fixed_itl_ms is not None
        if engine == "sglang":
            self.max_running = args.max_running_requests or (48 if self.spec else 2048)
            self.prefill_budget = args.max_prefill_tokens or 16384
            self.decode_log_interval = max(1, args.decode_log_interval)
        else:
            self.max_running = args.max_num_seqs or 1024
            self.prefill_budget = args.max_num_batched_tokens or 8192
            self.decode_log_interval = 0
        self.metrics = Metrics(engine, self.served, tp=self.tp, spec_positions=self.spec.num_steps if self.spec else 0)
        self.metrics.gpu_memory_utilization = getattr(args, "gpu_memory_utilization", 0.92)
        self.stats_interval = args.sim_stats_interval or float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10") or 10)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.clock: FixedClock | None = None
        self.fixed_ttft = (args.sim_fixed_ttft_ms if args.sim_fixed_ttft_ms is not None else 50.0) / 1000.0 / self.speed
        self.fixed_itl = (args.sim_fixed_itl_ms if args.sim_fixed_itl_ms is not None else 20.0) / 1000.0 / self.speed
        self.init_api()

    # ------------------------------------------------------------------ config
    def _gpu_indices(self) -> list[int]:
        visible = list(range(self.gpu_cfg.count))
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        if cvd:
            try:
                visible = [int(x) for x in cvd.split(",") if x.strip() != ""]
            except ValueError:
                pass
        start = self.a.sim_gpu_start
        step = 1
        if self.e == "sglang":
            start = start if start is not None else self.a.base_gpu_id
            step = max(1, self.a.gpu_id_step)
        start = start or 0
        idx = [start + i * step for i in range(self.tp)]
        return [visible[i] for i in idx if 0 <= i < len(visible)]

    def _spec(self) -> perf.SpecConfig | None:
        a = self.a
        if self.e == "sglang":
            if not a.speculative_algorithm:
                return None
            steps = a.speculative_num_steps or 3
            topk = a.speculative_eagle_topk or 1
            draft = a.speculative_num_draft_tokens or (steps + 1 if topk == 1 else steps * topk)
            if topk == 1:
                draft = steps + 1
            return perf.SpecConfig(a.speculative_algorithm.upper(), steps, topk, draft)
        sc = a.speculative_config
        if not sc:
            return None
        method = str(sc.get("method") or ("draft_model" if sc.get("model") else "ngram"))
        n = int(sc.get("num_speculative_tokens") or 1)
        return perf.SpecConfig(method.upper(), n, 1, n + 1)

    def _perf_config(self) -> perf.PerfConfig:
        a = self.a
        nccl = perf.PerfConfig.nccl_from_env(os.environ)
        if self.e == "sglang":
            attn = a.attention_backend
            attn = SGLANG_ALIASES.get(attn, attn) if attn else None
            max_bs = a.cuda_graph_max_bs_decode or 512
            eager = a.disable_cuda_graph or a.cuda_graph_backend_decode == "disabled"
            return perf.PerfConfig(
                "sglang",
                self.tp,
                attn,
                a.decode_attention_backend,
                a.prefill_attention_backend,
                max(1, a.num_continuous_decode_steps),
                a.disable_custom_all_reduce,
                nccl,
                self.spec,
                max_bs,
                eager,
                self.seed,
            )
        attn = (a.attention_backend or "").upper() or None
        if attn is None and a.attention_config and a.attention_config.get("backend"):
            attn = str(a.attention_config["backend"]).upper()
        cc = a.compilation_config or {}
        eager = a.enforce_eager or str(cc.get("cudagraph_mode", "")).upper() == "NONE"
        max_bs = a.max_cudagraph_capture_size or 512
        return perf.PerfConfig(
            "vllm",
            self.tp,
            attn,
            None,
            None,
            1,
            a.disable_custom_all_reduce,
            nccl,
            self.spec,
            max_bs,
            eager,
            self.seed,
        )

    # ------------------------------------------------------------------ time
    async def at(self, frac: float) -> None:
        loop = asyncio.get_running_loop()
        target = self.t0 + frac * self.load_s / self.speed
        delay = target - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    def sim_elapsed(self, f0: float, f1: float) -> float:
        return float(max(0.01, (f1 - f0) * self.load_s))

    # ------------------------------------------------------------------ gpu state
    def publish(self, force: bool = True) -> None:
        used_mib = int(self.mem_used_gib * 1024)
        names = (
            [f"sglang::scheduler_TP{i + self.log.rank_base}" for i in range(len(self.gpus))]
            if self.e == "sglang"
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

    def set_mem(self, gib: float, util: int | None = None) -> None:
        self.mem_used_gib = gib
        if util is not None:
            self.util = util
        self.publish()

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        loop = self.loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        self.wake = asyncio.Event()
        self.stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop_event.set)
            except (NotImplementedError, RuntimeError):
                pass
        start = asyncio.create_task(self.startup())
        stopper = asyncio.create_task(self.stop_event.wait())
        code = 0
        try:
            done, _ = await asyncio.wait({start, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if start in done:
                exc = start.exception()
                if isinstance(exc, Fatal):
                    return self._die(exc)
                if exc is not None:
                    raise exc
                await stopper
            else:
                start.cancel()
                try:
                    await start
                except (asyncio.CancelledError, Fatal):
                    pass
            await self.shutdown()
        finally:
            self.record.remove()
            if self.ray_nodes is not None:
                self.ray_nodes.close()
            if self.rec_file:
                self.rec_file.close()
        return code

    def background(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` for the life of the server (see :attr:`_background_tasks`)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background_tasks.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background_tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, Fatal):  # already said in the engine's words
            self._die(exc)
            return
        sys.stderr.write(f"simulator task {task.get_name()} crashed:\n")
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        self._die(Fatal(1, kill=True))

    def _die(self, f: Fatal) -> int:
        self.record.remove()
        if self.ray_nodes is not None:
            self.ray_nodes.close()
        if self.rec_file:
            self.rec_file.close()
        if self.sock:
            self.sock.close()
        if f.kill:
            try:
                sys.stdout.flush()
            except Exception:
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return f.code

    async def shutdown(self) -> None:
        self.phase = "stopping"
        if self.http is not None:
            if self.e == "vllm":
                self.log.vl("Shutting down FastAPI HTTP server.", where="launcher.py:110")
            self.log.uvicorn("Shutting down")
            for r in list(self.running) + list(self.waiting):
                self._abort(r)
            await self.http.close()
            self.log.uvicorn("Waiting for application shutdown.")
            self.log.uvicorn("Application shutdown complete.")
            self.log.uvicorn(f"Finished server process [{self.pid}]")
        elif self.sock is not None:
            self.sock.close()
        self.set_mem(0.0, 0)

    # ------------------------------------------------------------------ start-up
    async def startup(self) -> None:
        if self.e == "sglang":
            await self.startup_sglang()
        else:
            await self.startup_vllm()
        self.phase = "warmup"
        self.background(self.publisher(), "publisher")
        self.background(self.scheduler(), "scheduler")
        if self.e == "vllm" and not self.a.disable_log_stats:
            self.background(self.vllm_stats(), "vllm-stats")
        if self.e == "sglang" and not self.a.skip_server_warmup:
            await self.sglang_warmup()
        self.phase = "ready"
        gc.collect()
        gc.freeze()  # as vLLM does once started: the start-up heap stays out of every later collection
        if self.e == "sglang":
            self.log.sg("The server is fired up and ready to roll!")
        await asyncio.Event().wait()  # until cancelled by shutdown

    def _ranks(self) -> list[int]:
        r = list(range(len(self.gpus) or 1))
        random.Random(self.seed + self.steps).shuffle(r)
        self.steps += 1
        return r

    async def startup_sglang(self) -> None:
        a = self.a
        L = self.log
        total = self.gpu_cfg.memory_total_mib / 1024.0
        f = self.facts
        self.weights_gib = f["weights_gib_total"] / self.tp
        if f["mla"]:
            self.weights_gib = f["weights_gib_total"] / self.tp
        mfs = a.mem_fraction_static or (0.88 if total > 100 else 0.85)
        baseline = 1.14
        ctx = 0.52
        other = used_by_others(self.gpus, self.pid) / 1024.0  # memory other servers hold on our GPUs
        args_d = {k: v for k, v in vars(a).items() if not k.startswith("sim_")}
        L.sg(f"server_args={args_d!r}")
        if not a.attention_backend:
            L.sg(f"Attention backend not specified. Use {'fa3'} backend by default.")
        if self.spec and not a.max_running_requests:
            L.sg(
                "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
            )
        if not self.gpus or len(self.gpus) < self.tp:
            L.sg(
                "Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: CUDA error: invalid device ordinal\n",
                rank=len(self.gpus),
            )
            L.sg("Received sigquit from a child process. It usually means the child failed.")
            raise Fatal(137, kill=True)
        self.set_mem(ctx, 0)
        await self.at(0.02)
        for r in self._ranks():
            L.sg("Init parallel begin.", rank=r)
        await rendezvous.join(self)
        await self.at(0.05)
        if a.sim_fault == "nccl":
            self.sglang_nccl_failure()
        for r in self._ranks():
            L.sg(f"Init parallel ends. elapsed={self.sim_elapsed(0.02, 0.05):.2f} s", rank=r)
            L.sg(f"Memory baseline taken. mem usage={baseline:.2f} GB", rank=r)
        self.set_mem(ctx + baseline)
        await self.at(0.07)
        avail0 = total - baseline - ctx - other
        for r in self._ranks():
            L.sg(f"Load weight begin. avail mem={avail0 + 0.01 * (r % 2):.2f} GB", rank=r)
        if self.weights_gib > avail0:
            self.sglang_oom(f"Tried to allocate {min(self.weights_gib, 20):.2f} GiB", during="load_model")
        # weight shards bar (TP0), frames joined by \r, no trailing newline per frame
        n_sh = f["shards"]
        f0, f1 = 0.08, 0.50
        L.raw("\r" + tqdm_frame("Loading safetensors checkpoint shards", 0, n_sh, 0, shards=True))
        for i in range(1, n_sh + 1):
            await self.at(f0 + (f1 - f0) * i / n_sh)
            el = self.sim_elapsed(f0, f0 + (f1 - f0) * i / n_sh)
            L.raw("\r" + tqdm_frame("Loading safetensors checkpoint shards", i, n_sh, el, shards=True))
            self.set_mem(ctx + baseline + self.weights_gib * i / n_sh, 3)
        L.raw(
            "\r"
            + tqdm_frame("Loading safetensors checkpoint shards", n_sh, n_sh, self.sim_elapsed(f0, f1), shards=True)
            + "\n"
        )
        await self.at(0.52)
        avail1 = avail0 - self.weights_gib
        quant = ", quant=fp8" if f["bytes_per_param"] == 1.0 else ""
        for r in self._ranks():
            L.sg(
                f"Load weight end. elapsed={self.sim_elapsed(0.07, 0.52):.2f} s, type={f['arch']}{quant}, "
                f"avail mem={avail1:.2f} GB, mem usage={self.weights_gib:.2f} GB.",
                rank=r,
            )
        await self.at(0.55)
        kv = total * mfs - self.weights_gib - baseline - other
        if a.sim_fault == "oom":
            self.sglang_oom(f"Tried to allocate {max(kv, 1.0) / 2:.2f} GiB", during="kv")
        if kv < 1.0:
            for r in self._ranks():
                L.sg(
                    "Scheduler hit an exception: Traceback (most recent call last):\n"
                    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1712, in init_memory_pool\n'
                    "    raise RuntimeError(\n"
                    f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={mfs}\n",
                    rank=r,
                )
            L.sg("Received sigquit from a child process. It usually means the child failed.")
            raise Fatal(137, kill=True)
        self.kv_gib = kv
        self.kv_tokens = int(kv * (1 << 30) / f["kv_bytes_per_token"])
        if a.max_total_tokens:
            self.kv_tokens = min(self.kv_tokens, a.max_total_tokens)
        avail2 = avail1 - kv
        dtype = "torch.float8_e4m3fn" if a.kv_cache_dtype.startswith("fp8") else "torch.bfloat16"
        for r in self._ranks():
            if f["mla"]:
                L.sg(f"KV Cache is allocated. dtype: {dtype}, #tokens: {self.kv_tokens}, KV size: {kv:.2f} GB", rank=r)
            else:
                L.sg(
                    f"KV Cache is allocated. dtype: {dtype}, #tokens: {self.kv_tokens}, K size: {kv / 2:.2f} GB, V size: {kv / 2:.2f} GB",
                    rank=r,
                )
            L.sg(f"Memory pool end. avail mem={avail2:.2f} GB", rank=r)
        self.set_mem(ctx + baseline + self.weights_gib + kv, 0)
        self.metrics.max_total_tokens = self.kv_tokens
        self.metrics.kv_cache_gb = round(kv, 2)
        # CUDA graphs
        await self.at(0.58)
        self.graph_gib = 0.0
        if not self.perf.enforce_eager:
            max_bs = self.perf.cuda_graph_max_bs
            bs_list = sglang_capture_bs(max_bs)
            target = "target verify" if self.spec else "target decode"
            k = self.spec.draft_tokens if self.spec else 1
            for r in self._ranks():
                L.sg(
                    f"Capture {target} CUDA graph begin. backend=full, num_tokens_per_req={k}, avail mem={avail2:.2f} GB",
                    rank=r,
                )
            f0, f1 = 0.60, 0.90
            n = len(bs_list)
            graph_total = 0.82
            L.raw("\r" + tqdm_frame("", 0, n, 0))
            hang_at = n // 2 if a.sim_fault == "hang" else None
            for i, bs in enumerate(reversed(bs_list)):
                am = avail2 - graph_total * i / n
                desc = f"Capturing batches (bs={bs} avail_mem={am:.2f} GB)"
                el = self.sim_elapsed(f0, f0 + (f1 - f0) * i / n)
                L.raw("\r" + tqdm_frame(desc, i, n, el))
                if hang_at is not None and i == hang_at:
                    self.set_mem(ctx + baseline + self.weights_gib + kv + graph_total * i / n, 35)
                    await asyncio.Event().wait()  # stuck in capture forever
                await self.at(f0 + (f1 - f0) * (i + 1) / n)
                L.raw("\r" + tqdm_frame(desc, i + 1, n, self.sim_elapsed(f0, f0 + (f1 - f0) * (i + 1) / n)))
                self.set_mem(ctx + baseline + self.weights_gib + kv + graph_total * (i + 1) / n, 40)
            L.raw("\r" + tqdm_frame(desc, n, n, self.sim_elapsed(f0, f1)) + "\n")
            self.graph_gib = graph_total
            await self.at(0.91)
            for r in self._ranks():
                L.sg(
                    f"Capture {target} CUDA graph end. bs={bs_list}, elapsed={self.sim_elapsed(0.58, 0.91):.2f} s, "
                    f"mem usage={graph_total:.2f} GB, avail mem={avail2 - graph_total:.2f} GB.",
                    rank=r,
                )
        await self.at(0.92)
        chunked = a.chunked_prefill_size if a.chunked_prefill_size is not None else 8192
        L.sg(
            f"max_total_num_tokens={self.kv_tokens}, chunked_prefill_size={chunked}, max_prefill_tokens={a.max_prefill_tokens}, "
            f"max_running_requests={self.max_running}, context_len={self.context_len}, available_gpu_mem={avail2 - self.graph_gib:.2f} GB",
            rank=0,
        )
        self.set_mem(ctx + baseline + self.weights_gib + kv + self.graph_gib, 0)
        await self.at(0.94)
        await rendezvous.wait_headless(self)
        L.uvicorn(f"Started server process [{self.pid}]")
        L.uvicorn("Waiting for application startup.")
        L.uvicorn("Application startup complete.")
        try:
            if a.sim_fault == "port":
                raise OSError(98, "address already in use")
            self.sock = bind_socket(self.host, self.port)
        except OSError as e:
            L.uvicorn(
                f"[Errno {e.errno}] error while attempting to bind on address ('{self.host}', {self.port}): "
                f"{(e.strerror or str(e)).lower()}",
                level="ERROR",
            )
            L.uvicorn("Waiting for application shutdown.")
            L.uvicorn("Application shutdown complete.")
            raise Fatal(1) from None
        self.http = HttpServer(self.handle, self.access_log)
        await self.http.start(self.sock)
        shown = self.host if self.host not in ("", "::") else "0.0.0.0"
        L.uvicorn(f"Uvicorn running on http://{shown}:{self.sock.getsockname()[1]} (Press CTRL+C to quit)")
        self.metrics.startup = {"total": round(self.load_s * 0.94, 2)}

    def sglang_nccl_failure(self) -> None:
        L = self.log
        for r in self._ranks():
            L.sg(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
                "    scheduler = Scheduler(\n"
                "                ^^^^^^^^^^\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/device_communicators/pynccl.py", line 113, in __init__\n'
                "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(\n"
                "                            ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 374, in NCCL_CHECK\n'
                '    raise RuntimeError(f"NCCL error: {error_str}")\n'
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n",
                rank=r,
            )
        L.sg("Received sigquit from a child process. It usually means the child failed.")
        raise Fatal(137, kill=True)

    def sglang_oom(self, tried: str, during: str) -> None:
        L = self.log
        total = self.gpu_cfg.memory_total_mib / 1024.0
        where = (
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/mem_cache/memory_pool.py", line 612, in _create_buffers\n'
            "    torch.zeros(\n"
            if during == "kv"
            else '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_loader/loader.py", line 584, in load_model\n'
            "    model = _initialize_model(\n"
        )
        for r in self._ranks():
            L.sg(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
                "    scheduler = Scheduler(\n"
                "                ^^^^^^^^^^\n"
                + where
                + f"torch.OutOfMemoryError: CUDA out of memory. {tried}. GPU {r} has a total capacity of {total:.2f} GiB "
                f"of which 1.06 GiB is free. Including non-PyTorch memory, this process has {total - 1.06:.2f} GiB memory in use. "
                f"Of the allocated memory {total - 2.5:.2f} GiB is allocated by PyTorch, and 412.31 MiB is reserved by PyTorch but "
                "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
                rank=r,
            )
        L.sg("Received sigquit from a child process. It usually means the child failed.")
        raise Fatal(137, kill=True)

    async def sglang_warmup(self) -> None:
        peer = f"127.0.0.1:{random.Random(self.seed).randint(33000, 60000)}"
        await self.at(0.96)
        self.log.uvicorn(f'{peer} - "GET /model_info HTTP/1.1" 200 OK')
        req = self.new_req("generate", stream=False, prompt_tokens=7, max_tokens=8, ignore_eos=True)
        req.internal = True
        req.done = asyncio.get_running_loop().create_future()
        self.submit(req)
        await req.done
        self.log.uvicorn(
            f'{peer.rsplit(":", 1)[0]}:{int(peer.rsplit(":", 1)[1]) + 2} - "POST /generate HTTP/1.1" 200 OK'
        )
        await self.at(1.0)

    # ------------------------------------------------------------------ vLLM start-up
    def w(self, rank: int) -> int:
        return self.pid + 2 + rank

    async def startup_vllm(self) -> None:
        a = self.a
        L = self.log
        ec = self.pid + 1
        total = self.gpu_cfg.memory_total_mib / 1024.0
        f = self.facts
        for line in VLLM_LOGO:
            L.vl(line.format(version=VLLM_VERSION, model=self.model), where="utils.py:299")
        defaults = vllm_parser().parse_args([])
        nd: dict[str, Any] = {}
        if a.model_tag:
            nd["model_tag"] = a.model_tag
        for k, v in vars(a).items():
            if k.startswith("sim_") or k == "model_tag":
                continue
            if getattr(defaults, k, None) != v:
                nd[k] = v
        if a.model_tag:
            nd["model"] = a.model_tag
        L.vl(f"non-default args: {nd!r}", where="utils.py:233")
        if "VLLM_ATTENTION_BACKEND" in os.environ:
            L.vl(
                "Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND",
                level="WARNING",
                where="envs.py:1744",
            )
        # the API server binds its socket before the engine starts
        try:
            if a.sim_fault == "port":
                raise OSError(98, "Address already in use")
            self.sock = bind_socket(self.host, self.port)
        except OSError as e:
            tb = [
                "Traceback (most recent call last):",
                '  File "/usr/local/bin/vllm", line 10, in <module>',
                "    sys.exit(main())",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 1963, in run_server',
                "    sock = create_server_socket(listen_address)",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 1891, in create_server_socket',
                "    sock.bind(addr)",
                f"OSError: [Errno {e.errno}] {e.strerror or 'Address already in use'}",
            ]
            for line in tb:
                L.raw(f"(APIServer pid={self.pid}) {line}\n")
            raise Fatal(1) from None
        self.sock.listen(1024)  # connections queue (probes hang) until the app starts
        await self.at(0.01)
        L.vl(f"Resolved architecture: {f['arch']}", where="model.py:549")
        L.vl(f"Using max model len {self.context_len}", where="model.py:1678")
        L.vl(f"Chunked prefill is enabled with max_num_batched_tokens={self.prefill_budget}.", where="scheduler.py:252")
        L.vl("Asynchronous scheduling is enabled.", where="vllm.py:790")
        await self.at(0.03)
        spec_s = "None" if not self.spec else repr(a.speculative_config)
        L.vl(
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={self.model!r}, speculative_config={spec_s}, "
            f"tokenizer={self.model!r}, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code={a.trust_remote_code}, "
            f"dtype=torch.bfloat16, max_seq_len={self.context_len}, download_dir=None, load_format=auto, "
            f"tensor_parallel_size={a.tensor_parallel_size}, pipeline_parallel_size={a.pipeline_parallel_size}, "
            f"data_parallel_size={a.data_parallel_size}, disable_custom_all_reduce={a.disable_custom_all_reduce}, "
            f"quantization={a.quantization}, enforce_eager={a.enforce_eager}, kv_cache_dtype={a.kv_cache_dtype}, "
            f"device_config=cuda, seed={a.seed}, served_model_name={self.served}, enable_prefix_caching=True, "
            f"enable_chunked_prefill=True, pooler_config=None, compilation_config={json.dumps(a.compilation_config or {})}",
            proc="EngineCore",
            pid=ec,
            where="core.py:105",
        )
        if a.distributed_executor_backend == "ray":
            await self.ray_placement(ec)
        elif not self.gpus or len(self.gpus) < self.tp:
            L.vl(
                f"ValueError: World size ({self.tp}) is larger than the number of available GPUs ({len(self.gpus)}) in this node.",
                proc="EngineCore",
                pid=ec,
                level="ERROR",
                where="core.py:866",
            )
            self._vllm_engine_failed(ec)
        self.set_mem(0.52, 0)
        await self.at(0.05)
        other = used_by_others(self.gpus, self.pid) / 1024.0
        free = total - other - 0.52
        if free < total * a.gpu_memory_utilization:
            L.vl(
                f"ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup is less than desired GPU "
                f"memory utilization ({a.gpu_memory_utilization}, {total * a.gpu_memory_utilization:.2f} GiB). Decrease GPU memory "
                "utilization or reduce GPU memory used by other processes.",
                proc="Worker_TP0",
                pid=self.w(0),
                level="ERROR",
                where="multiproc_executor.py:759",
            )
            self._vllm_engine_failed(ec)
        port = 30000 + (self.pid % 20000)
        for r in self._ranks():
            L.vl(
                f"world_size={self.tp} rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:{port} backend=nccl",
                proc="Worker",
                pid=self.w(r),
                where="parallel_state.py:1400",
            )
        if a.sim_fault == "nccl":
            for r in self._ranks()[:2]:
                for line in [
                    "WorkerProc failed to start.",
                    "Traceback (most recent call last):",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 733, in worker_main',
                    "    worker = WorkerProc(*args, **kwargs)",
                    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", line 257, in NCCL_CHECK',
                    '    raise RuntimeError(f"NCCL error: {error_str}")',
                    "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                ]:
                    L.vl(line, proc=f"Worker_TP{r}", pid=self.w(r), level="ERROR", where="multiproc_executor.py:759")
            self._vllm_engine_failed(ec)
        L.vl("vLLM is using nccl==2.28.3", proc="Worker", pid=self.w(0), where="pynccl.py:111")
        for r in range(len(self.gpus)):
            L.vl(
                f"rank {r} in world size {self.tp} is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank {r}, EP rank N/A, EPLB rank N/A",
                proc="Worker",
                pid=self.w(r),
                where="parallel_state.py:1716",
            )
        self.set_mem(1.1, 0)
        await self.at(0.07)
        t0 = "Worker_TP0"
        L.vl("Loading model from scratch...", proc=t0, pid=self.w(0), where="gpu_model_runner.py:4735")
        forced = self.perf.attention_backend
        mla = f["mla"]
        if forced:
            is_mla = "MLA" in forced
            if is_mla != mla:
                reason = "['MLA not supported']" if not mla else "['non-MLA not supported']"
                L.vl(
                    f"ValueError: Selected backend AttentionBackendEnum.{forced} is not valid for this configuration. Reason: {reason}",
                    proc=t0,
                    pid=self.w(0),
                    level="ERROR",
                    where="multiproc_executor.py:759",
                )
                self._vllm_engine_failed(ec)
            L.vl(f"Using AttentionBackendEnum.{forced} backend.", proc=t0, pid=self.w(0), where="cuda.py:416")
        elif mla:
            L.vl(
                "Using FLASH_ATTN_MLA attention backend out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA'].",
                proc=t0,
                pid=self.w(0),
                where="cuda.py:334",
            )
        else:
            L.vl(
                "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].",
                proc=t0,
                pid=self.w(0),
                where="cuda.py:334",
            )
        self.weights_gib = f["weights_gib_total"] / self.tp
        n_sh = f["shards"]
        f0, f1 = 0.08, 0.40
        label = "Loading safetensors checkpoint shards"
        L.raw(tqdm_frame(label, 0, n_sh, 0, shards=True) + "\n")
        for i in range(1, n_sh + 1):
            await self.at(f0 + (f1 - f0) * i / n_sh)
            L.raw(tqdm_frame(label, i, n_sh, self.sim_elapsed(f0, f0 + (f1 - f0) * i / n_sh), shards=True) + "\n")
            self.set_mem(1.1 + self.weights_gib * i / n_sh, 3)
        L.raw(tqdm_frame(label, n_sh, n_sh, self.sim_elapsed(f0, f1), shards=True) + "\n")
        L.raw(f"({t0} pid={self.w(0)}) \n")
        L.vl(
            f"Loading weights took {self.sim_elapsed(f0, f1):.2f} seconds",
            proc=t0,
            pid=self.w(0),
            where="default_loader.py:384",
        )
        for r in self._ranks():
            L.vl(
                f"Model loading took {self.weights_gib:.2f} GiB memory and {self.sim_elapsed(0.07, 0.41):.6f} seconds",
                proc=f"Worker_TP{r}",
                pid=self.w(r),
                where="gpu_model_runner.py:4820",
            )
        for pid, ip, _ in self.ray_workers:
            L.vl(
                f"Model loading took {self.weights_gib:.2f} GiB memory and {self.sim_elapsed(0.07, 0.41):.6f} seconds",
                proc="RayWorkerWrapper",
                pid=pid,
                ip=ip,
                where="gpu_model_runner.py:4820",
            )
        compile_s = 0.0
        if not self.perf.enforce_eager:
            await self.at(0.45)
            L.vl(
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{uuid.uuid5(uuid.NAMESPACE_DNS, self.model).hex[:10]}/rank_0_0/backbone for vLLM's torch.compile",
                proc=t0,
                pid=self.w(0),
                where="backends.py:1051",
            )
            L.vl(
                f"Dynamo bytecode transform time: {self.sim_elapsed(0.41, 0.45):.2f} s",
                proc=t0,
                pid=self.w(0),
                where="backends.py:1111",
            )
            await self.at(0.58)
            L.vl(
                f"Compiling a graph for compile range (1, {self.prefill_budget}) takes {self.sim_elapsed(0.45, 0.58):.2f} s",
                proc=t0,
                pid=self.w(0),
                where="backends.py:390",
            )
            compile_s = self.sim_elapsed(0.41, 0.60)
            await self.at(0.60)
            L.vl(f"torch.compile took {compile_s:.2f} s in total", proc=t0, pid=self.w(0), where="monitor.py:48")
        await self.at(0.62)
        gmu = a.gpu_memory_utilization
        activation = 1.6
        kv = total * gmu - self.weights_gib - activation - 0.6
        if a.sim_fault == "oom":
            L.vl(
                f"Available KV cache memory: {max(kv, 0.5):.2f} GiB", proc=t0, pid=self.w(0), where="gpu_worker.py:436"
            )
            for r in self._ranks()[:1]:
                for line in [
                    "WorkerProc hit an exception.",
                    "Traceback (most recent call last):",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 6112, in _allocate_kv_cache_tensors',
                    "    tensor = torch.zeros(",
                    "             ^^^^^^^^^^^^",
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {max(kv, 1.0) / 4:.2f} GiB. GPU {r} has a total capacity of "
                    f"{total:.2f} GiB of which 812.00 MiB is free. Including non-PyTorch memory, this process has {total - 0.8:.2f} GiB memory in use. "
                    f"Of the allocated memory {total - 2.1:.2f} GiB is allocated by PyTorch, and 168.25 MiB is reserved by PyTorch but unallocated. "
                    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
                    "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
                ]:
                    L.vl(line, proc=f"Worker_TP{r}", pid=self.w(r), level="ERROR", where="multiproc_executor.py:759")
            self._vllm_engine_failed(ec)
        if kv <= 0:
            L.vl(f"Available KV cache memory: {kv:.2f} GiB", proc=t0, pid=self.w(0), where="gpu_worker.py:436")
            L.vl("EngineCore failed to start.", proc="EngineCore", pid=ec, level="ERROR", where="core.py:866")
            L.vl(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. "
                "See https://docs.vllm.ai/en/latest/configuration/conserving_memory.html for more details.",
                proc="EngineCore",
                pid=ec,
                level="ERROR",
                where="core.py:866",
            )
            self._vllm_engine_failed(ec, printed=True)
        self.kv_gib = kv
        self.kv_tokens = int(kv * (1 << 30) / f["kv_bytes_per_token"])
        if self.kv_tokens < self.context_len:
            need = self.context_len * f["kv_bytes_per_token"] / (1 << 30)
            L.vl("EngineCore failed to start.", proc="EngineCore", pid=ec, level="ERROR", where="core.py:866")
            L.vl(
                f"ValueError: To serve at least one request with the models's max seq len ({self.context_len}), ({need:.2f} GiB KV cache is needed, "
                f"which is larger than the available KV cache memory ({kv:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {self.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                proc="EngineCore",
                pid=ec,
                level="ERROR",
                where="core.py:866",
            )
            self._vllm_engine_failed(ec, printed=True)
        L.vl(f"Available KV cache memory: {kv:.2f} GiB", proc=t0, pid=self.w(0), where="gpu_worker.py:436")
        L.vl(f"GPU KV cache size: {self.kv_tokens:,} tokens", proc="EngineCore", pid=ec, where="kv_cache_utils.py:1319")
        L.vl(
            f"Maximum concurrency for {self.context_len:,} tokens per request: {self.kv_tokens / self.context_len:.2f}x",
            proc="EngineCore",
            pid=ec,
            where="kv_cache_utils.py:1324",
        )
        self.metrics.max_total_tokens = self.kv_tokens
        self.metrics.block_size = a.block_size or 16
        self.set_mem(1.1 + self.weights_gib + kv, 0)
        mode = str((a.compilation_config or {}).get("cudagraph_mode", "FULL_AND_PIECEWISE")).upper()
        phases = []
        if not self.perf.enforce_eager:
            if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
                phases.append(("mixed prefill-decode, PIECEWISE", 51))
            if mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
                phases.append(("decode, FULL" if mode != "FULL" else "mixed prefill-decode, FULL", 35))
        self.graph_gib = 0.47 if phases else 0.0
        span = (0.64, 0.88)
        per_phase = (span[1] - span[0]) / max(1, len(phases))
        for pi, (label, n) in enumerate(phases):
            p0 = span[0] + pi * per_phase
            desc = f"Capturing CUDA graphs ({label})"
            L.raw("\r" + tqdm_frame(desc, 0, n, 0))
            for i in range(1, n + 1):
                if a.sim_fault == "hang" and pi == 0 and i == n // 2:
                    self.set_mem(1.1 + self.weights_gib + kv + 0.2, 35)
                    await asyncio.Event().wait()
                await self.at(p0 + per_phase * i / n)
                L.raw("\r" + tqdm_frame(desc, i, n, self.sim_elapsed(p0, p0 + per_phase * i / n)))
            L.raw("\n")
            self.set_mem(1.1 + self.weights_gib + kv + self.graph_gib * (pi + 1) / len(phases), 40)
        await self.at(0.89)
        if phases:
            L.vl(
                f"Graph capturing finished in {round(self.sim_elapsed(0.64, 0.88))} secs, took {self.graph_gib:.2f} GiB",
                proc=t0,
                pid=self.w(0),
                where="gpu_model_runner.py:6046",
            )
        await self.at(0.90)
        comp = f" (compilation: {compile_s:.2f} s)" if compile_s else ""
        L.vl(
            f"init engine (profile, create kv cache, warmup model) took {self.sim_elapsed(0.41, 0.90):.2f} s{comp}",
            proc="EngineCore",
            pid=ec,
            where="core.py:283",
        )
        self.set_mem(1.1 + self.weights_gib + kv + self.graph_gib, 0)
        await self.at(0.93)
        L.vl("Supported tasks: ['generate']", where="api_server.py:590")
        shown = self.host if self.host not in ("", "::") else "0.0.0.0"
        L.vl(f"Starting vLLM server on http://{shown}:{self.sock.getsockname()[1]}", where="api_server.py:594")
        L.vl("Available routes are:", where="launcher.py:37")
        for route, methods in VLLM_ROUTES:
            L.vl(f"Route: {route}, Methods: {methods}", where="launcher.py:46")
        await self.at(0.97)
        L.uvicorn(f"Started server process [{self.pid}]")
        L.uvicorn("Waiting for application startup.")
        self.http = HttpServer(self.handle, self.access_log)
        await self.at(1.0)
        await self.http.start(self.sock)
        L.uvicorn("Application startup complete.")

    async def ray_placement(self, ec: int) -> None:
        """vLLM's ``initialize_ray_cluster`` against the real Ray cluster (see :mod:`raycluster`):
        this node runs the ranks its own GPUs hold, the cluster must hold ``tp × pp``."""
        a = self.a
        L = self.log
        world = max(1, a.tensor_parallel_size) * max(1, a.pipeline_parallel_size)

        def vl(msg: str, level: str = "INFO", where: str = "ray_utils.py:398") -> None:
            L.vl(msg, proc="EngineCore", pid=ec, level=level, where=where)

        def fail(exc_line: str, frames: list[str]) -> None:
            vl("EngineCore failed to start.", level="ERROR", where="core.py:866")
            tb = [
                "Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_executor.py", line 96, in _init_executor',
                "    initialize_ray_cluster(self.parallel_config)",
                *frames,
                *exc_line.split("\n"),
            ]
            for line in tb:
                vl(line, level="ERROR", where="core.py:866")
            self._vllm_engine_failed(ec, printed=True)

        if world > self.gpu_cfg.count:
            vl(
                f"Total GPU requirement (world_size={world}) exceeds locally visible GPUs ({self.gpu_cfg.count}). "
                "For multi-node Ray clusters, this may be expected if the total cluster has enough GPUs. "
                f"If running single-node, consider reducing tensor_parallel_size ({a.tensor_parallel_size}) "
                f"or pipeline_parallel_size ({a.pipeline_parallel_size}).",
                level="WARNING",
                where="ray_utils.py:345",
            )
        address = raycluster.cluster_address()
        ray = raycluster.ray_executable()
        if address is not None:
            await self._open_ray_channel(address)
        if address is None:  # ray.init() starts a local instance with this node's GPUs
            L.raw(
                f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:2007 -- Started a local Ray instance.\n"
            )
            view = raycluster.ClusterView("", float(self.gpu_cfg.count), {}, "", {"GPU": float(self.gpu_cfg.count)})
        else:
            L.raw(
                f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:1832 -- "
                f"Connecting to existing Ray cluster at address: {address}...\n"
            )
            try:
                if ray is None:
                    raise raycluster.RayUnavailable("no `ray` command (TUNEDECK_SIM_RAY, beside python, PATH)")
                view = await raycluster.ask_cluster(ray, address)
            except raycluster.RayUnavailable as e:
                said = str(e)
                fail(
                    said if re.match(r"^[\w.]+(?:Error|Exception): ", said) else f"ConnectionError: {said}",
                    ['  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 1843, in init'],
                )
                return
            L.raw(f"(EngineCore pid={ec}) {raycluster.ray_stamp()}\tINFO worker.py:2003 -- Connected to Ray cluster.\n")
        vl("No current placement group found. Creating a new placement group.", where="ray_utils.py:379")
        if world > view.gpus:
            vl(
                "The number of required GPUs exceeds the total number of available GPUs in the placement group.",
                level="WARNING",
                where="ray_utils.py:384",
            )
        host_ip = os.environ.get("VLLM_HOST_IP") or (address or "127.0.0.1").rsplit(":", 1)[0].strip("[]")
        if view.gpus < 1:
            node = view.first_node or uuid.uuid4().hex + uuid.uuid4().hex[:24]
            fail(
                f"ValueError: Current node has no GPU available. current_node_resource={raycluster.fmt_resources(view.first_node_resources)}. "
                f"vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available in a node "
                f"current_node_id={node!r} current_ip={host_ip!r}.",
                [
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_utils.py", line 401, in initialize_ray_cluster',
                    "    raise ValueError(",
                ],
            )
            return
        specs = [{"GPU": 1.0} for _ in range(world)]
        specs[0] = {"GPU": 1.0, f"node:{host_ip}": 0.001}
        specs_s = "[" + ", ".join(raycluster.fmt_resources(x) for x in specs) + "]"
        limit = raycluster.pg_timeout()
        t0 = time.monotonic()
        interval = min(10.0, max(0.5, limit / 4))
        while view.gpus < world:
            left = limit - (time.monotonic() - t0)
            if left <= 0:
                fail(
                    f"ValueError: Cannot provide a placement group requiring {float(world)} GPUs "
                    f"(placement_group_specs={specs_s}) within {limit:g} seconds.\n"
                    "Tensor parallel size may exceed available GPUs in your cluster. Check resources with `ray status` "
                    "and `ray list nodes`.\n"
                    "If running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match available "
                    "GPU resources.",
                    [
                        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_utils.py", line 300, in _wait_until_pg_ready',
                        "    raise ValueError(",
                    ],
                )
                return
            await asyncio.sleep(min(interval, left))
            interval *= 2
            vl(
                f"Waiting for creating a placement group of specs for {int(time.monotonic() - t0)} seconds. "
                f"specs={specs_s}. Check `ray status` and `ray list nodes` to see if you have enough resources, "
                "and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment "
                "variable specified in each node if you are running on a multi-node.",
                where="ray_utils.py:270",
            )
            if address is not None and ray is not None:
                try:
                    view = await raycluster.ask_cluster(ray, address)
                except raycluster.RayUnavailable as e:  # as Ray's own client would, say so and go on waiting
                    print(f"ray status failed while waiting for the placement group: {e}", file=sys.stderr, flush=True)
        remote = world - len(self.gpus)
        if remote > 0 and view.nodes > 1 and self.ray_nodes is not None:
            await self._place_on_ray_nodes(remote, world, host_ip)
        if len(self.gpus) < a.tensor_parallel_size:
            vl(
                f"tensor_parallel_size={a.tensor_parallel_size} is bigger than a reserved number of GPUs "
                f"({len(self.gpus)} GPUs) in a node {view.first_node or 'head'}. Tensor parallel workers can be "
                "spread out to 2+ nodes which can degrade the performance unless you have fast interconnect "
                "across nodes, like Infiniband. To resolve this issue, make sure you have more than "
                f"{a.tensor_parallel_size} GPUs available at each node.",
                level="WARNING",
                where="ray_utils.py:218",
            )

    async def _open_ray_channel(self, address: str) -> None:
        """Listen for the other Ray nodes (see :mod:`raynode`); without it their GPUs look idle."""
        try:
            _, port = raynode.channel_address(address)
        except ValueError:
            print(f"simulator: RAY_ADDRESS {address!r} has no port; no other Ray node will hold GPUs", file=sys.stderr)
            return
        nodes = raynode.WorkerNodes(port)
        why = await nodes.listen()
        if why is not None:
            print(
                f"simulator: the other Ray nodes cannot reach this driver ({why}); their GPUs stay idle",
                file=sys.stderr,
            )
            return
        self.ray_nodes = nodes

    async def _place_on_ray_nodes(self, bundles: int, world: int, host_ip: str) -> None:
        """The bundles this node's GPUs do not hold go to the other nodes' simulated Ray workers."""
        assert self.ray_nodes is not None
        placed = await self.ray_nodes.place(bundles, len(self.gpus), raynode.node_wait())
        got = sum(len(n.pids) for n in placed)
        if got < bundles:
            print(
                f"simulator: {bundles - got} of the placement group's {world} bundles are on Ray nodes that do not run "
                "under `tunedeck-host sim ray-node`; their GPUs are not shown as used",
                file=sys.stderr,
                flush=True,
            )
        port = 30000 + (self.pid % 20000)
        for n in placed:
            for i, pid in enumerate(n.pids):
                self.ray_workers.append((pid, n.ip, n.first_rank + i))
                self.log.vl(
                    f"world_size={world} rank={n.first_rank + i} local_rank={i} "
                    f"distributed_init_method=tcp://{host_ip}:{port} backend=nccl",
                    proc="RayWorkerWrapper",
                    pid=pid,
                    ip=n.ip,
                    where="parallel_state.py:1400",
                )

    def _vllm_engine_failed(self, ec: int, printed: bool = False) -> None:
        L = self.log
        if not printed:
            L.vl("EngineCore failed to start.", proc="EngineCore", pid=ec, level="ERROR", where="core.py:866")
        for line in [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 782, in wait_for_engine_startup',
            '    raise RuntimeError("Engine core initialization failed. "',
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]:
            L.raw(f"(APIServer pid={self.pid}) {line}\n")
        raise Fatal(1)

    # ------------------------------------------------------------------ background tasks
    async def publisher(self) -> None:
        while True:
            b = len(self.running)
            self.util = 0 if b == 0 else min(100, int(60 + 40 * min(1.0, b / 8)))
            self.publish()
            await asyncio.sleep(0.5)

    async def vllm_stats(self) -> None:
        m = self.metrics
        last_p, last_g, last_t = m.prompt_tokens, m.generation_tokens, time.monotonic()
        last_acc, last_drafts, last_dt = m.spec_accepted, m.spec_drafts, m.spec_draft_tokens
        was_active = False
        while True:
            await asyncio.sleep(self.stats_interval)
            now = time.monotonic()
            dt = max(1e-6, now - last_t)
            p, g = m.prompt_tokens - last_p, m.generation_tokens - last_g
            active = bool(p or g or self.running or self.waiting)
            if active or was_active:
                usage = 100.0 * m.token_usage
                self.log.vl(
                    f"Engine 000: Avg prompt throughput: {p / dt:.1f} tokens/s, Avg generation throughput: {g / dt:.1f} tokens/s, "
                    f"Running: {len(self.running)} reqs, Waiting: {len(self.waiting)} reqs, GPU KV cache usage: {usage:.1f}%, "
                    "Prefix cache hit rate: 0.0%",
                    where="loggers.py:259",
                )
                if self.spec and m.spec_drafts > last_drafts:
                    acc = m.spec_accepted - last_acc
                    drafts = m.spec_drafts - last_drafts
                    dtok = m.spec_draft_tokens - last_dt
                    mean_len = 1 + acc / drafts
                    self.log.vl(
                        f"SpecDecoding metrics: Mean acceptance length: {mean_len:.2f}, Accepted throughput: {acc / dt:.2f} tokens/s, "
                        f"Drafted throughput: {dtok / dt:.2f} tokens/s, Accepted: {acc} tokens, Drafted: {dtok} tokens, "
                        f"Avg Draft acceptance rate: {100.0 * acc / max(1, dtok):.1f}%",
                        where="metrics.py:100",
                    )
            was_active = active
            last_p, last_g, last_t = m.prompt_tokens, m.generation_tokens, now
            last_acc, last_drafts, last_dt = m.spec_accepted, m.spec_drafts, m.spec_draft_tokens

    # ------------------------------------------------------------------ requests
    def submit(self, r: Req) -> None:
        """Hand a new request to the fixed clock or the scheduler; its chunks follow from there."""
        if self.fixed:
            self._fixed_start(r)
        else:
            self.waiting.append(r)
            self.metrics.waiting = len(self.waiting)
            assert self.wake is not None
            self.wake.set()

    # ---- fixed timing (bypasses the model: exact TTFT and inter-token delay, see tui.sim.clock)
    def _fixed_start(self, r: Req) -> None:
        if self.clock is None:
            self.clock = FixedClock(self.loop, self.fixed_ttft, self.fixed_itl, self._fixed_emit)
        r.admitted = r.arrival
        self.running.append(r)
        self.metrics.running = len(self.running)
        self.clock.add(r)

    def _fixed_emit(self, r: Req, now: float) -> None:
        if r.out == 0:
            self.metrics.prompt_tokens += r.prompt_tokens
        self.emit(r, 1, now)

    # ---- continuous batching
    async def scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.wake is not None
        rng = random.Random(self.seed * 31 + 7)
        pc = self.perf
        k = pc.decode_steps if self.e == "sglang" else 1
        t_next = loop.time()
        step = 0
        self.log_t = loop.time()
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                self.update_gauges()
                await self.wake.wait()
                t_next = loop.time()
            now = loop.time()
            if t_next < now - 0.05:
                t_next = now - 0.05  # never burst more than ~50 ms of backlog
            new: list[Req] = []
            if step % k == 0 or not self.running:
                budget = self.prefill_budget
                while self.waiting and len(self.running) + len(new) < self.max_running:
                    r = self.waiting[0]
                    if r.finish is not None:
                        self.waiting.popleft()
                        continue
                    if new and r.prompt_tokens > budget:
                        break
                    self.waiting.popleft()
                    r.admitted = max(now, t_next)
                    budget -= r.prompt_tokens
                    new.append(r)
            if self.e == "sglang" and new:
                toks = sum(r.prompt_tokens for r in new)
                dur = perf.prefill_time(pc, toks) * perf.jitter(rng)
                t_next += dur / self.speed
                await self._sleep_until(t_next)
                tnow = loop.time()
                self.metrics.prompt_tokens += toks
                self.prompt_since_log += toks
                self.running.extend(new)
                self.update_gauges()
                self.log.sg(
                    f"Prefill batch, #new-seq: {len(new)}, #new-token: {toks}, #cached-token: 0, token usage: {self.metrics.token_usage:.2f}, "
                    f"#running-req: {len(self.running) - len(new)}, #queue-req: {len(self.waiting)}, #pending-token: 0, "
                    f"cuda graph: False, input throughput (token/s): {toks / max(1e-6, dur):.2f}",
                    rank=0,
                )
                for r in new:
                    self.emit(r, 1, tnow)
                self._finish_done()
                self._step_done()
                continue
            if self.e == "vllm" and new:
                self.running.extend(new)
            b = len(self.running)
            if b == 0:
                continue
            dur = perf.decode_step_time(pc, b) * perf.jitter(rng)
            newtoks = sum(r.prompt_tokens for r in new)
            if newtoks:
                dur += perf.prefill_time(pc, newtoks)
                self.metrics.prompt_tokens += newtoks
            t_next += dur / self.speed
            await self._sleep_until(t_next)
            tnow = loop.time()
            gen = 0
            spec = self.spec
            for r in self.running:
                if r.finish is not None:
                    continue
                n = 1
                if spec is not None and r.out > 0:
                    acc = perf.sample_accepted(spec, rng)
                    n = 1 + acc
                    self.accept_sum += n
                    self.accept_n += 1
                    m = self.metrics
                    m.spec_drafts += 1
                    m.spec_draft_tokens += spec.num_steps
                    m.spec_accepted += acc
                    for pos in range(acc):
                        if pos < len(m.spec_per_pos):
                            m.spec_per_pos[pos] += 1
                gen += self.emit(r, n, tnow)
            self.metrics.iteration.observe(gen + newtoks)
            self._finish_done()
            self.update_gauges()
            self._step_done()
            step += 1
            if self.e == "sglang":
                self.decode_steps_since_log += 1
                self.gen_since_log += gen
                if self.decode_steps_since_log >= self.decode_log_interval:
                    self._sglang_decode_log(tnow)

    async def _sleep_until(self, t: float) -> None:
        loop = asyncio.get_running_loop()
        d = t - loop.time()
        if d > 0:
            await asyncio.sleep(d)
        else:
            await asyncio.sleep(0)

    def _sglang_decode_log(self, now: float) -> None:
        dt = max(1e-6, now - self.log_t)
        tput = self.gen_since_log / dt
        self.last_gen_tput = tput
        self.metrics.gen_throughput = tput
        spec = ""
        if self.spec and self.accept_n:
            al = self.accept_sum / self.accept_n
            spec = f"accept len: {al:.2f}, accept rate: {(al - 1) / self.spec.num_steps:.2f}, "
            self.metrics.spec_accept_length = al
            self.metrics.spec_accept_rate = (al - 1) / self.spec.num_steps
            self.accept_sum = self.accept_n = 0
        graph = len(self.running) <= self.perf.cuda_graph_max_bs and not self.perf.enforce_eager
        self.log.sg(
            f"Decode batch, #running-req: {len(self.running)}, #token: {self.metrics.used_tokens}, token usage: {self.metrics.token_usage:.2f}, "
            f"{spec}cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {len(self.waiting)}",
            rank=0,
        )
        self.decode_steps_since_log = 0
        self.gen_since_log = 0
        self.log_t = now

    def _step_done(self) -> None:
        if self.step_waiters:
            ws, self.step_waiters = self.step_waiters, []
            for answer in ws:
                answer()

    def update_gauges(self) -> None:
        m = self.metrics
        m.running = len(self.running)
        m.waiting = len(self.waiting)
        used = sum(r.prompt_tokens + r.out for r in self.running)
        m.used_tokens = used
        m.token_usage = min(1.0, used / self.kv_tokens) if self.kv_tokens else 0.0

    def _finish_done(self) -> None:
        if any(r.finish is not None for r in self.running):
            self.running = [r for r in self.running if r.finish is None]

    # ---- token emission: writes straight to the client's transport
    def emit(self, r: Req, n: int, now: float) -> int:
        """Produce ``n`` tokens for ``r`` at loop time ``now``; returns tokens produced.

        A stream's chunk is written at once; its last chunk goes out in the same write as
        the finish, usage and ``[DONE]`` events and the end of the body.
        """
        if r.finish is not None:
            return 0
        conn = r.conn
        if conn is not None and conn.closed:
            self._abort(r)
            return 0
        n = min(n, r.max_tokens - r.out, max(1, r.eos_at - r.out))
        first = r.out == 0
        pos = r.out
        r.out += n
        m = self.metrics
        m.generation_tokens += n
        if first:
            r.first = now
            m.ttft.observe(now - r.arrival)
        else:
            m.itl.observe(now - r.last)
        r.last = now
        if r.out >= r.max_tokens:
            r.finish = "length"
        elif r.out >= r.eos_at:
            r.finish = "stop"
        if r.text is not None:
            r.text.append(self.words(r.wpos + pos, n))
        if r.stream and conn is not None:
            frames = self.token_frames(r, r.wpos + pos, n, first)
            if r.finish is None:
                conn.write_frames(frames)
            else:
                conn.end_stream(frames + self.end_frames(r))
        if self.rec_file is not None and not r.internal:
            r.times.append(time.time())
            r.counts.append(n)
        if r.finish is not None:
            self._complete(r, now)
        return n

    def _abort(self, r: Req) -> None:
        if r.finish is not None:
            return
        r.finish = "abort"
        r.aborted = True
        if self.e == "sglang":
            self.metrics.aborted += 1
        else:
            self.metrics.finished["abort"] += 1
        if r in self.running and self.fixed:
            self.running.remove(r)
        if r.conn is not None:
            r.conn.abort()  # the client has gone, or the server stops: the response ends unfinished
        if r.done is not None and not r.done.done():
            r.done.set_result(None)

    def _complete(self, r: Req, now: float) -> None:
        m = self.metrics
        m.e2e.observe(now - r.arrival)
        m.queue.observe(max(0.0, r.admitted - r.arrival))
        m.prefill.observe(max(0.0, r.first - r.admitted))
        m.decode.observe(max(0.0, now - r.first))
        if r.out > 1:
            m.tpot.observe((now - r.first) / (r.out - 1))
        m.requests += 1
        m.finished[r.finish or "stop"] = m.finished.get(r.finish or "stop", 0) + 1
        if self.fixed and r in self.running:
            self.running.remove(r)
            m.running = len(self.running)
        if not r.stream:
            self.respond(r)
        if self.rec_file is not None and not r.internal:
            rec = {
                "id": r.rid,
                "engine": self.e,
                "kind": r.kind,
                "stream": r.stream,
                "arrival": r.arrival_wall,
                "times": r.times,
                "tokens": r.counts,
                "ttft": (r.times[0] - r.arrival_wall) if r.times else None,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.out,
                "finish_reason": r.finish,
            }
            try:
                self.rec_file.write(json.dumps(rec, separators=(",", ":")) + "\n")
            except (OSError, ValueError):
                pass
        if r.done is not None and not r.done.done():
            r.done.set_result(None)


def _parse_len(v: Any) -> int | None:
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


def bind_socket(host: str, port: int) -> socket.socket:
    host = host or "0.0.0.0"
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1024)
    except OSError:
        s.close()
        raise
    s.setblocking(False)
    return s


# ====================================================================== entry


def main(engine: str, argv: list[str]) -> int:
    if engine == "vllm":
        argv = preprocess_vllm_argv(argv)
        for a in argv:
            if a.startswith("--help="):
                sys.stdout.write(help_search(vllm_parser(), a.split("=", 1)[1]))
                return 0
        parser = vllm_parser()
    else:
        if argv[:1] == ["serve"]:
            argv = argv[1:]
        parser = sglang_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"argument --port: {args.port} is outside 0..65535")
    if engine == "vllm" and args.sim_list_backends:
        print(" ".join(VLLM_BACKENDS))
        return 0
    if engine == "vllm" and args.speculative_config:
        method = str(args.speculative_config.get("method") or "")
        if method and method not in VLLM_SPEC_METHODS:
            parser.error(
                f"argument --speculative-config/-sc: invalid speculative method {method!r} "
                f"(choose from {', '.join(VLLM_SPEC_METHODS)})"
            )
    if engine == "sglang":
        trio = [args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens]
        if any(x is not None for x in trio) and not all(x is not None for x in trio):
            print(
                "ValueError: --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens "
                "must be set together (all three or none).",
                file=sys.stderr,
            )
            return 1
    try:
        sim = Sim(engine, args)
    except Exception as e:  # bad simulator config (gpus.json, record path)
        print(f"tunedeck sim {engine}: {e}", file=sys.stderr)
        return 2
    from tui.util.aio import run_async

    try:
        return run_async(sim.run())
    except KeyboardInterrupt:
        return 0
