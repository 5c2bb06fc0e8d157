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
import logging
import signal
import sys

from tui.engines import VLLM_SPEC_METHODS
from tui.sim.engine_args import (
    VLLM_BACKENDS,
    help_search,
    preprocess_vllm_argv,
    sglang_parser,
    vllm_parser,
)
from tui.sim.simlog import Fatal
from tui.sim.vllm_startup import VllmStartup
from tui.util.aio import cancel_and_wait

log = logging.getLogger(__name__)


class Sim(VllmStartup):
    """One simulated server: start-up, serving, shutdown."""

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
                await cancel_and_wait([start], "simulated start-up")
            await self.shutdown()
        finally:
            self.record.remove()
            if self.ray_nodes is not None:
                self.ray_nodes.close()
            if self.rec_file:
                self.rec_file.close()
        return code

    async def shutdown(self) -> None:
        self.phase = "stopping"
        if self.http is not None:
            if self.e == "vllm":
                self.log.vl("Shutting down FastAPI HTTP server.", where="launcher.py:110")
            self.log.uvicorn("Shutting down")
            for r in [*self.running, *self.waiting, *([self.chunked] if self.chunked is not None else [])]:
                self._abort(r)
            await self.http.close()
            self.log.uvicorn("Waiting for application shutdown.")
            self.log.uvicorn("Application shutdown complete.")
            self.log.uvicorn(f"Finished server process [{self.pid}]")
        elif self.sock is not None:
            self.sock.close()
        self.set_mem(0.0, 0)

    # ------------------------------------------------------------------ start-up
    def log_accepted(self) -> None:
        """One line per real flag of the release that the simulator takes but does not model."""
        for opt, vals in self.a.sim_accepted or ():
            text = f"tunedeck sim: {' '.join((opt, *vals))}: accepted, not simulated"
            if self.e == "sglang":
                self.log.sg(text)
            else:
                self.log.vl(text, level="WARNING", where="engine_args.py:1")

    async def startup(self) -> None:
        self.log_accepted()
        if self.e == "sglang":
            await self.startup_sglang()
        else:
            await self.startup_vllm()
        self.phase = "warmup"
        self.background(self.publisher(), "publisher")
        if not self.fixed:
            # fixed timing bypasses the model: its clock writes every chunk. A scheduler started
            # beside it found the clock's requests in ``running`` with nothing to batch, and spun
            # without a turn of the loop (the server hung in its warm-up, deaf to SIGTERM)
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
        if self.a.sim_fault == "crash":
            await asyncio.sleep(self.a.sim_crash_after)
            self.crash()
        await asyncio.Event().wait()  # until cancelled by shutdown

    def crash(self) -> None:
        """``--sim-fault crash``: a served engine dies of a CUDA error in its scheduler, as a
        real one does (the traceback, then the engine's own report of it, then killed)."""
        L = self.log
        if self.e == "sglang":
            L.sg(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process\n'
                "    scheduler.event_loop_overlap()\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1021, in event_loop_overlap\n'
                "    batch_result = self.run_batch(batch)\n"
                "RuntimeError: CUDA error: an illegal memory access was encountered\n",
                rank=0,
            )
            L.sg("Received sigquit from a child process. It usually means the child failed.")
            raise Fatal(137, kill=True)
        ec = self.pid + 1
        for line in [
            "EngineCore encountered a fatal error.",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1010, in run_engine_core',
            "    engine_core.run_busy_loop()",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]:
            L.vl(line, proc="EngineCore", pid=ec, level="ERROR", where="core.py:1010")
        raise Fatal(1)


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
        log.error("the simulated %s could not start", engine, exc_info=True)
        print(f"tunedeck sim {engine}: {e}", file=sys.stderr)
        return 2
    from tui.util.aio import run_async

    try:
        return run_async(sim.run())
    except KeyboardInterrupt:
        return 0
