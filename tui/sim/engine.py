"""``tunedeck sim sglang|vllm``: a simulated inference server, one real process.

Start-up prints the engine's real log lines in order (see serving-engines.md
§4.2/§4.3) spread over ``--sim-load-seconds``; the HTTP port is bound where the
engine binds it (vLLM: before loading, accepting only once ready; SGLang: after
CUDA-graph capture); then it serves the OpenAI API with continuous batching
driven by :mod:`tunedeck.sim.perf`, streams SSE in the engine's exact format, keeps
Prometheus metrics and prints the runtime stat lines. Everything goes to
stdout, flushed per line, so a log tail sees progress live.

:class:`SimServer` is built by composition: it owns the typed state
(:class:`tunedeck.sim.state.ServerState`), the response formats, the scheduler, the HTTP API and the
engine's start-up (:class:`tunedeck.sim.startup.EngineStartup`: SGLang's or vLLM's, siblings), and
hands each part only what it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import traceback
from typing import Any, Coroutine

from tunedeck.engines import VLLM_SPEC_METHODS
from tunedeck.sim.api import Api
from tunedeck.sim.engine_args import VLLM_BACKENDS, help_search
from tunedeck.sim.formats import Formats
from tunedeck.sim.httpd import HttpServer
from tunedeck.sim.scheduler import Scheduler
from tunedeck.sim.sglang_args import sglang_parser
from tunedeck.sim.sglang_startup import SglangStartup
from tunedeck.sim.simlog import Fatal
from tunedeck.sim.startup import EngineStartup, LoadClock, StartupKit
from tunedeck.sim.state import server_state, sim_config
from tunedeck.sim.vllm_args import preprocess_vllm_argv, vllm_parser
from tunedeck.sim.vllm_startup import VllmStartup
from tunedeck.util.aio import cancel_and_wait

log = logging.getLogger(__name__)


class SimServer:
    """One simulated server: start-up, serving, shutdown."""

    def __init__(self, engine: str, args: argparse.Namespace) -> None:
        cfg = self.cfg = sim_config(engine, args)
        state = self.state = server_state(cfg)
        self.formats = Formats(cfg.engine, cfg.seed, cfg.served, cfg.spec, cfg.cache_block)
        self.scheduler = Scheduler(state, self.formats)
        self.api = Api(state, self.formats, self.scheduler.submit, self.scheduler.update_gauges)
        self.clock = LoadClock(cfg.load_s, cfg.speed)
        kit = StartupKit(state, self.clock, self._new_http, self.background)
        self.startup: EngineStartup = (
            SglangStartup(kit, self.formats, self.scheduler.submit) if engine == "sglang" else VllmStartup(kit)
        )
        #: the tasks that live as long as the server (scheduler, metrics publisher, …): referenced
        #: here, and a crash of one ends the server loudly instead of leaving it hung
        self._background_tasks: set[asyncio.Task[None]] = set()

    def _new_http(self) -> HttpServer:
        return HttpServer(self.api.handle, self.api.access_log)

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.clock.t0 = loop.time()
        self.scheduler.attach(loop)
        stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop_event.set)
            except (NotImplementedError, RuntimeError):
                pass
        start = asyncio.create_task(self.serve())
        stopper = asyncio.create_task(stop_event.wait())
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
                await cancel_and_wait([start], "simulated start-up")
            await self.shutdown()
        finally:
            self.state.close_files()
        return code

    async def shutdown(self) -> None:
        state = self.state
        L = state.log
        state.phase = "stopping"
        if state.http is not None:
            self.startup.stopping()
            L.uvicorn("Shutting down")
            for r in [*state.running, *state.waiting, *([state.chunked] if state.chunked is not None else [])]:
                self.scheduler.abort(r)
            await state.http.close()
            L.uvicorn("Waiting for application shutdown.")
            L.uvicorn("Application shutdown complete.")
            L.uvicorn(f"Finished server process [{self.cfg.pid}]")
        elif state.sock is not None:
            state.sock.close()
        state.gpu.set_mem(0.0, 0)

    async def serve(self) -> None:
        """Start up, serve until cancelled by the shutdown (or a ``--sim-fault crash``)."""
        a = self.cfg.args
        for opt, vals in a.sim_accepted or ():
            # one line per real flag of the release that the simulator takes but does not model
            self.startup.note(f"tunedeck sim: {' '.join((opt, *vals))}: accepted, not simulated")
        await self.startup.start()
        self.state.phase = "warmup"
        self.background(self.publisher(), "publisher")
        if not self.cfg.fixed:
            # fixed timing bypasses the model: its clock writes every chunk. A scheduler started
            # beside it found the clock's requests in ``running`` with nothing to batch, and spun
            # without a turn of the loop (the server hung in its warm-up, deaf to SIGTERM)
            self.background(self.scheduler.run(), "scheduler")
        for coro, name in self.startup.serving_tasks():
            self.background(coro, name)
        await self.startup.warm_up()
        self.state.phase = "ready"
        gc.collect()
        gc.freeze()  # as vLLM does once started: the start-up heap stays out of every later collection
        self.startup.ready()
        if a.sim_fault == "crash":
            await asyncio.sleep(a.sim_crash_after)
            self.startup.crash()
        await asyncio.Event().wait()  # until cancelled by shutdown

    # ------------------------------------------------------------------ background tasks
    async def publisher(self) -> None:
        gpu = self.state.gpu
        while True:
            b = len(self.state.running)
            gpu.util = 0 if b == 0 else min(100, int(60 + 40 * min(1.0, b / 8)))
            gpu.publish()
            await asyncio.sleep(0.5)

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
        self.state.close_files()
        if self.state.sock:
            self.state.sock.close()
        if f.kill:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):  # the reader is gone or stdout is closed: dying anyway
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        return f.code


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
        sim = SimServer(engine, args)
    except Exception as e:  # bad simulator config (gpus.json, record path)
        log.error("the simulated %s could not start", engine, exc_info=True)
        print(f"tunedeck sim {engine}: {e}", file=sys.stderr)
        return 2
    from tunedeck.util.aio import run_async

    try:
        return run_async(sim.run())
    except KeyboardInterrupt:
        return 0
