#!/usr/bin/env python3
"""What following a fast log costs: CPU (% of one core) of ``tunedeck logs --follow`` and of the
run view while a server log grows by 1,000 lines/s.

    python benchmarks/log_follow_cost.py [--seconds 60] [--warmup 10] [--rate 1000] [--json OUT]

A "server" is launched detached on the demo host (``tunedeck launch --demo --cmd``): a Python
loop that writes ``--rate`` lines a second (in batches every 10 ms) of real engine log lines,
~150 bytes each: SGLang's ``Decode batch`` line and vLLM's access-log line with its SGR colour.
Each line carries its sequence number, so each follower is checked to have kept up (its last
line shown is within one second of the last line written).

(a) ``tunedeck logs --follow RUN --demo`` in a pseudo-terminal of 160×48 (the real CLI writing to
a real terminal device, drained by this process);
(b) the run view: the dashboard's ``RunScreen`` (its follower, line splitter, sanitizer and
``ServerLog`` widget) pushed on the app under Textual's headless driver in this process, 160×48.
Headless: the app lays out and renders every refresh, but the driver writes no bytes to a terminal.

Each is sampled with psutil over ``--seconds`` after ``--warmup``: the follower's own process, and
separately the host side of the follow (on the demo host, the follow script, its ``tail -F`` and
heartbeat loop run as local child processes; over SSH they run on the host). Target: ≤ 10 % of a
core each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from dashboard_tui_cost import _drain, _spawn, _tree_cpu

CPU_TARGET = 10.0

WRITER = r"""
import sys, time
rate = float(sys.argv[1])
i = 0
t0 = time.time()
out = sys.stdout
while True:
    due = int((time.time() - t0) * rate)
    if due > i:
        buf = []
        for n in range(i + 1, due + 1):
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            if n % 4:
                buf.append(f"[{ts} TP0] Decode batch. #running-req: 64, #token: {40000 + n % 9973}, token usage: 0.31, "
                           f"cuda graph: True, gen throughput (token/s): 2841.07, #queue-req: 0, seq={n}\n")
            else:
                buf.append(f"\x1b[0;36m(APIServer pid=41356)\x1b[0;0m INFO:     127.0.0.1:{50000 + n % 9999} - "
                           f"\"POST /v1/chat/completions HTTP/1.1\" 200 OK seq={n}\n")
        out.write("".join(buf))
        out.flush()
        i = due
    time.sleep(0.01)
"""

_SEQ = re.compile(rb"seq=(\d+)")


def _isolate() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="tunedeck-follow-cost-"))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        os.environ[var] = str(tmp / var.lower())
    os.environ["TUNEDECK_HOME"] = str(tmp / "remote-home")
    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return tmp


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunedeck", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


def _last_seq(data: bytes) -> int:
    found = _SEQ.findall(data[-8192:])
    return int(found[-1]) if found else 0


def _written(log: Path) -> int:
    """The last sequence number the writer has written."""
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - 4096))
        return _last_seq(f.read())


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _window(seconds: float, me: psutil.Process, drain: Callable[[float], None]) -> dict[str, float]:
    """CPU seconds of ``me`` and of its children (the host side of the follow) over ``seconds``."""
    c0, k0 = _cpu(me), _tree_cpu(me)[0]
    r0 = me.cpu_times()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        drain(min(1.0, t0 + seconds - time.monotonic()))
    wall = time.monotonic() - t0
    c1, k1 = _cpu(me), _tree_cpu(me)[0]
    r1 = me.cpu_times()
    reaped = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    return {
        "seconds": round(wall, 1),
        "cpu_pct": round(100 * (c1 - c0) / wall, 1),
        "host_side_cpu_pct": round(100 * (reaped + max(0.0, k1 - k0)) / wall, 1),
        "rss_mb": round(me.memory_info().rss / 2**20, 1),
    }


def measure_cli(rid: str, log: Path, seconds: float, warmup: float) -> dict[str, Any]:
    proc, master = _spawn([sys.executable, "-m", "tunedeck", "logs", "--demo", "--follow", rid], 160, 48)
    out = bytearray()
    ps = psutil.Process(proc.pid)
    try:
        _drain(master, time.monotonic() + warmup, out)
        if proc.poll() is not None:
            raise SystemExit(f"logs --follow ended (rc {proc.returncode}):\n{out.decode(errors='replace')[-2000:]}")
        res = _window(seconds, ps, lambda s: _drain(master, time.monotonic() + s, out))
        shown, written = _last_seq(bytes(out)), _written(log)
    finally:
        proc.terminate()
        proc.wait(30)
        os.close(master)
    return {"what": "tunedeck logs --follow (pty 160x48)", **res, "last_shown": shown, "last_written": written}


def measure_view(rid: str, log: Path, seconds: float, warmup: float, *, alone: bool = False) -> dict[str, Any]:
    return asyncio.run(_view(rid, log, seconds, warmup, alone))


async def _view(rid: str, log: Path, seconds: float, warmup: float, alone: bool) -> dict[str, Any]:
    from textual.app import App

    from tunedeck.hostops.runstore import RunStore
    from tunedeck.services.targets import get_host
    from tunedeck.ui.app import make_app
    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog

    host = get_host(None, demo=True)
    rec = RunStore().load(rid)
    assert rec is not None
    # alone: the run view on an app of its own (nothing under it); else opened from the dashboard,
    # whose status screen stays under it and goes on polling the host
    app = App() if alone else make_app(host, target="demo", demo=True, interval=1.0)
    me = psutil.Process()
    async with app.run_test(size=(160, 48)) as pilot:
        await app.push_screen(RunScreen(host, rec))
        await pilot.pause(warmup)
        # the measured window: the app's event loop keeps running in this thread while a
        # helper thread waits out the window (psutil counts this whole process)
        done = threading.Event()
        box: dict[str, Any] = {}

        def timer() -> None:
            box.update(_window(seconds, me, lambda s: time.sleep(s)))
            done.set()

        threading.Thread(target=timer, daemon=True).start()
        while not done.is_set():
            # a plain sleep: Pilot.pause waits for every widget of the screen (a callback to
            # each, 40 messages a second on this screen), which is the harness's cost, not the view's
            await asyncio.sleep(0.5)
        view = app.screen.query_one(ServerLog)
        shown = max((_last_seq(str(x).encode()) for x in list(view.view.lines)[-50:]), default=0)
    return {
        "what": "run view (RunScreen, headless 160x48" + (", alone)" if alone else ", over the dashboard)"),
        **box,
        "last_shown": shown,
        "last_written": _written(log),
    }


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        how, rid, log, seconds, warmup = sys.argv[2:7]
        res = measure_view(rid, Path(log), float(seconds), float(warmup), alone=how == "alone")
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window (after the warm-up)")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1000.0, help="log lines a second")
    ap.add_argument("--only", choices=("cli", "view", "alone"), default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tmp = _isolate()
    writer = tmp / "writer.py"  # a command line takes no newline: the server is a script file
    writer.write_text(WRITER)
    results: list[dict[str, Any]] = []
    per_line = 0.0
    for how in ("cli", "view", "alone"):
        if a.only not in (None, how):
            continue
        # a fresh log each: a follower starts at byte 0, and catching up on a long log is not the cost measured
        r = _cli("launch", "--demo", "--json", "--engine", "other", "--port", "1",
                 "--cmd", sys.executable, str(writer), f"{a.rate:g}")  # fmt: skip
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        out = json.loads(r.stdout)
        rid = (out.get("run") or out)["run_id"]
        from tunedeck.hostops.runstore import RunStore

        rec = RunStore().load(rid)
        assert rec is not None and rec.run_dir, rid
        log = Path(rec.run_dir) / "log"
        try:
            if how == "cli":
                results.append(measure_cli(rid, log, a.seconds, a.warmup))
            else:
                # a process of its own: psutil counts the whole process
                r = subprocess.run(
                    [sys.executable, __file__, "--child", how, rid, str(log), f"{a.seconds:g}", f"{a.warmup:g}"],
                    capture_output=True, text=True, cwd=REPO, timeout=a.seconds + a.warmup + 120,
                )  # fmt: skip
                if r.returncode != 0:
                    print(r.stderr[-3000:], file=sys.stderr)
                    return 1
                results.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        finally:
            _cli("stop", rid, "--demo", "--yes")
        per_line = log.stat().st_size / max(1, _written(log))
    report = {
        "rate_lines_s": a.rate,
        "bytes_per_line": round(per_line, 1),
        "target_cpu_pct": CPU_TARGET,
        "cpu_count": os.cpu_count(),
        "loadavg": [round(x, 1) for x in os.getloadavg()],
        "results": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    ok = all(x["cpu_pct"] <= CPU_TARGET and x["last_written"] - x["last_shown"] <= a.rate for x in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
