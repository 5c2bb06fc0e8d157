"""Does a trace replay send each request when the trace says, and does TTFT at C=1,024 agree with
what the server saw?

1. **Dispatch lag.** Builds a Mooncake-style schedule of ``--requests`` (default 2,000) rows in
   memory (:func:`tests.traces.mooncake_rows`: bursty arrivals, many rows sharing one millisecond
   timestamp, long-tailed input and output lengths, as in the FAST'25 trace's ``{"timestamp",
   "input_length", "output_length"}``; its ``hash_ids`` are not used here: the prompts are random
   ids), replays it at 1x against ``tunedeck sim vllm`` on loopback with the bench engine's own
   dispatcher (:func:`tunedeck.bench.levels.drive`, the path ``tunedeck bench`` runs, with
   ``quiet_gc``) and reports the client's dispatch lag (sent − scheduled) p50/p99/max, and the same
   lateness as the simulator saw it (its recorded arrival − the scheduled wall time). Median over
   ``--repeats`` (default 3). ``benchmarks/trace_replay.py`` replays the same rows written as a
   trace file, through ``tunedeck bench --dataset-name mooncake`` as an operator runs it.
2. **TTFT at C=1,024.** Runs ``tunedeck bench`` (its own process) at concurrency 1,024 against the
   same simulator and compares its mean TTFT with the simulator's record of the same requests, by
   reusing ``benchmarks/client_truth.py``'s run and truth functions.

Usage::

    python benchmarks/workload_timing.py [--requests 2000] [--repeats 3] [--span-s 60]
                                         [--conc 1024] [--ttft-ms 50] [--itl-ms 10] [--json OUT]

Tight timing figures live here, not in the unit tests (which must hold on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from client_truth import free_port, one_run, wait_port

from tests.traces import mooncake_rows
from tunedeck.bench import metrics
from tunedeck.bench.client import EndpointConfig, Live, RequestSpec, make_client, prepare, quiet_gc
from tunedeck.bench.levels import LoadShape, drive
from tunedeck.util.aio import run_async


def specs_of(rows: List[Dict[str, Any]], seed: int) -> List[RequestSpec]:
    rng = random.Random(seed + 1)
    return [
        RequestSpec(
            [rng.randrange(1000, 30000) for _ in range(r["input_length"])],
            r["input_length"],
            r["output_length"],
            i,
            True,
            at_s=r["timestamp"] / 1000.0,
        )
        for i, r in enumerate(rows)
    ]


async def replay(url: str, specs: List[RequestSpec]) -> Dict[str, Any]:
    samples: List[Dict[str, Any]] = []
    ep = EndpointConfig(url, "m")
    async with make_client(read_timeout=120) as client:
        prepared = [prepare(client, ep, sp) for sp in specs]
        await client.warm(ep.url, 64)
        with quiet_gc():
            start = await drive(
                client,
                ep,
                specs,
                LoadShape(),
                t0=time.perf_counter() + 0.2,
                live=Live(),
                on_sample=samples.append,
                prepared=prepared,
            )
    # the level's start on the wall clock (the simulator records wall times)
    start_wall = time.time() - (time.perf_counter() - start)
    return {"samples": samples, "start_wall": start_wall}


def server_lateness(rec: Path, offset: int, due_wall: List[float]) -> List[float]:
    """Simulator arrival (its record from ``offset`` on) − scheduled wall time, ms, matched in
    order (both sorted)."""
    time.sleep(0.5)
    with open(rec, "rb") as f:
        f.seek(offset)
        arrivals = sorted(json.loads(x)["arrival"] for x in f.read().splitlines() if x.strip())
    due = sorted(due_wall)
    if len(arrivals) != len(due):
        raise SystemExit(f"workload_timing: the simulator recorded {len(arrivals)} requests, expected {len(due)}")
    return sorted((a - d) * 1000 for a, d in zip(arrivals, due))


def print_lag_table(reps: List[Dict[str, Any]]) -> None:
    """The dispatch-lag and server-lateness table (medians over ``reps``), as Markdown: the one
    table both timing benchmarks print."""

    def med(k: str) -> float:
        return statistics.median(r[k] for r in reps)

    print("| figure | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|")
    for name, key in (
        ("dispatch lag (client: sent − scheduled)", "dispatch_lag"),
        ("lateness at the server (arrival − scheduled)", "server_late"),
    ):
        print(f"| {name} | {med(key + '_p50_ms'):.3f} | {med(key + '_p99_ms'):.3f} | {med(key + '_max_ms'):.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--span-s", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conc", type=int, default=1024)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--input-len", type=int, default=128, help="for the C=1,024 TTFT run")
    ap.add_argument("--output-len", type=int, default=32, help="for the C=1,024 TTFT run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--workers", type=int, default=1, help="client processes for the C=1,024 run (tunedeck bench --workers)"
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the simulator on the last CPU, the client on the others (as on a GPU host, where the engine's "
        "CPU threads do not share the client's core); needs 2 CPUs",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        raise SystemExit("workload_timing: --pin needs 2 CPUs")
    rows = mooncake_rows(args.requests, args.span_s, args.seed)
    specs = specs_of(rows, args.seed)
    shared = len(rows) - len({r["timestamp"] for r in rows})
    out: Dict[str, Any] = {"requests": len(rows), "span_s": rows[-1]["timestamp"] / 1000, "repeats": []}
    with tempfile.TemporaryDirectory(prefix="workload-timing-") as tmp:
        tmpd = Path(tmp)
        rec = tmpd / "times.jsonl"
        port = free_port()
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tunedeck",
                "sim",
                "vllm",
                "m",
                "-tp",
                "8",
                "--port",
                str(port),
                "--sim-load-seconds",
                "1",
                "--sim-fixed-ttft-ms",
                str(args.ttft_ms),
                "--sim-fixed-itl-ms",
                str(args.itl_ms),
                "--sim-record-timestamps",
                str(rec),
            ],
            cwd=ROOT,
            env=dict(os.environ, TUNEDECK_SIM_STATE=str(tmpd / "sim")),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, {cpus[-1]})) if args.pin else None,
        )
        if args.pin:
            os.sched_setaffinity(0, set(cpus[:-1]))  # this process and the clients it starts
        url = f"http://127.0.0.1:{port}"
        try:
            wait_port(port, 60)
            time.sleep(2.0)  # the simulated load
            for rep in range(args.repeats):
                offset = rec.stat().st_size if rec.exists() else 0
                r = run_async(replay(url, specs))
                lag = metrics.dispatch_lag(r["samples"])
                srv = server_lateness(rec, offset, [r["start_wall"] + (sp.at_s or 0.0) for sp in specs])
                res = {
                    "repeat": rep,
                    "failed": sum(1 for s in r["samples"] if not s["success"]),
                    **lag,
                    "server_late_p50_ms": metrics.percentile_sorted(srv, 50),
                    "server_late_p99_ms": metrics.percentile_sorted(srv, 99),
                    "server_late_max_ms": srv[-1],
                }
                out["repeats"].append(res)
                print(
                    f"# replay {rep + 1}: dispatch lag p50 {res['dispatch_lag_p50_ms']:.3f} ms, "
                    f"p99 {res['dispatch_lag_p99_ms']:.3f} ms, max {res['dispatch_lag_max_ms']:.1f} ms; "
                    f"at the server p50 {res['server_late_p50_ms']:.2f} ms, p99 {res['server_late_p99_ms']:.2f} ms; "
                    f"failed {res['failed']}",
                    file=sys.stderr,
                    flush=True,
                )
            ns = argparse.Namespace(input_len=args.input_len, output_len=args.output_len, workers=args.workers)
            big = one_run(url, args.conc, ns, rec, tmpd / "data")
            out["ttft"] = {k: big[k] for k in ("conc", "n", "ttft", "ttft_true", "stall_ms", "cpu", "failed")}
        finally:
            os.killpg(sim.pid, signal.SIGTERM)
            sim.wait(15)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    reps = out["repeats"]
    if not reps:  # --repeats 0: the C=1,024 TTFT run only
        t = out["ttft"]
        print(
            f"C={t['conc']}, N={t['n']}: mean TTFT {t['ttft']:.2f} ms vs {t['ttft_true']:.2f} ms, "
            f"difference {t['ttft'] - t['ttft_true']:+.2f} ms; max loop stall {t['stall_ms']:.1f} ms"
        )
        return 0
    print(
        f"Mooncake-style schedule: {out['requests']} requests over {out['span_s']:.1f} s "
        f"({shared} share a timestamp with an earlier row), replayed at 1x; medians of {len(reps)}"
    )
    print()
    print_lag_table(reps)
    t = out["ttft"]
    print()
    print(
        f"C={t['conc']}, N={t['n']}: mean TTFT {t['ttft']:.2f} ms (tunedeck) vs {t['ttft_true']:.2f} ms "
        f"(simulator's record), difference {t['ttft'] - t['ttft_true']:+.2f} ms; max loop stall "
        f"{t['stall_ms']:.1f} ms, failed {t['failed']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
