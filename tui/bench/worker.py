"""One benchmark worker process (``python -m tunedeck.bench.worker``), started by the runner.

Protocol on stdin/stdout (JSON lines):

1. stdin: the job (endpoint, its share of prompts, concurrency, rate, seed, warmup, preconnect).
2. The worker runs its warmup requests, opens its connections, then prints
   ``{"ready": true, "connect_times": [s, ...]}``.
3. stdin: ``go <t0>``: t0 is a ``perf_counter`` value in the near future, shared
   by all workers (CLOCK_MONOTONIC is system-wide on Linux).
4. stdout: ``{"s": sample}`` per finished request, ``{"tick": {...}}`` per
   second (new 1-s event bins, in-flight, CPU, loop lag, load, steal), finally
   ``{"end": report}`` (``t_end``: when its last response finished).

The worker keeps reading stdin: end of file means the parent is gone (even
after ``kill -9``), and the worker exits at once, so no worker outlives its
benchmark.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from typing import Any, Dict, Optional

from tunedeck.bench.client import EndpointConfig, Live, RequestSpec, make_client, prepare, quiet_gc
from tunedeck.bench.config import BenchConfig, auth_headers
from tunedeck.bench.health import ClientMonitor
from tunedeck.bench.levels import LoadShape, drive, warmup
from tunedeck.bench.records import SampleRecord
from tunedeck.util.aio import run_async

_pc = time.perf_counter

#: exit status when the parent went away
ORPHANED = 3


def _orphaned() -> None:
    try:
        sys.stderr.write("tunedeck.bench.worker: parent process gone (stdin closed); exiting\n")
        sys.stderr.flush()
    finally:
        os._exit(ORPHANED)


async def _main() -> int:
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, me.cancel)  # cancelled requests still report their partial sample
    reader = asyncio.StreamReader(limit=1 << 28)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    first = await reader.readline()
    if not first:
        _orphaned()
    job = json.loads(first)
    go: "asyncio.Future[Optional[float]]" = loop.create_future()

    async def watch_parent() -> None:
        # the only other line is "go <t0>"; after it, end of file means the parent died
        while True:
            line = await reader.readline()
            if not line:
                _orphaned()
            parts = line.decode("utf-8", "replace").split()
            if not go.done():
                ok = len(parts) == 2 and parts[0] == "go"
                go.set_result(float(parts[1]) if ok else None)

    watcher = asyncio.ensure_future(watch_parent())
    out = sys.stdout
    ep = EndpointConfig(**job["endpoint"])
    specs = [RequestSpec(**s) for s in job["specs"]]
    shape = LoadShape(
        concurrency=job["concurrency"],
        rate=math.inf if job["rate"] == "inf" else float(job["rate"]),
        burstiness=job["burstiness"],
        seed=job["seed"],
        preopen=bool(job.get("preconnect")),
    )
    w = job["worker"]

    def send(obj: Any) -> None:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    try:
        headers = auth_headers(job.get("api_key_file"))
        async with make_client(read_timeout=job["read_timeout"], headers=headers) as client:
            cfg = BenchConfig(
                url=ep.base_url,
                input_len=job["input_len"],
                output_len=job["output_len"],
                seed=shape.seed,
                token_ids=bool(job.get("token_ids", True)),
            )
            await warmup(client, ep, job["warmup"], cfg, shape.concurrency)
            prepared = [prepare(client, ep, sp) for sp in specs]
            connect = await client.warm(ep.url, int(job.get("preconnect") or 0))
            send({"ready": True, "connect_times": connect})
            t0 = await go
            if t0 is None:
                return 2
            live = Live(t0)
            mon = ClientMonitor()
            mon.start()
            sent_bins: Dict[int, int] = {}
            t_end: Optional[float] = None

            def on_sample(s: SampleRecord) -> None:
                s.pop("_events", None)
                s["worker"] = w
                send({"s": s})

            def flush_tick() -> None:
                new = {}
                for k, v in list(live.bins.items()):
                    d = v - sent_bins.get(k, 0)
                    if d:
                        new[k] = d
                        sent_bins[k] = v
                send(
                    {
                        "tick": {
                            "bins": new,
                            "in_flight": live.in_flight,
                            "cpu": mon.last_cpu,
                            "lag_ms": mon.last_lag_ms,
                            "load1": mon.last_load1,
                            "steal": mon.last_steal,
                        }
                    }
                )

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(1.0 - ((_pc() - t0) % 1.0))
                    flush_tick()

            tk = asyncio.ensure_future(ticker())
            try:
                with quiet_gc():
                    await drive(client, ep, specs, shape, t0=t0, live=live, on_sample=on_sample, prepared=prepared)
                    t_end = _pc()
            finally:
                tk.cancel()
                flush_tick()
                rep = await mon.stop()
                rep["t_end"] = t_end
                send({"end": rep})
    finally:
        watcher.cancel()
    return 0


def main() -> int:
    try:
        return run_async(_main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 130
    except BrokenPipeError:
        _orphaned()
        return ORPHANED


if __name__ == "__main__":
    raise SystemExit(main())
