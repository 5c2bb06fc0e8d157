#!/usr/bin/env python3
"""Does the run view hold its memory flat while it follows a hostile log of 1 MB lines?

    python benchmarks/hostile_log_rss.py [--seconds 300] [--every 0.5] [--json OUT]

A "server" is launched detached on the demo host (``tunedeck launch --demo --cmd``): a Python
loop that writes, every ``--every`` seconds, a line of 1 MB whose text carries the sequences a
host must never get to the operator's terminal (OSC title, DCS, clear screen, cursor moves,
alternate screen, bell), plus a short log line. The dashboard's run view (``RunScreen``, the
real follower, line splitter, sanitizer and ``ServerLog``) follows it headless in this process
for ``--seconds``; RSS is sampled every 10 s, with how full the two byte-bounded buffers are
(the ring behind search and the view, ``MAX_BYTES`` each). Reported: RSS after a 30-s warm-up,
its maximum and its last value, the growth from warm-up to the end (target: within 50 MB), when
both buffers were full and the growth from then on (memory that still grows then has no bound),
the bytes the server wrote, and the lines the view shows and how many of them hold an escape
(target: 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_MB = 50.0

WRITER = r"""
import sys, time
every = float(sys.argv[1])
evil = "\x1b]0;owned\x07\x1bP+q\x1b\\\x1b[2J\x1b[H\x1b[?1049h\x07"
i = 0
while True:
    i += 1
    body = (evil + "x" * 1000) * 1000
    sys.stdout.write(f"[{i}] INFO huge line {body[: 1024 * 1024]}\n")
    sys.stdout.write(f"[{i}] INFO decode batch #running-req: 8, gen throughput (token/s): 812.5\n")
    sys.stdout.flush()
    time.sleep(every)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--every", type=float, default=0.5, help="seconds between 1 MB lines")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace Python's allocations: the memory they hold at each sample, and the 15 places whose "
        "memory grew most from the moment both buffers were full to the end",
    )
    a = ap.parse_args()
    if a.tracemalloc:
        tracemalloc.start()
    tmp = Path(tempfile.mkdtemp(prefix="tunedeck-rss-"))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        os.environ[var] = str(tmp / var.lower())
    os.environ["TUNEDECK_HOME"] = str(tmp / "remote-home")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = tmp / "writer.py"  # a command line takes no newline: the server is a script file
    writer.write_text(WRITER)
    r = subprocess.run(
        [sys.executable, "-m", "tunedeck", "launch", "--demo", "--json", "--engine", "other", "--port", "1",
         "--cmd", sys.executable, str(writer), str(a.every)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return 1
    out = json.loads(r.stdout)
    rid = (out.get("run") or out)["run_id"]
    try:
        result = asyncio.run(watch(rid, a.seconds))
    finally:
        subprocess.run(
            [sys.executable, "-m", "tunedeck", "stop", rid, "--demo", "--yes"], env=env, cwd=REPO, timeout=120
        )
    result.update({"seconds": a.seconds, "every_s": a.every, "target_mb": TARGET_MB})
    text = json.dumps(result, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0 if result["growth_mb"] <= TARGET_MB and result["escapes_shown"] == 0 else 1


async def watch(rid: str, seconds: float) -> dict[str, object]:
    from tunedeck.hostops.runstore import RunStore
    from tunedeck.services.targets import get_host
    from tunedeck.ui.app import make_app
    from tunedeck.ui.screens.run import RunScreen
    from tunedeck.widgets.server_log import ServerLog

    host = get_host(None, demo=True)
    rec = RunStore().load(rid)
    assert rec is not None
    app = make_app(host, target="demo", demo=True, interval=1.0)
    me = psutil.Process()
    samples: list[tuple[float, float]] = []
    #: (s, ring MiB, view MiB): how full the two byte-bounded buffers are at each sample
    held: list[tuple[float, float, float]] = []
    first: tracemalloc.Snapshot | None = None  # with --tracemalloc: when both buffers were full
    async with app.run_test(size=(160, 48)) as pilot:
        await app.push_screen(RunScreen(host, rec))
        log = app.screen.query_one(ServerLog)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            await pilot.pause(10.0)
            samples.append((time.monotonic() - t0, me.memory_info().rss / 2**20))
            held.append((samples[-1][0], log.ring_bytes / 2**20, log.view.held_bytes / 2**20))
            traced = ""
            if tracemalloc.is_tracing():
                traced = f"  traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB"
                if first is None and min(held[-1][1:]) >= log.max_bytes / 2**20 - 1 / 16:
                    first = tracemalloc.take_snapshot()
            print(
                f"{samples[-1][0]:6.0f} s  RSS {samples[-1][1]:7.1f} MB  buffers: ring {held[-1][1]:.2f}, "
                f"view {held[-1][2]:.2f} MiB (cap {log.max_bytes / 2**20:g} each){traced}",
                file=sys.stderr,
                flush=True,
            )
        if first is not None:
            for stat in tracemalloc.take_snapshot().compare_to(first, "lineno")[:15]:
                print(f"grew since full: {stat}", file=sys.stderr)
        shown = [str(x) for x in log.view.lines]
        cap = log.max_bytes / 2**20
    warm = next(rss for t, rss in samples if t >= 30.0)
    last = samples[-1][1]
    end_t = samples[-1][0]
    tail = [(t, r) for t, r in samples if t >= end_t - 120.0]  # the last 2 minutes: least-squares slope
    mt, mr = statistics.fmean(t for t, _ in tail), statistics.fmean(r for _, r in tail)
    slope = sum((t - mt) * (r - mr) for t, r in tail) / (sum((t - mt) ** 2 for t, _ in tail) or 1.0)
    size = Path(rec.run_dir or "", "log").stat().st_size
    # both buffers full (within 64 KiB of their cap, less than one line the ring holds): from then
    # on, RSS should stay flat
    full_at = next((t for t, ring, view in held if min(ring, view) >= cap - 1 / 16), None)
    after_full = [r for t, r in samples if full_at is not None and t >= full_at]
    return {
        "buffers_full_at_s": None if full_at is None else round(full_at),
        "rss_at_full_mb": round(after_full[0], 1) if after_full else None,
        "growth_after_full_mb": round(max(after_full) - after_full[0], 1) if after_full else None,
        "rss_after_warmup_mb": round(warm, 1),
        "rss_max_mb": round(max(r for _, r in samples), 1),
        "rss_end_mb": round(last, 1),
        "growth_mb": round(last - warm, 1),
        "rss_median_mb": round(statistics.median(r for _, r in samples), 1),
        "rss_start_mb": round(samples[0][1], 1),
        "rss_by_minute_mb": [
            round(next(r for t, r in samples if t >= m * 60.0 - 1), 1) for m in range(1, int(end_t // 60) + 1)
        ],
        "slope_last_2min_mb_per_s": round(slope, 4),
        "log_bytes_written": size,
        "lines_shown": len(shown),
        "escapes_shown": sum(1 for x in shown if "\x1b" in x or "\x07" in x),
        "samples": [(round(t), round(r, 1)) for t, r in samples],
        "buffers_mib": [(round(t), round(ring, 2), round(view, 2)) for t, ring, view in held],
    }


if __name__ == "__main__":
    sys.exit(main())
