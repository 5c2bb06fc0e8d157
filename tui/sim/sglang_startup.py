"""SGLang's start-up as its log shows it (serving-engines.md §4.2): ranks, weights, KV cache,
CUDA graphs, warm-up; and its failures (OOM, NCCL, a crash while serving) in its own words."""

from __future__ import annotations

import asyncio
import random
from typing import Callable, NoReturn

from tunedeck.sim import rendezvous
from tunedeck.sim.capmodel import SGLANG_CHUNK
from tunedeck.sim.formats import Formats, Req
from tunedeck.sim.gpus import used_by_others
from tunedeck.sim.simlog import Fatal, sglang_capture_bs, tqdm_frame
from tunedeck.sim.startup import KitPart, StartupKit, Task, bind_socket

#: the frames a scheduler process's traceback opens with when it dies while it is being built
_SCHEDULER_INIT = (
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    "                ^^^^^^^^^^\n"
)


class SglangStartup(KitPart):
    """SGLang's :class:`tunedeck.sim.startup.EngineStartup`; its warm-up request goes through
    ``formats`` and ``submit`` like a client's."""

    def __init__(self, kit: StartupKit, formats: Formats, submit: Callable[[Req], None]) -> None:
        super().__init__(kit)
        self.formats = formats
        self.submit = submit

    def note(self, text: str) -> None:
        self.log.sg(text)

    def serving_tasks(self) -> list[Task]:
        return []

    async def warm_up(self) -> None:
        if not self.a.skip_server_warmup:
            await self._warmup_request()

    def ready(self) -> None:
        self.log.sg("The server is fired up and ready to roll!")

    def stopping(self) -> None:
        pass

    def crash(self) -> NoReturn:
        self.log.sg(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1021, in event_loop_overlap\n'
            "    batch_result = self.run_batch(batch)\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            rank=0,
        )
        self.log.sg("Received sigquit from a child process. It usually means the child failed.")
        raise Fatal(137, kill=True)

    async def start(self) -> None:
        a = self.a
        L = self.log
        total = self.cfg.gpu_cfg.memory_total_mib / 1024.0
        f = self.cfg.facts
        # --cpu-offload-gb: that many GB of each rank's weights stay in host memory
        self.state.weights_gib = max(0.0, f["weights_gib_total"] / self.cfg.tp - a.cpu_offload_gb)
        mfs = a.mem_fraction_static or (0.88 if total > 100 else 0.85)
        baseline = 1.14
        ctx = 0.52
        other = used_by_others(self.cfg.gpus, self.cfg.pid) / 1024.0  # memory other servers hold on our GPUs
        args_d = {k: v for k, v in vars(a).items() if not k.startswith("sim_")}
        L.sg(f"server_args={args_d!r}")
        if not a.attention_backend:
            L.sg(f"Attention backend not specified. Use {'fa3'} backend by default.")
        if self.cfg.spec and not a.max_running_requests:
            L.sg(
                "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
            )
        if not self.cfg.gpus or len(self.cfg.gpus) < self.cfg.tp:
            L.sg(
                "Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: CUDA error: invalid device ordinal\n",
                rank=len(self.cfg.gpus),
            )
            L.sg("Received sigquit from a child process. It usually means the child failed.")
            raise Fatal(137, kill=True)
        self.kit.set_mem(ctx, 0)
        await self.kit.at(0.02)
        self._each_rank("Init parallel begin.")
        await rendezvous.join(self.kit)
        await self.kit.at(0.05)
        if a.sim_fault == "nccl":
            self._nccl_failure()
        for r in self.kit.ranks():
            L.sg(f"Init parallel ends. elapsed={self.kit.elapsed(0.02, 0.05):.2f} s", rank=r)
            L.sg(f"Memory baseline taken. mem usage={baseline:.2f} GB", rank=r)
        self.kit.set_mem(ctx + baseline)
        await self.kit.at(0.07)
        avail0 = total - baseline - ctx - other
        for r in self.kit.ranks():
            L.sg(f"Load weight begin. avail mem={avail0 + 0.01 * (r % 2):.2f} GB", rank=r)
        if self.state.weights_gib > avail0:
            self._oom(f"Tried to allocate {min(self.state.weights_gib, 20):.2f} GiB", during="load_model")
        # weight shards bar (TP0), frames joined by \r, no trailing newline per frame
        n_sh = f["shards"]
        f0, f1 = 0.08, 0.50
        L.raw("\r" + tqdm_frame("Loading safetensors checkpoint shards", 0, n_sh, 0, shards=True))
        for i in range(1, n_sh + 1):
            await self.kit.at(f0 + (f1 - f0) * i / n_sh)
            el = self.kit.elapsed(f0, f0 + (f1 - f0) * i / n_sh)
            L.raw("\r" + tqdm_frame("Loading safetensors checkpoint shards", i, n_sh, el, shards=True))
            self.kit.set_mem(ctx + baseline + self.state.weights_gib * i / n_sh, 3, force=False)
        L.raw(
            "\r"
            + tqdm_frame("Loading safetensors checkpoint shards", n_sh, n_sh, self.kit.elapsed(f0, f1), shards=True)
            + "\n"
        )
        await self.kit.at(0.52)
        avail1 = avail0 - self.state.weights_gib
        quant = ", quant=fp8" if f["bytes_per_param"] == 1.0 else ""
        self._each_rank(
            f"Load weight end. elapsed={self.kit.elapsed(0.07, 0.52):.2f} s, type={f['arch']}{quant}, "
            f"avail mem={avail1:.2f} GB, mem usage={self.state.weights_gib:.2f} GB."
        )
        await self.kit.at(0.55)
        kv = total * mfs - self.state.weights_gib - baseline - other
        if a.sim_fault == "oom":
            self._oom(f"Tried to allocate {max(kv, 1.0) / 2:.2f} GiB", during="kv")
        if kv < 1.0:
            self._schedulers_fail(
                lambda r: (
                    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1712, in init_memory_pool\n'
                    "    raise RuntimeError(\n"
                    f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={mfs}\n"
                )
            )
        self.state.kv_gib = kv
        self.state.kv_tokens = int(kv * (1 << 30) / f["kv_bytes_per_token"])
        if a.max_total_tokens:
            self.state.kv_tokens = min(self.state.kv_tokens, a.max_total_tokens)
        avail2 = avail1 - kv
        dtype = "torch.float8_e4m3fn" if a.kv_cache_dtype.startswith("fp8") else "torch.bfloat16"
        for r in self.kit.ranks():
            if f["mla"]:
                L.sg(
                    f"KV Cache is allocated. dtype: {dtype}, #tokens: {self.state.kv_tokens}, KV size: {kv:.2f} GB",
                    rank=r,
                )
            else:
                L.sg(
                    f"KV Cache is allocated. dtype: {dtype}, #tokens: {self.state.kv_tokens}, K size: {kv / 2:.2f} GB, V size: {kv / 2:.2f} GB",
                    rank=r,
                )
            L.sg(f"Memory pool end. avail mem={avail2:.2f} GB", rank=r)
        self.kit.set_mem(ctx + baseline + self.state.weights_gib + kv, 0)
        self.state.metrics.max_total_tokens = self.state.kv_tokens
        self.state.metrics.kv_cache_gb = round(kv, 2)
        # CUDA graphs
        await self.kit.at(0.58)
        self.state.graph_gib = 0.0
        if not self.cfg.perf.enforce_eager:
            max_bs = self.cfg.perf.cuda_graph_max_bs
            bs_list = sglang_capture_bs(max_bs)
            target = "target verify" if self.cfg.spec else "target decode"
            k = self.cfg.spec.draft_tokens if self.cfg.spec else 1
            self._each_rank(
                f"Capture {target} CUDA graph begin. backend=full, num_tokens_per_req={k}, avail mem={avail2:.2f} GB"
            )
            f0, f1 = 0.60, 0.90
            n = len(bs_list)
            graph_total = 0.82
            L.raw("\r" + tqdm_frame("", 0, n, 0))
            hang_at = n // 2 if a.sim_fault == "hang" else None
            for i, bs in enumerate(reversed(bs_list)):
                am = avail2 - graph_total * i / n
                desc = f"Capturing batches (bs={bs} avail_mem={am:.2f} GB)"
                el = self.kit.elapsed(f0, f0 + (f1 - f0) * i / n)
                L.raw("\r" + tqdm_frame(desc, i, n, el))
                if hang_at is not None and i == hang_at:
                    self.kit.set_mem(ctx + baseline + self.state.weights_gib + kv + graph_total * i / n, 35)
                    await asyncio.Event().wait()  # stuck in capture forever
                await self.kit.at(f0 + (f1 - f0) * (i + 1) / n)
                L.raw("\r" + tqdm_frame(desc, i + 1, n, self.kit.elapsed(f0, f0 + (f1 - f0) * (i + 1) / n)))
                self.kit.set_mem(
                    ctx + baseline + self.state.weights_gib + kv + graph_total * (i + 1) / n, 40, force=False
                )
            L.raw("\r" + tqdm_frame(desc, n, n, self.kit.elapsed(f0, f1)) + "\n")
            self.state.graph_gib = graph_total
            await self.kit.at(0.91)
            self._each_rank(
                f"Capture {target} CUDA graph end. bs={bs_list}, elapsed={self.kit.elapsed(0.58, 0.91):.2f} s, "
                f"mem usage={graph_total:.2f} GB, avail mem={avail2 - graph_total:.2f} GB."
            )
        await self.kit.at(0.92)
        chunked = a.chunked_prefill_size if a.chunked_prefill_size is not None else SGLANG_CHUNK
        L.sg(
            f"max_total_num_tokens={self.state.kv_tokens}, chunked_prefill_size={chunked}, max_prefill_tokens={a.max_prefill_tokens}, "
            f"max_running_requests={self.cfg.max_running}, context_len={self.cfg.context_len}, available_gpu_mem={avail2 - self.state.graph_gib:.2f} GB",
            rank=0,
        )
        self.kit.set_mem(ctx + baseline + self.state.weights_gib + kv + self.state.graph_gib, 0)
        await self.kit.at(0.94)
        await rendezvous.wait_headless(self.kit)
        L.uvicorn(f"Started server process [{self.cfg.pid}]")
        L.uvicorn("Waiting for application startup.")
        L.uvicorn("Application startup complete.")
        try:
            if a.sim_fault == "port":
                raise OSError(98, "address already in use")
            sock = self.state.sock = bind_socket(self.cfg.host, self.cfg.port)
        except OSError as e:
            L.uvicorn(
                f"[Errno {e.errno}] error while attempting to bind on address ('{self.cfg.host}', {self.cfg.port}): "
                f"{(e.strerror or str(e)).lower()}",
                level="ERROR",
            )
            L.uvicorn("Waiting for application shutdown.")
            L.uvicorn("Application shutdown complete.")
            raise Fatal(1) from None
        http = self.kit.serve()
        await http.start(sock)
        shown = self.cfg.host if self.cfg.host not in ("", "::") else "0.0.0.0"
        L.uvicorn(f"Uvicorn running on http://{shown}:{sock.getsockname()[1]} (Press CTRL+C to quit)")
        self.state.metrics.startup = {"total": round(self.cfg.load_s * 0.94, 2)}

    def _each_rank(self, text: str) -> None:
        """``text`` from every rank of this node, in the order the ranks print it this time."""
        for r in self.kit.ranks():
            self.log.sg(text, rank=r)

    def _schedulers_fail(self, trace: Callable[[int], str]) -> NoReturn:
        """Every rank's scheduler dies with ``trace(rank)`` (its traceback's frames and exception);
        the launcher then gets a child's sigquit and the process ends (exit 137)."""
        for r in self.kit.ranks():
            self.log.sg("Scheduler hit an exception: Traceback (most recent call last):\n" + trace(r), rank=r)
        self.log.sg("Received sigquit from a child process. It usually means the child failed.")
        raise Fatal(137, kill=True)

    def _nccl_failure(self) -> NoReturn:
        self._schedulers_fail(
            lambda r: (
                _SCHEDULER_INIT
                + '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/device_communicators/pynccl.py", line 113, in __init__\n'
                "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(\n"
                "                            ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 374, in NCCL_CHECK\n'
                '    raise RuntimeError(f"NCCL error: {error_str}")\n'
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
            )
        )

    def _oom(self, tried: str, during: str) -> NoReturn:
        total = self.cfg.gpu_cfg.memory_total_mib / 1024.0
        where = (
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/mem_cache/memory_pool.py", line 612, in _create_buffers\n'
            "    torch.zeros(\n"
            if during == "kv"
            else '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_loader/loader.py", line 584, in load_model\n'
            "    model = _initialize_model(\n"
        )
        self._schedulers_fail(
            lambda r: (
                _SCHEDULER_INIT
                + where
                + f"torch.OutOfMemoryError: CUDA out of memory. {tried}. GPU {r} has a total capacity of {total:.2f} GiB "
                f"of which 1.06 GiB is free. Including non-PyTorch memory, this process has {total - 1.06:.2f} GiB memory in use. "
                f"Of the allocated memory {total - 2.5:.2f} GiB is allocated by PyTorch, and 412.31 MiB is reserved by PyTorch but "
                "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
            )
        )

    async def _warmup_request(self) -> None:
        peer = f"127.0.0.1:{random.Random(self.cfg.seed).randint(33000, 60000)}"
        await self.kit.at(0.96)
        self.log.uvicorn(f'{peer} - "GET /model_info HTTP/1.1" 200 OK')
        req = self.formats.new_req("generate", stream=False, prompt_tokens=7, max_tokens=8, ignore_eos=True)
        req.internal = True
        req.done = asyncio.get_running_loop().create_future()
        self.submit(req)
        await req.done
        self.log.uvicorn(
            f'{peer.rsplit(":", 1)[0]}:{int(peer.rsplit(":", 1)[1]) + 2} - "POST /generate HTTP/1.1" 200 OK'
        )
        await self.kit.at(1.0)
