#!/usr/bin/env python3
"""What the dashboard itself costs: CPU (% of one core) and RSS while it watches a host.

    python benchmarks/dashboard_tui_cost.py [--seconds 60] [--warmup 5] [--source demo|fake] [--no-server] [--json-only]

The dashboard runs as ``python -m tunedeck --demo`` in a pseudo-terminal of
120×36 (the real terminal driver and renderer, exactly what a user runs),
watching the demo host: 8 simulated GPUs and one simulated SGLang server
(started first with ``tunedeck launch --demo --wait``, stopped at the end),
polled at 1 Hz. Simulator state and run records go to a temporary folder. ``--source fake`` runs the same app on in-process scripted
collectors instead (no simulator needed). This process drains the pty and
samples the dashboard process with psutil once a second after the warm-up;
the simulator's processes (children: nvidia-smi shims, sim server) are
measured separately and are not counted as the dashboard's cost.

Prints a table and one JSON line. Targets: <= 3 % of one core, <= 150 MB RSS.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
CPU_TARGET = 3.0
RSS_TARGET_MB = 150.0


def _child_fake() -> int:
    """The app on scripted collectors (8 GPUs at 1 Hz, host, one server), in this terminal."""
    sys.path.insert(0, str(REPO))
    from tests.ui_fakes import FakeHost, FakeServers, TickingGpu, host_stats, server
    from tunedeck.ui.app import make_app

    app = make_app(
        gpu=TickingGpu(8, 1.0),
        host_source=FakeHost(host_stats()),
        servers=FakeServers((server(),)),
        target="fake",
        interval=1.0,
    )
    app.run()
    return 0


def _spawn(argv: list[str], cols: int, rows: int) -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(
        os.environ,
        TERM="xterm-256color",
        COLUMNS=str(cols),
        LINES=str(rows),
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TEXTUAL", None)
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env, start_new_session=True, close_fds=True
    )
    os.close(slave)
    return proc, master


def _drain(master: int, until: float, sink: bytearray) -> None:
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return
        r, _, _ = select.select([master], [], [], left)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            sink += data
            del sink[:-65536]  # keep only the tail (for error reports)


def _tree_cpu(p: psutil.Process) -> tuple[float, list[psutil.Process]]:
    kids = []
    total = 0.0
    try:
        kids = p.children(recursive=True)
    except psutil.Error:
        pass
    for k in kids:
        try:
            t = k.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total, kids


SERVER_PORT = 30299


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "tunedeck", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_sim_server() -> None:
    r = _cli(
        "launch",
        "--demo",
        "--engine",
        "sglang",
        "--port",
        str(SERVER_PORT),
        "--wait",
        "--timeout",
        "90",
        "--cmd",
        "sglang",
        "serve",
        "--model-path",
        "/models/DeepSeek-V3",
        "--tp",
        "8",
        "--port",
        str(SERVER_PORT),
        "--enable-metrics",
    )
    if r.returncode != 0:
        raise SystemExit(f"could not start the simulated server:\n{r.stdout[-1000:]}{r.stderr[-1000:]}")


def stop_sim_server() -> None:
    _cli("stop", "--demo", "--yes", timeout=120)


def isolate() -> str:
    """Point the simulator and tunedeck's state at a fresh temporary folder."""
    import tempfile

    base = tempfile.mkdtemp(prefix="tunedeck-cost-")
    for var, sub in (
        ("TUNEDECK_SIM_STATE", "sim"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("TUNEDECK_HOME", "home"),
    ):
        os.environ[var] = os.path.join(base, sub)
    os.environ.setdefault("TUNEDECK_SIM_LOAD_S", "2")
    return base


def measure(source: str, seconds: float, warmup: float, cols: int = 120, rows: int = 36) -> dict:
    if source == "demo":
        argv = [sys.executable, "-m", "tunedeck", "--demo"]
    else:
        argv = [sys.executable, str(Path(__file__).resolve()), "--child-fake"]
    proc, master = _spawn(argv, cols, rows)
    out = bytearray()
    ps = psutil.Process(proc.pid)
    try:
        _drain(master, time.monotonic() + warmup, out)
        if proc.poll() is not None:
            raise SystemExit(
                f"dashboard exited during warm-up (rc {proc.returncode}):\n" + out.decode("utf-8", "replace")[-2000:]
            )
        t0 = time.monotonic()
        c0 = ps.cpu_times()
        k0, _ = _tree_cpu(ps)
        rss = []
        while time.monotonic() - t0 < seconds:
            _drain(master, min(t0 + seconds, time.monotonic() + 1.0), out)
            if proc.poll() is not None:
                raise SystemExit(f"dashboard exited early (rc {proc.returncode})")
            rss.append(ps.memory_info().rss)
        wall = time.monotonic() - t0
        c1 = ps.cpu_times()
        k1, kids = _tree_cpu(ps)
        cpu_s = (c1.user - c0.user) + (c1.system - c0.system)
        # simulator: children that ended (reaped: counted in children_*) + those still running
        reaped = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        sim_s = reaped + max(0.0, k1 - k0)
        result = {
            "source": source,
            "seconds": round(wall, 1),
            "terminal": f"{cols}x{rows}",
            "dashboard_cpu_percent": round(100 * cpu_s / wall, 2),
            "dashboard_cpu_seconds": round(cpu_s, 3),
            "dashboard_rss_mb": round(rss[-1] / 2**20, 1),
            "dashboard_rss_peak_mb": round(max(rss) / 2**20, 1),
            "simulator_cpu_percent": round(100 * sim_s / wall, 2),
            "simulator_processes": len(kids),
            "bytes_to_terminal_per_s": None,
        }
    finally:
        try:
            os.write(master, b"\x11")  # ctrl+q
        except OSError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.close(master)
    result["cpu_target_met"] = result["dashboard_cpu_percent"] <= CPU_TARGET
    result["rss_target_met"] = result["dashboard_rss_peak_mb"] <= RSS_TARGET_MB
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--source", choices=("demo", "fake"), default="demo")
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--no-server", action="store_true", help="demo: watch the GPUs only (no simulated server)")
    ap.add_argument("--child-fake", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_fake:
        return _child_fake()
    server = args.source == "demo" and not args.no_server
    base = isolate() if args.source == "demo" else None
    if server:
        start_sim_server()
    try:
        r = measure(args.source, args.seconds, args.warmup)
    finally:
        if server:
            stop_sim_server()
        if base:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    r["server"] = server
    r.pop("bytes_to_terminal_per_s", None)
    if not args.json_only:
        rows = [
            ("source", r["source"] + (" + 1 simulated SGLang server" if r["server"] else "")),
            ("duration", f"{r['seconds']} s (after {args.warmup:g} s warm-up), terminal {r['terminal']}"),
            ("dashboard CPU", f"{r['dashboard_cpu_percent']} % of one core (target <= {CPU_TARGET:g} %)"),
            (
                "dashboard RSS",
                f"{r['dashboard_rss_mb']} MB, peak {r['dashboard_rss_peak_mb']} MB (target <= {RSS_TARGET_MB:g} MB)",
            ),
            ("simulator CPU", f"{r['simulator_cpu_percent']} % ({r['simulator_processes']} processes, not counted)"),
        ]
        w = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{w}}  {v}")
    print(json.dumps(r))
    return 0 if r["cpu_target_met"] and r["rss_target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
