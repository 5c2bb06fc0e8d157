"""vLLM's start-up as its log shows it (serving-engines.md §4.3): the API server, engine core,
workers, weights, KV cache, compilation and CUDA graphs (Ray placement: :mod:`tunedeck.sim.vllm_ray`);
its failures and its periodic engine stats."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from typing import Any, Callable, Iterable, NoReturn, Sequence

from tunedeck.engines import VLLM_VERSION
from tunedeck.sim.gpus import used_by_others
from tunedeck.sim.simlog import Fatal, tqdm_frame
from tunedeck.sim.startup import KitPart, StartupKit, Task, bind_socket
from tunedeck.sim.vllm_args import vllm_parser
from tunedeck.sim.vllm_ray import RayPlacement, engine_failed

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

#: the process that prints the first worker's lines
T0 = "Worker_TP0"


class VllmStartup(KitPart):
    """vLLM's :class:`tunedeck.sim.startup.EngineStartup`: the start-up in phases, each at its moment
    of the load time; a failure ends it with :func:`tunedeck.sim.vllm_ray.engine_failed`."""

    def __init__(self, kit: StartupKit) -> None:
        super().__init__(kit)
        #: the engine core's pid
        self.ec = self.cfg.pid + 1
        self.total = self.cfg.gpu_cfg.memory_total_mib / 1024.0
        #: (pid, ip, rank) of each Ray worker on another node
        self.ray_workers: list[tuple[int, str, int]] = []

    def note(self, text: str) -> None:
        self.log.vl(text, level="WARNING", where="engine_args.py:1")

    def serving_tasks(self) -> list[Task]:
        return [] if self.a.disable_log_stats else [(self.stats(), "vllm-stats")]

    async def warm_up(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def stopping(self) -> None:
        self.log.vl("Shutting down FastAPI HTTP server.", where="launcher.py:110")

    def crash(self) -> NoReturn:
        for line in [
            "EngineCore encountered a fatal error.",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1010, in run_engine_core',
            "    engine_core.run_busy_loop()",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]:
            self.log.vl(line, proc="EngineCore", pid=self.ec, level="ERROR", where="core.py:1010")
        raise Fatal(1)

    def _failed(self, printed: bool = False, cause: Sequence[str] = ()) -> NoReturn:
        engine_failed(self.log, self.cfg.pid, self.ec, printed, cause)

    def _tp0(self, text: str, where: str, level: str = "INFO") -> None:
        """A line of rank 0's worker (``Worker_TP0``)."""
        self.log.vl(text, proc=T0, pid=self.kit.worker_pid(0), level=level, where=where)

    def _worker_error(self, ranks: Iterable[int], lines: Callable[[int], list[str]]) -> None:
        """The ``lines(rank)`` a failing worker prints, for each of ``ranks`` (its executor's ERROR lines)."""
        for r in ranks:
            for line in lines(r):
                self.log.vl(
                    line,
                    proc=f"Worker_TP{r}",
                    pid=self.kit.worker_pid(r),
                    level="ERROR",
                    where="multiproc_executor.py:759",
                )

    async def start(self) -> None:
        self._banner()
        sock = self._bind()
        await self._engine_config()
        await self._workers()
        await self._backend()
        await self._load_weights()
        compile_s = await self._compile()
        kv = await self._kv_cache()
        await self._cuda_graphs(kv)
        await self._serve(sock, compile_s, kv)

    def _banner(self) -> None:
        a = self.a
        L = self.log
        for line in VLLM_LOGO:
            L.vl(line.format(version=VLLM_VERSION, model=self.cfg.model), where="utils.py:299")
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

    def _bind(self) -> socket.socket:
        """The API server binds its socket before the engine starts."""
        a = self.a
        L = self.log
        try:
            if a.sim_fault == "port":
                raise OSError(98, "Address already in use")
            sock = self.state.sock = bind_socket(self.cfg.host, self.cfg.port)
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
                L.raw(f"(APIServer pid={self.cfg.pid}) {line}\n")
            raise Fatal(1) from None
        sock.listen(1024)  # connections queue (probes hang) until the app starts
        return sock

    async def _engine_config(self) -> None:
        ec = self.ec
        a = self.a
        L = self.log
        f = self.cfg.facts
        await self.kit.at(0.01)
        L.vl(f"Resolved architecture: {f['arch']}", where="model.py:549")
        L.vl(f"Using max model len {self.cfg.context_len}", where="model.py:1678")
        chunked = a.enable_chunked_prefill is not False  # vLLM V1: on unless --disable-chunked-prefill
        if chunked:
            L.vl(
                f"Chunked prefill is enabled with max_num_batched_tokens={self.cfg.prefill_budget}.",
                where="scheduler.py:252",
            )
        L.vl("Asynchronous scheduling is enabled.", where="vllm.py:790")
        await self.kit.at(0.03)
        spec_s = "None" if not self.cfg.spec else repr(a.speculative_config)
        L.vl(
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={self.cfg.model!r}, speculative_config={spec_s}, "
            f"tokenizer={self.cfg.model!r}, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code={a.trust_remote_code}, "
            f"dtype=torch.bfloat16, max_seq_len={self.cfg.context_len}, download_dir=None, load_format=auto, "
            f"tensor_parallel_size={a.tensor_parallel_size}, pipeline_parallel_size={a.pipeline_parallel_size}, "
            f"data_parallel_size={a.data_parallel_size}, disable_custom_all_reduce={a.disable_custom_all_reduce}, "
            f"quantization={a.quantization}, enforce_eager={a.enforce_eager}, kv_cache_dtype={a.kv_cache_dtype}, "
            f"device_config=cuda, seed={a.seed}, served_model_name={self.cfg.served}, enable_prefix_caching={self.state.cache is not None}, "
            f"enable_chunked_prefill={chunked}, pooler_config=None, compilation_config={json.dumps(a.compilation_config or {})}",
            proc="EngineCore",
            pid=ec,
            where="core.py:105",
        )

    async def _workers(self) -> None:
        """Ray placement or the local world size, the free memory, the workers' ranks, NCCL."""
        a = self.a
        L = self.log
        ec = self.ec
        total = self.total
        if a.distributed_executor_backend == "ray":
            placement = RayPlacement(self.kit, ec)
            await placement.place()
            self.ray_workers = placement.workers
        elif not self.cfg.gpus or len(self.cfg.gpus) < self.cfg.tp:
            L.vl(
                f"ValueError: World size ({self.cfg.tp}) is larger than the number of available GPUs ({len(self.cfg.gpus)}) in this node.",
                proc="EngineCore",
                pid=ec,
                level="ERROR",
                where="core.py:866",
            )
            self._failed()
        self.kit.set_mem(0.52, 0)
        await self.kit.at(0.05)
        other = used_by_others(self.cfg.gpus, self.cfg.pid) / 1024.0
        free = total - other - 0.52
        if free < total * a.gpu_memory_utilization:
            self._worker_error(
                [0],
                lambda r: [
                    f"ValueError: Free memory on device cuda:{r} ({free:.2f}/{total:.2f} GiB) on startup is less than desired GPU "
                    f"memory utilization ({a.gpu_memory_utilization}, {total * a.gpu_memory_utilization:.2f} GiB). Decrease GPU memory "
                    "utilization or reduce GPU memory used by other processes."
                ],
            )
            self._failed()
        port = 30000 + (self.cfg.pid % 20000)
        for r in self.kit.ranks():
            L.vl(
                f"world_size={self.cfg.tp} rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:{port} backend=nccl",
                proc="Worker",
                pid=self.kit.worker_pid(r),
                where="parallel_state.py:1400",
            )
        if a.sim_fault == "nccl":
            self._worker_error(
                self.kit.ranks()[:2],
                lambda r: [
                    "WorkerProc failed to start.",
                    "Traceback (most recent call last):",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 733, in worker_main',
                    "    worker = WorkerProc(*args, **kwargs)",
                    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
                    '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", line 257, in NCCL_CHECK',
                    '    raise RuntimeError(f"NCCL error: {error_str}")',
                    "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                ],
            )
            self._failed()
        L.vl("vLLM is using nccl==2.28.3", proc="Worker", pid=self.kit.worker_pid(0), where="pynccl.py:111")
        for r in range(len(self.cfg.gpus)):
            L.vl(
                f"rank {r} in world size {self.cfg.tp} is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank {r}, EP rank N/A, EPLB rank N/A",
                proc="Worker",
                pid=self.kit.worker_pid(r),
                where="parallel_state.py:1716",
            )
        self.kit.set_mem(1.1, 0)

    async def _backend(self) -> None:
        """The attention backend: forced (and fitting the model, or failing) or chosen."""
        f = self.cfg.facts
        await self.kit.at(0.07)
        self._tp0("Loading model from scratch...", where="gpu_model_runner.py:4735")
        forced = self.cfg.perf.attention_backend
        mla = f["mla"]
        if forced:
            is_mla = "MLA" in forced
            if is_mla != mla:
                reason = "['MLA not supported']" if not mla else "['non-MLA not supported']"
                self._tp0(
                    f"ValueError: Selected backend AttentionBackendEnum.{forced} is not valid for this configuration. Reason: {reason}",
                    where="multiproc_executor.py:759",
                    level="ERROR",
                )
                self._failed()
            self._tp0(f"Using AttentionBackendEnum.{forced} backend.", where="cuda.py:416")
        elif mla:
            self._tp0(
                "Using FLASH_ATTN_MLA attention backend out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA'].",
                where="cuda.py:334",
            )
        else:
            self._tp0(
                "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].",
                where="cuda.py:334",
            )

    async def _load_weights(self) -> None:
        L = self.log
        f = self.cfg.facts
        # --cpu-offload-gb: that many GiB of each GPU's weights stay in CPU memory
        self.state.weights_gib = max(0.0, f["weights_gib_total"] / self.cfg.tp - self.a.cpu_offload_gb)
        n_sh = f["shards"]
        f0, f1 = 0.08, 0.40
        label = "Loading safetensors checkpoint shards"
        L.raw(tqdm_frame(label, 0, n_sh, 0, shards=True) + "\n")
        for i in range(1, n_sh + 1):
            await self.kit.at(f0 + (f1 - f0) * i / n_sh)
            L.raw(tqdm_frame(label, i, n_sh, self.kit.elapsed(f0, f0 + (f1 - f0) * i / n_sh), shards=True) + "\n")
            self.kit.set_mem(1.1 + self.state.weights_gib * i / n_sh, 3, force=False)
        L.raw(tqdm_frame(label, n_sh, n_sh, self.kit.elapsed(f0, f1), shards=True) + "\n")
        L.raw(f"({T0} pid={self.kit.worker_pid(0)}) \n")
        self._tp0(f"Loading weights took {self.kit.elapsed(f0, f1):.2f} seconds", where="default_loader.py:384")
        for r in self.kit.ranks():
            L.vl(
                f"Model loading took {self.state.weights_gib:.2f} GiB memory and {self.kit.elapsed(0.07, 0.41):.6f} seconds",
                proc=f"Worker_TP{r}",
                pid=self.kit.worker_pid(r),
                where="gpu_model_runner.py:4820",
            )
        for pid, ip, _ in self.ray_workers:
            L.vl(
                f"Model loading took {self.state.weights_gib:.2f} GiB memory and {self.kit.elapsed(0.07, 0.41):.6f} seconds",
                proc="RayWorkerWrapper",
                pid=pid,
                ip=ip,
                where="gpu_model_runner.py:4820",
            )

    async def _compile(self) -> float:
        """torch.compile (none when eager); returns its simulated seconds."""
        compile_s = 0.0
        if not self.cfg.perf.enforce_eager:
            await self.kit.at(0.45)
            self._tp0(
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{uuid.uuid5(uuid.NAMESPACE_DNS, self.cfg.model).hex[:10]}/rank_0_0/backbone for vLLM's torch.compile",
                where="backends.py:1051",
            )
            self._tp0(f"Dynamo bytecode transform time: {self.kit.elapsed(0.41, 0.45):.2f} s", where="backends.py:1111")
            await self.kit.at(0.58)
            self._tp0(
                f"Compiling a graph for compile range (1, {self.cfg.prefill_budget}) takes {self.kit.elapsed(0.45, 0.58):.2f} s",
                where="backends.py:390",
            )
            compile_s = self.kit.elapsed(0.41, 0.60)
            await self.kit.at(0.60)
            self._tp0(f"torch.compile took {compile_s:.2f} s in total", where="monitor.py:48")
        return compile_s

    async def _kv_cache(self) -> float:
        """The KV cache from the memory left (or the engine's failure); returns its GiB."""
        a = self.a
        L = self.log
        ec = self.ec
        f = self.cfg.facts
        total = self.total
        await self.kit.at(0.62)
        gmu: float = a.gpu_memory_utilization
        activation = 1.6
        kv = total * gmu - self.state.weights_gib - activation - 0.6
        if a.sim_fault == "oom":
            self._tp0(f"Available KV cache memory: {max(kv, 0.5):.2f} GiB", where="gpu_worker.py:436")
            self._worker_error(
                self.kit.ranks()[:1],
                lambda r: [
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
                ],
            )
            self._failed()
        if kv <= 0:
            self._tp0(f"Available KV cache memory: {kv:.2f} GiB", where="gpu_worker.py:436")
            self._failed(
                cause=[
                    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. "
                    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory.html for more details."
                ]
            )
        self.state.kv_gib = kv
        self.state.kv_tokens = int(kv * (1 << 30) / f["kv_bytes_per_token"])
        if self.state.kv_tokens < self.cfg.context_len:
            need = self.cfg.context_len * f["kv_bytes_per_token"] / (1 << 30)
            self._failed(
                cause=[
                    f"ValueError: To serve at least one request with the models's max seq len ({self.cfg.context_len}), ({need:.2f} GiB KV cache is needed, "
                    f"which is larger than the available KV cache memory ({kv:.2f} GiB). Based on the available memory, the estimated maximum model "
                    f"length is {self.state.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
                ]
            )
        self._tp0(f"Available KV cache memory: {kv:.2f} GiB", where="gpu_worker.py:436")
        L.vl(
            f"GPU KV cache size: {self.state.kv_tokens:,} tokens",
            proc="EngineCore",
            pid=ec,
            where="kv_cache_utils.py:1319",
        )
        L.vl(
            f"Maximum concurrency for {self.cfg.context_len:,} tokens per request: {self.state.kv_tokens / self.cfg.context_len:.2f}x",
            proc="EngineCore",
            pid=ec,
            where="kv_cache_utils.py:1324",
        )
        self.state.metrics.max_total_tokens = self.state.kv_tokens
        self.state.metrics.block_size = a.block_size or 16
        self.kit.set_mem(1.1 + self.state.weights_gib + kv, 0)
        return kv

    async def _cuda_graphs(self, kv: float) -> None:
        a = self.a
        L = self.log
        mode = str((a.compilation_config or {}).get("cudagraph_mode", "FULL_AND_PIECEWISE")).upper()
        phases = []
        if not self.cfg.perf.enforce_eager:
            if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
                phases.append(("mixed prefill-decode, PIECEWISE", 51))
            if mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
                phases.append(("decode, FULL" if mode != "FULL" else "mixed prefill-decode, FULL", 35))
        self.state.graph_gib = 0.47 if phases else 0.0
        span = (0.64, 0.88)
        per_phase = (span[1] - span[0]) / max(1, len(phases))
        for pi, (label, n) in enumerate(phases):
            p0 = span[0] + pi * per_phase
            desc = f"Capturing CUDA graphs ({label})"
            L.raw("\r" + tqdm_frame(desc, 0, n, 0))
            for i in range(1, n + 1):
                if a.sim_fault == "hang" and pi == 0 and i == n // 2:
                    self.kit.set_mem(1.1 + self.state.weights_gib + kv + 0.2, 35)
                    await asyncio.Event().wait()
                await self.kit.at(p0 + per_phase * i / n)
                L.raw("\r" + tqdm_frame(desc, i, n, self.kit.elapsed(p0, p0 + per_phase * i / n)))
            L.raw("\n")
            self.kit.set_mem(1.1 + self.state.weights_gib + kv + self.state.graph_gib * (pi + 1) / len(phases), 40)
        await self.kit.at(0.89)
        if phases:
            self._tp0(
                f"Graph capturing finished in {round(self.kit.elapsed(0.64, 0.88))} secs, took {self.state.graph_gib:.2f} GiB",
                where="gpu_model_runner.py:6046",
            )

    async def _serve(self, sock: socket.socket, compile_s: float, kv: float) -> None:
        """Engine ready, the API server's routes, the application started on the bound socket."""
        L = self.log
        ec = self.ec
        await self.kit.at(0.90)
        comp = f" (compilation: {compile_s:.2f} s)" if compile_s else ""
        L.vl(
            f"init engine (profile, create kv cache, warmup model) took {self.kit.elapsed(0.41, 0.90):.2f} s{comp}",
            proc="EngineCore",
            pid=ec,
            where="core.py:283",
        )
        self.kit.set_mem(1.1 + self.state.weights_gib + kv + self.state.graph_gib, 0)
        await self.kit.at(0.93)
        L.vl("Supported tasks: ['generate']", where="api_server.py:590")
        shown = self.cfg.host if self.cfg.host not in ("", "::") else "0.0.0.0"
        L.vl(f"Starting vLLM server on http://{shown}:{sock.getsockname()[1]}", where="api_server.py:594")
        L.vl("Available routes are:", where="launcher.py:37")
        for route, methods in VLLM_ROUTES:
            L.vl(f"Route: {route}, Methods: {methods}", where="launcher.py:46")
        await self.kit.at(0.97)
        L.uvicorn(f"Started server process [{self.cfg.pid}]")
        L.uvicorn("Waiting for application startup.")
        http = self.kit.serve()
        await self.kit.at(1.0)
        await http.start(sock)
        L.uvicorn("Application startup complete.")

    async def stats(self) -> None:
        """The engine's stat lines every interval while it serves (and once after)."""
        m = self.state.metrics
        last_p, last_g, last_t = m.prompt_tokens, m.generation_tokens, time.monotonic()
        last_acc, last_drafts, last_dt = m.spec_accepted, m.spec_drafts, m.spec_draft_tokens
        last_q, last_h, last_pre = m.prefix_queries, m.prefix_hits, m.preemptions
        was_active = False
        while True:
            await asyncio.sleep(self.cfg.stats_interval)
            now = time.monotonic()
            dt = max(1e-6, now - last_t)
            p, g = m.prompt_tokens - last_p, m.generation_tokens - last_g
            active = bool(p or g or self.state.running or self.state.waiting)
            if active or was_active:
                usage = 100.0 * m.token_usage
                pre = m.preemptions - last_pre
                q, h = m.prefix_queries - last_q, m.prefix_hits - last_h
                self.log.vl(
                    f"Engine 000: Avg prompt throughput: {p / dt:.1f} tokens/s, Avg generation throughput: {g / dt:.1f} tokens/s, "
                    f"Running: {len(self.state.running)} reqs, Waiting: {len(self.state.waiting)} reqs, "
                    + (f"Preemptions: {pre}, " if pre else "")
                    + f"GPU KV cache usage: {usage:.1f}%"
                    + (
                        f", Prefix cache hit rate: {100.0 * h / q if q else 0.0:.1f}%"
                        if self.state.cache is not None
                        else ""
                    ),
                    where="loggers.py:259",
                )
                if self.cfg.spec and m.spec_drafts > last_drafts:
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
            last_q, last_h, last_pre = m.prefix_queries, m.prefix_hits, m.preemptions
