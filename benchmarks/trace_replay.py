"""Does a Mooncake trace file, replayed the way an operator runs it, send each request when the
trace says?

Writes a Mooncake-format JSONL trace of ``--requests`` (default 2,000) rows
(:func:`tests.traces.mooncake_rows`: ms timestamps from a bursty process, many rows sharing one
millisecond, long-tailed input and output lengths, ``hash_ids`` of 512-token blocks whose leading
ids are shared by rows with one "system prompt"), then runs exactly what an operator types::

    tunedeck bench --host local --port P --dataset-name mooncake --dataset-path FILE \\
        --trace-speed X --request-rate inf --warmup 0 --json -

against ``tunedeck sim vllm`` (its performance model and prefix cache) on loopback: the file is
read and checked by the Mooncake parser, uploaded to ``${TUNEDECK_HOME}/data`` and replayed by the
client as a host-side job on this host (the default path). From the run's stored samples it
reports the dispatch lag (the client's own lateness: sent − scheduled, as
:func:`tunedeck.bench.metrics.dispatch_lag` defines it) p50/p99/max over every request, the lateness
the simulator saw (its recorded arrival − the scheduled wall time), and the prefix-cache hit rate
the run read from the server's counters next to the share the file's ``hash_ids`` plan. A fresh
simulator (empty cache) per repeat; medians of ``--repeats`` (default 3).

Usage::

    python benchmarks/trace_replay.py [--requests 2000] [--span-s 120] [--trace-speed 2]
                                      [--repeats 3] [--pin] [--json OUT]

``--pin`` gives the host-side job a core of its own: the simulator and the laptop-side
``tunedeck bench`` (which follows the job, as it would from the laptop) share the other one.

``--span-s`` is the generator's nominal span (the trace comes out ~1.2x longer); ``--trace-speed``
compresses it so a replay takes about a minute. Tight timing figures live here, not in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from workload_timing import print_lag_table, server_lateness

from tests.simfix import SimProc, free_port
from tests.traces import mooncake_rows, write_jsonl
from tunedeck.bench import metrics, store


def bench(port: int, opts: List[str], pin: Optional[List[int]], home: Path) -> Dict[str, Any]:
    """``tunedeck bench`` as the operator types it. ``pin``: the host-side job it starts gets
    ``pin[:-1]`` to itself, and the laptop side moves to ``pin[-1]`` (beside the simulator) once
    the job is running; on a real host the laptop side runs on the laptop, not on the client's
    cores."""
    cmd = [sys.executable, "-m", "tunedeck", "bench", "--host", "local", "--port", str(port), *opts, "--json", "-"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) as p:
        if pin:
            threading.Thread(target=move_laptop_side, args=(p, home, pin[-1], set(pin[:-1])), daemon=True).start()
        try:
            stdout, stderr = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            raise SystemExit("trace_replay: tunedeck bench ran over 900 s") from None
    if p.returncode != 0:
        raise SystemExit(f"trace_replay: tunedeck bench exited {p.returncode}: {stderr.strip().splitlines()[-1:]}")
    return json.loads(stdout)


def move_laptop_side(p: "subprocess.Popen[str]", home: Path, cpu: int, job_cpus: Set[int]) -> None:
    """Once the host-side bench job runs (``home/bench/<id>/run.sh`` and the runtime it starts),
    give it and its children ``job_cpus`` and move every thread of the laptop-side process ``p`` to
    ``cpu``. Only that job counts: the laptop side runs other commands under ``home`` before it (the
    runtime's upload and checks), and moving the laptop side on one of those made the job, started
    later, inherit the simulator's CPU."""
    marker = str(home / "bench") + os.sep

    def is_job(argv: List[str]) -> bool:
        return any(a.startswith(marker) and a.endswith(os.sep + "run.sh") for a in argv)

    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        jobs = [q for q in psutil.process_iter(["cmdline"]) if is_job(q.info["cmdline"] or [])]
        if jobs:
            tree = {q for job in jobs for q in [job, *job.children(recursive=True)]}
            for q in tree:
                for tid in os.listdir(f"/proc/{q.pid}/task"):
                    os.sched_setaffinity(int(tid), job_cpus)
            for tid in os.listdir(f"/proc/{p.pid}/task"):
                os.sched_setaffinity(int(tid), {cpu})
            print(f"# the laptop side moved to CPU {cpu}; the host-side job ({', '.join(str(q.pid) for q in sorted(tree, key=lambda q: q.pid))}) "
                  f"keeps {sorted(job_cpus)}", file=sys.stderr, flush=True)  # fmt: skip
            return
        time.sleep(0.05)
    print("# the host-side job was not seen: the laptop side stayed on the job's CPUs", file=sys.stderr)


def one_replay(opts: List[str], tmp: Path, rep: int, rows: int, pin: Optional[List[int]]) -> Dict[str, Any]:
    """A fresh simulator (an empty cache, counters at zero), one ``tunedeck bench`` run. ``pin``:
    the CPUs; the simulator gets the last one (started while this process runs there: a child
    inherits the mask), tunedeck and the job it starts the others."""
    rec = tmp / f"received-{rep}.jsonl"
    port = free_port()
    if pin:
        os.sched_setaffinity(0, {pin[-1]})
    with SimProc("vllm", "m", "-tp", "8", "--port", str(port), "--sim-load-seconds", "1",
                 "--sim-record-timestamps", str(rec)) as sim:  # fmt: skip
        if pin:
            os.sched_setaffinity(0, set(pin[:-1]))
        sim.wait_ready(60)
        try:
            s = bench(port, opts, pin, tmp / "remote-home")
        finally:
            sim.stop()
    samples = store.read_samples(s["run_id"])
    if len(samples) != rows or sorted(x["index"] for x in samples) != list(range(rows)):
        raise SystemExit(f"trace_replay: the run stored {len(samples)} samples, expected each of {rows} rows once")
    lag = metrics.dispatch_lag(samples)
    # each request's scheduled wall time: its wall clock at sending, less how late it was sent (a
    # request never written has no send time; the count check below then names the shortfall)
    due = [x["wall_start"] - x["sent_at"] + x["scheduled_at"] for x in samples if x["sent_at"] is not None]
    srv = server_lateness(rec, 0, due)
    return {
        "repeat": rep,
        "run_id": s["run_id"],
        "requests": len(samples),
        "failed": sum(1 for x in samples if not x["success"]),
        **lag,
        "server_late_p50_ms": metrics.percentile_sorted(srv, 50),
        "server_late_p99_ms": metrics.percentile_sorted(srv, 99),
        "server_late_max_ms": srv[-1],
        "prefix_cache_hit_rate": s["prefix_cache_hit_rate"],
        "machine_busy": s["client"]["machine_busy"],
        "client_where": s["client"]["where"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--span-s", type=float, default=120.0)
    ap.add_argument("--trace-speed", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the simulator on the last CPU, tunedeck (and the host-side job it starts) on the others; needs 2 CPUs",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        raise SystemExit("trace_replay: --pin needs 2 CPUs")
    rows = mooncake_rows(args.requests, args.span_s, args.seed)
    out: Dict[str, Any] = {
        "requests": len(rows),
        "trace_span_s": rows[-1]["timestamp"] / 1000,
        "trace_speed": args.trace_speed,
        "shared_timestamps": len(rows) - len({r["timestamp"] for r in rows}),
        "pin": args.pin,
        "repeats": [],
    }
    with tempfile.TemporaryDirectory(prefix="trace-replay-") as tmp:
        tmpd = Path(tmp)
        # everything tunedeck writes (results, the host-side runtime, the uploaded trace) stays here
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            os.environ[var] = str(tmpd / var.lower())
        os.environ["TUNEDECK_HOME"] = str(tmpd / "remote-home")
        os.environ["TUNEDECK_SIM_STATE"] = str(tmpd / "sim-state")
        trace = write_jsonl(tmpd / "mooncake.jsonl", rows)
        opts = ["--dataset-name", "mooncake", "--dataset-path", str(trace), "--trace-speed", str(args.trace_speed)]
        opts += ["--request-rate", "inf", "--warmup", "0"]
        cmd = [sys.executable, "-m", "tunedeck", "bench", "--preview", "--json", *opts]
        (preview,) = json.loads(subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout)
        out["planned_prefix_shared_ratio"] = preview["prefix_shared_ratio"]
        out["command"] = "tunedeck bench --host local --port P " + " ".join(
            "FILE" if o == str(trace) else o for o in opts
        )
        for rep in range(args.repeats):
            t = time.monotonic()
            res = one_replay(opts, tmpd, rep, len(rows), cpus if args.pin else None)
            res["wall_s"] = time.monotonic() - t
            out["repeats"].append(res)
            print(
                f"# replay {rep + 1}: {res['requests']} requests in {res['wall_s']:.0f} s, dispatch lag "
                f"p50 {res['dispatch_lag_p50_ms']:.3f} ms, p99 {res['dispatch_lag_p99_ms']:.3f} ms, "
                f"max {res['dispatch_lag_max_ms']:.1f} ms; at the server p99 {res['server_late_p99_ms']:.2f} ms; "
                f"hit rate {res['prefix_cache_hit_rate']:.3f}; failed {res['failed']}",
                file=sys.stderr,
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    reps = out["repeats"]

    def med(k: str) -> float:
        return statistics.median(r[k] for r in reps)

    print(f"$ {out['command']}")
    print(
        f"Mooncake trace file: {out['requests']} rows over {out['trace_span_s']:.1f} s "
        f"({out['shared_timestamps']} share a timestamp with an earlier row), replayed at {args.trace_speed:g}x "
        f"({out['trace_span_s'] / args.trace_speed:.1f} s) as a host-side job; {'pinned' if args.pin else 'shared'} "
        f"cores; medians of {len(reps)}; requests per run {', '.join(str(r['requests']) for r in reps)}, "
        f"failed {sum(r['failed'] for r in reps)}"
    )
    print()
    print_lag_table(reps)
    print()
    print(
        f"prefix cache hit rate (server counters over the level) {med('prefix_cache_hit_rate'):.3f}; "
        f"the file's hash_ids share {out['planned_prefix_shared_ratio']:.3f} of the prompt tokens"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
