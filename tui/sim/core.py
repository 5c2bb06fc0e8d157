"""The simulated server's state: its configuration, simulated time, GPU state and the tasks that
live as long as it does. The scheduler, both engines' start-up and the entry point build on it
(:class:`tui.sim.engine.Sim`)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import sys
import traceback
from collections import deque
from typing import Any, Callable, Coroutine

from tui.sim import capmodel, raynode, rendezvous
from tui.sim.api import Api, Req
from tui.sim.clock import FixedClock
from tui.sim.gpus import ServerRecord, load_config
from tui.sim.httpd import HttpServer
from tui.sim.metrics import Metrics
from tui.sim.prefix import BLOCK, PrefixCache
from tui.sim.simlog import Fatal, Log, model_facts


class SimCore(Api):
    """What every part of the simulated server shares."""

    #: the event loop's time when the server started (the start-up's fractions count from it)
    t0: float

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
        #: how it serves: the performance model, the running-request cap, the prefill budget and chunk
        self.serve = capmodel.serve_config_of(engine, args, self.tp, os.environ)
        self.spec = self.serve.perf.spec
        self.perf = self.serve.perf
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
        #: tokens and verify steps since the last decode line (its ``accept len``), and since start
        #: (``/get_server_info``'s ``avg_spec_accept_length``, as SGLang's scheduler keeps it)
        self.accept_sum = 0
        self.accept_n = 0
        self.accept_total_sum = 0
        self.accept_total_n = 0
        self.last_gen_tput = 0.0
        self.rec_file = None
        if args.sim_record_timestamps:
            self.rec_file = open(  # noqa: SIM115 - open for the server's lifetime, closed on its last flush
                args.sim_record_timestamps, "a", buffering=1, encoding="utf-8"
            )
        self.fixed = args.sim_fixed_ttft_ms is not None or args.sim_fixed_itl_ms is not None
        self.max_running = self.serve.max_running
        self.prefill_budget = self.serve.prefill_budget
        self.decode_log_interval = max(1, args.decode_log_interval) if engine == "sglang" else 0
        self.metrics = Metrics(engine, self.served, tp=self.tp, spec_positions=self.spec.num_steps if self.spec else 0)
        #: the prefix cache (None where the flags disable it: SGLang --disable-radix-cache, vLLM
        #: --disable-prefix-caching) and the prefill chunk size (None: prompts are not split)
        self.cache: PrefixCache | None = None
        self.chunk_size = self.serve.chunk_size
        if engine == "sglang":
            caching = not args.disable_radix_cache
            block = args.page_size if args.page_size and args.page_size > BLOCK else BLOCK
        else:
            caching = args.enable_prefix_caching is not False
            block = args.block_size or BLOCK
        if caching:
            self.cache = PrefixCache(block)
        self.metrics.prefix_caching = caching
        #: the SGLang request being prefilled chunk by chunk
        self.chunked: Req | None = None
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
            except (OSError, ValueError):  # the reader is gone or stdout is closed: dying anyway
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return f.code

    def _ranks(self) -> list[int]:
        r = list(range(len(self.gpus) or 1))
        random.Random(self.seed + self.steps).shuffle(r)
        self.steps += 1
        return r

    # ------------------------------------------------------------------ vLLM start-up
    def w(self, rank: int) -> int:
        return self.pid + 2 + rank

    # ------------------------------------------------------------------ background tasks
    async def publisher(self) -> None:
        while True:
            b = len(self.running)
            self.util = 0 if b == 0 else min(100, int(60 + 40 * min(1.0, b / 8)))
            self.publish()
            await asyncio.sleep(0.5)


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
