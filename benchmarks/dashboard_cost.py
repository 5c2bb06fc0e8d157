#!/usr/bin/env python3
"""Measure what watching a host costs: CPU and memory of the watcher process.

Starts a simulated vLLM server (``tunedeck sim vllm``) and a watcher process
that follows the 8 simulated GPUs of the demo host, the host figures and that
one server at ``--interval`` (default 1 s) for ``--duration`` seconds
(default 60), and samples the watcher's CPU time and RSS with psutil.

Watchers:
  --watch collectors   (default) the data path alone: GpuCollector stream,
                       HostCollector and ServerCollector in chained loops,
                       GpuHistory, in one asyncio process.
  --watch -- CMD ...   any command (for example the Textual dashboard run
                       headless); ``{port}`` in CMD is replaced by the
                       server's port and the demo environment is set.

CPU is counted after a warm-up (``--warmup``, default 5 s) and reported in
percent of one core, for the watcher itself; helper processes it starts (the
simulated ``nvidia-smi``, which on a real host runs on the remote side) are
reported separately. Target: at most 3 % of one core and 150 MB RSS.
Exit status 0 when the target is met, 1 when not, 2 when the setup failed.

    python benchmarks/dashboard_cost.py [--duration 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_CPU_PERCENT = 3.0
TARGET_RSS_MB = 150.0


# ---------------------------------------------------------------------- child: the watcher


def run_child(port: int, interval: float) -> int:
    sys.path.insert(0, str(REPO))
    import asyncio

    from tunedeck.collectors.gpu import GpuCollector
    from tunedeck.collectors.history import GpuHistory
    from tunedeck.collectors.hoststats import HostCollector
    from tunedeck.collectors.servers import ServerCollector, ServerSpec
    from tunedeck.services.targets import get_host
    from tunedeck.util.aio import run_async

    counts = {"gpu_blocks": 0, "gpu_errors": 0, "host_samples": 0, "server_samples": 0, "server_ready": 0}

    async def main() -> None:
        host = get_host(None, demo=True)
        gpu = GpuCollector(host, interval)
        history = GpuHistory()
        hc = HostCollector(host)
        sc = ServerCollector(host, [ServerSpec("sim", "vllm", port)])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)

        async def gpus() -> None:
            async for st in gpu.stream():
                history.add(st)
                counts["gpu_blocks" if st.state == "ok" else "gpu_errors"] += 1

        async def others() -> None:  # chained: the next poll starts after this one ended
            while True:
                t0 = time.monotonic()
                await hc.sample()
                counts["host_samples"] += 1
                (s,) = await sc.sample()
                counts["server_samples"] += 1
                counts["server_ready"] += s.state == "ready"
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))

        tasks = [asyncio.create_task(gpus()), asyncio.create_task(others())]
        await stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sc.aclose()

    run_async(main())
    print(json.dumps(counts), flush=True)
    return 0


# ---------------------------------------------------------------------- parent: the measurement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.25)
    return False


def _stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def measure(args: argparse.Namespace) -> dict[str, object]:
    import psutil

    state = Path(tempfile.mkdtemp(prefix="tunedeck-bench-cost-"))
    env = dict(os.environ)
    env["TUNEDECK_SIM_STATE"] = str(state)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tunedeck", "sim", "vllm", "serve", "Qwen/Qwen3-0.6B", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    watcher: subprocess.Popen[str] | None = None
    try:
        if not _wait_health(port, 60):
            raise RuntimeError(f"the simulated server did not become ready on port {port}")
        if args.cmd:
            argv = [a.replace("{port}", str(port)) for a in args.cmd]
        else:
            argv = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "--port",
                str(port),
                "--interval",
                str(args.interval),
            ]
        watcher = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        p = psutil.Process(watcher.pid)
        t_start = time.monotonic()
        rss_peak = 0
        helpers: dict[int, float] = {}
        cpu0 = None
        t0 = None
        while time.monotonic() - t_start < args.duration:
            time.sleep(0.5)
            if watcher.poll() is not None:
                raise RuntimeError(f"the watcher exited early with status {watcher.returncode}")
            with p.oneshot():
                ct = p.cpu_times()
                rss_peak = max(rss_peak, p.memory_info().rss)
            for ch in p.children(recursive=True):
                try:
                    t = ch.cpu_times()
                    helpers[ch.pid] = t.user + t.system
                except psutil.Error:
                    pass
            if cpu0 is None and time.monotonic() - t_start >= args.warmup:
                cpu0, t0 = ct.user + ct.system, time.monotonic()
                helpers0 = sum(helpers.values()) + ct.children_user + ct.children_system
        ct = p.cpu_times()
        t1 = time.monotonic()
        own = (ct.user + ct.system - (cpu0 or 0.0)) / max(1e-9, t1 - (t0 or t_start)) * 100
        helper_total = sum(helpers.values()) + ct.children_user + ct.children_system
        helper_pct = (helper_total - helpers0) / max(1e-9, t1 - (t0 or t_start)) * 100 if cpu0 is not None else None
        _stop(watcher)
        out = watcher.stdout.read() if watcher.stdout else ""
        counts = {}
        for line in out.splitlines()[::-1]:
            try:
                counts = json.loads(line)
                break
            except ValueError:
                continue
        rss_mb = rss_peak / 2**20
        return {
            "watch": "collectors" if not args.cmd else " ".join(argv),
            "duration_s": args.duration,
            "interval_s": args.interval,
            "gpus": 8,
            "servers": 1,
            "cpu_percent_of_core": round(own, 2),
            "helpers_cpu_percent_of_core": None if helper_pct is None else round(helper_pct, 2),
            "rss_peak_mb": round(rss_mb, 1),
            "counts": counts,
            "target": {"cpu_percent_of_core": TARGET_CPU_PERCENT, "rss_mb": TARGET_RSS_MB},
            "ok": own <= TARGET_CPU_PERCENT and rss_mb <= TARGET_RSS_MB,
        }
    finally:
        if watcher is not None:
            _stop(watcher)
        _stop(server)
        import shutil

        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds to watch (default 60)")
    ap.add_argument("--interval", type=float, default=1.0, help="refresh interval in seconds (default 1)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds not counted for CPU (default 5)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument(
        "--watch",
        nargs=argparse.REMAINDER,
        default=None,
        help="'collectors' (default) or '-- CMD ...' to measure another watcher",
    )
    args = ap.parse_args(argv)
    if args.child:
        return run_child(args.port, args.interval)
    watch = args.watch or ["collectors"]
    if watch and watch[0] == "--":
        watch = watch[1:]
    args.cmd = None if watch == ["collectors"] else watch
    if args.cmd == []:
        print("dashboard_cost: --watch -- needs a command", file=sys.stderr)
        return 2
    if args.duration <= args.warmup:
        print("dashboard_cost: --duration must be longer than --warmup", file=sys.stderr)
        return 2
    try:
        res = measure(args)
    except RuntimeError as exc:
        print(f"dashboard_cost: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(
            f"watched 8 simulated GPUs + 1 server at {args.interval:g} s for {args.duration:g} s ({res['watch']}):\n"
            f"  CPU {res['cpu_percent_of_core']}% of one core (target <= {TARGET_CPU_PERCENT}%), "
            f"peak RSS {res['rss_peak_mb']} MB (target <= {TARGET_RSS_MB:g} MB)\n"
            f"  helpers (simulated nvidia-smi, remote-side on a real host): "
            f"{res['helpers_cpu_percent_of_core']}% of one core\n"
            f"  received: {res['counts']}\n"
            f"  {'PASS' if res['ok'] else 'FAIL'}"
        )
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
