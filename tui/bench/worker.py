"""One benchmark worker process (``python -m tui.bench.worker``), started by the runner.

Protocol on stdin/stdout (JSON lines):

1. stdin: the job (endpoint, its share of prompts, concurrency, rate, seed, warmup).
2. The worker runs its warmup requests, then prints ``{"ready": true}``.
3. stdin: ``go <t0>``: t0 is a ``perf_counter`` value in the near future, shared
   by all workers (CLOCK_MONOTONIC is system-wide on Linux).
4. stdout: ``{"s": sample}`` per finished request, ``{"tick": {...}}`` per
   second (new 1-s event bins, in-flight, CPU, loop lag), finally ``{"end": report}``.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import time
from typing import Any

from tui.bench.client import EndpointConfig, Live, RequestSpec, make_client, prepare, quiet_gc
from tui.bench.runner import BenchConfig, ClientMonitor, drive, warmup
from tui.util.aio import run_async

_pc = time.perf_counter


async def _main() -> int:
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, me.cancel)  # cancelled requests still report their partial sample
    reader = asyncio.StreamReader(limit=1 << 28)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    job = json.loads(await reader.readline())
    out = sys.stdout
    ep = EndpointConfig(**job["endpoint"])
    specs = [RequestSpec(**s) for s in job["specs"]]
    rate = math.inf if job["rate"] == "inf" else float(job["rate"])
    w = job["worker"]

    def send(obj: Any) -> None:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    async with make_client(transport=job["transport"], read_timeout=job["read_timeout"]) as client:
        cfg = BenchConfig(url=ep.base_url, input_len=job["input_len"], output_len=job["output_len"],
                          seed=job["seed"])
        await warmup(client, ep, job["warmup"], cfg, job["concurrency"])
        prepared = [prepare(client, ep, sp) for sp in specs]
        send({"ready": True})
        line = (await reader.readline()).decode().split()
        if len(line) != 2 or line[0] != "go":
            return 2
        t0 = float(line[1])
        delay = t0 - _pc()
        if delay > 0:
            await asyncio.sleep(delay)
        live = Live(t0)
        mon = ClientMonitor()
        mon.start()
        sent_bins: dict[int, int] = {}

        def on_sample(s: dict[str, Any]) -> None:
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
            send({"tick": {"bins": new, "in_flight": live.in_flight, "cpu": mon.last_cpu,
                           "lag_ms": mon.last_lag_ms}})

        async def ticker() -> None:
            while True:
                await asyncio.sleep(1.0 - ((_pc() - t0) % 1.0))
                flush_tick()

        tk = asyncio.create_task(ticker())
        try:
            with quiet_gc():
                await drive(client, ep, specs, concurrency=job["concurrency"], rate=rate,
                            burstiness=job["burstiness"], seed=job["seed"], t0=t0, live=live,
                            on_sample=on_sample, prepared=prepared)
        finally:
            tk.cancel()
            flush_tick()
            rep = await mon.stop()
            send({"end": rep})
    return 0


def main() -> int:
    try:
        return run_async(_main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
