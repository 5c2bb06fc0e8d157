"""vLLM's start-up as its log shows it (serving-engines.md §4.3): the API server, engine core,
workers, weights, KV cache, compilation and CUDA graphs, Ray placement; its failures and its
periodic engine stats."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from typing import Any

from tui.engines import VLLM_VERSION
from tui.sim import raycluster, raynode
from tui.sim.core import bind_socket
from tui.sim.engine_args import vllm_parser
from tui.sim.gpus import used_by_others
from tui.sim.httpd import HttpServer
from tui.sim.sglang_startup import SglangStartup
from tui.sim.simlog import Fatal, tqdm_frame

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


class VllmStartup(SglangStartup):
    """vLLM's start-up, failures and stats."""

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
        chunked = a.enable_chunked_prefill is not False  # vLLM V1: on unless --disable-chunked-prefill
        if chunked:
            L.vl(
                f"Chunked prefill is enabled with max_num_batched_tokens={self.prefill_budget}.",
                where="scheduler.py:252",
            )
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
            f"device_config=cuda, seed={a.seed}, served_model_name={self.served}, enable_prefix_caching={self.cache is not None}, "
            f"enable_chunked_prefill={chunked}, pooler_config=None, compilation_config={json.dumps(a.compilation_config or {})}",
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
        # --cpu-offload-gb: that many GiB of each GPU's weights stay in CPU memory
        self.weights_gib = max(0.0, f["weights_gib_total"] / self.tp - self.a.cpu_offload_gb)
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

    async def vllm_stats(self) -> None:
        m = self.metrics
        last_p, last_g, last_t = m.prompt_tokens, m.generation_tokens, time.monotonic()
        last_acc, last_drafts, last_dt = m.spec_accepted, m.spec_drafts, m.spec_draft_tokens
        last_q, last_h, last_pre = m.prefix_queries, m.prefix_hits, m.preemptions
        was_active = False
        while True:
            await asyncio.sleep(self.stats_interval)
            now = time.monotonic()
            dt = max(1e-6, now - last_t)
            p, g = m.prompt_tokens - last_p, m.generation_tokens - last_g
            active = bool(p or g or self.running or self.waiting)
            if active or was_active:
                usage = 100.0 * m.token_usage
                pre = m.preemptions - last_pre
                q, h = m.prefix_queries - last_q, m.prefix_hits - last_h
                self.log.vl(
                    f"Engine 000: Avg prompt throughput: {p / dt:.1f} tokens/s, Avg generation throughput: {g / dt:.1f} tokens/s, "
                    f"Running: {len(self.running)} reqs, Waiting: {len(self.waiting)} reqs, "
                    + (f"Preemptions: {pre}, " if pre else "")
                    + f"GPU KV cache usage: {usage:.1f}%"
                    + (
                        f", Prefix cache hit rate: {100.0 * h / q if q else 0.0:.1f}%" if self.cache is not None else ""
                    ),
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
            last_q, last_h, last_pre = m.prefix_queries, m.prefix_hits, m.preemptions
