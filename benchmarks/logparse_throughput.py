"""Measure the log parser's throughput on a large synthetic startup-and-serving log.

Builds a log of ``--lines`` physical lines (default 200 000) in the engines' real
formats: vLLM and SGLang prefixes, ANSI colour, tqdm bars redrawn with ``\\r``,
runtime stat lines, warnings and one chained traceback near the end. Feeds it to
:class:`tunedeck.logparse.LogParser` in 64 KiB chunks and prints lines/s
(CPU time of this process, so a loaded machine reads close to an idle one).

    python benchmarks/logparse_throughput.py            # 200k lines, best of 3
    python benchmarks/logparse_throughput.py --lines 50000 --repeats 1
    python benchmarks/logparse_throughput.py --json benchmarks/results/logparse_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tunedeck.logparse import LogParser


def build_log(lines: int) -> bytes:
    """A startup (vLLM TP2 then SGLang-style stats) repeated until ``lines`` lines."""
    head = [
        "(APIServer pid=100) INFO 03-01 10:00:00 [api_server.py:1] vLLM API server version 0.11.0",
        "(APIServer pid=100) INFO 03-01 10:00:00 [utils.py:1] non-default args: {'model': 'm', 'tensor_parallel_size': 2}",
        "(EngineCore_DP0 pid=200) INFO 03-01 10:00:05 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: model='m'",
        "(Worker_TP0 pid=300) INFO 03-01 10:00:10 [pynccl.py:1] vLLM is using nccl==2.27.3",
        "(Worker_TP0 pid=300) INFO 03-01 10:00:11 [gpu_model_runner.py:1] Starting to load model m...",
    ]
    shards = "".join(
        f"\r\x1b[1;36m(Worker_TP0 pid=300)\x1b[0;0m Loading safetensors checkpoint shards: {i * 100 // 40:3d}% Completed | {i}/40 [00:{i:02d}<00:10,  1.10it/s]"
        for i in range(41)
    )
    tail = [
        "(Worker_TP0 pid=300) INFO 03-01 10:01:00 [default_loader.py:1] Loading weights took 40.00 seconds",
        "(Worker_TP0 pid=300) INFO 03-01 10:01:01 [gpu_model_runner.py:1] Model loading took 60.1 GiB and 41.000000 seconds",
        "(EngineCore_DP0 pid=200) INFO 03-01 10:01:30 [gpu_worker.py:1] Available KV cache memory: 50.00 GiB",
        "(EngineCore_DP0 pid=200) INFO 03-01 10:01:30 [kv_cache_utils.py:1] GPU KV cache size: 1,000,000 tokens",
    ]
    capture = "".join(
        f"\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): {i * 100 // 51:3d}%|####      | {i}/51 [00:01<00:01, 30.0it/s]"
        for i in range(52)
    )
    serving = [
        "(APIServer pid=100) INFO 03-01 10:03:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1200.5 tokens/s, "
        "Avg generation throughput: 880.2 tokens/s, Running: 5 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, "
        "Prefix cache hit rate: 40.0%",
        '(APIServer pid=100) INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[2026-03-01 10:03:01 TP0] Decode batch, #running-req: 12, #token: 3456, token usage: 0.42, cuda graph: True, "
        "gen throughput (token/s): 1234.56, #queue-req: 3",
        "(Worker_TP1 pid=301) WARNING 03-01 10:03:02 [custom_all_reduce.py:1] Custom allreduce is disabled",
    ]
    block = (
        head
        + [shards]
        + tail
        + [
            capture,
            "(EngineCore_DP0 pid=200) INFO 03-01 10:02:00 [gpu_model_runner.py:1] Graph capturing finished in 20 secs, took 1.20 GiB",
            "(APIServer pid=100) INFO 03-01 10:02:10 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
            "(APIServer pid=100) INFO:     Application startup complete.",
        ]
    )
    out = list(block)
    while len(out) < lines - 30:
        out.extend(serving)
    out = out[: lines - 30]
    out.append("(EngineCore_DP0 pid=200) ERROR 03-01 11:00:00 [core.py:1] EngineCore encountered a fatal error.")
    out.append("(EngineCore_DP0 pid=200) ERROR 03-01 11:00:00 [core.py:1] Traceback (most recent call last):")
    for i in range(12):
        out.append(f'(EngineCore_DP0 pid=200) ERROR 03-01 11:00:00 [core.py:1]   File "/x/y{i}.py", line {i}, in f{i}')
        out.append(f"(EngineCore_DP0 pid=200) ERROR 03-01 11:00:00 [core.py:1]     g{i}()")
    out.append(
        "(EngineCore_DP0 pid=200) ERROR 03-01 11:00:00 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    while len(out) < lines:
        out.append("(APIServer pid=100) INFO:     Shutting down")
    return ("\n".join(out) + "\n").encode()


def measure(data: bytes, chunk: int = 65536) -> float:
    p = LogParser()
    t0 = time.process_time()
    for i in range(0, len(data), chunk):
        p.feed(data[i : i + chunk])
    p.finish()
    return max(1e-9, time.process_time() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000, help="physical lines in the log (default 200000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs; the best is reported (default 3)")
    ap.add_argument("--json", type=Path, default=None, help="also write the result (every run's CPU time) here")
    a = ap.parse_args(argv)
    if a.lines < 100 or a.repeats < 1:
        print("logparse_throughput: --lines must be >= 100 and --repeats >= 1", file=sys.stderr)
        return 2
    data = build_log(a.lines)
    n = data.count(b"\n")
    runs = [measure(data) for _ in range(a.repeats)]
    best = min(runs)
    print(f"{n} lines ({len(data) / 1e6:.1f} MB) in {best:.2f} s CPU: {n / best:,.0f} lines/s")
    if a.json is not None:
        result = {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": " ".join(["python", "benchmarks/logparse_throughput.py", *(argv or sys.argv[1:])]),
            "lines": n,
            "bytes": len(data),
            "cpu_s_runs": [round(t, 3) for t in runs],
            "cpu_s_best": round(best, 3),
            "lines_per_s": round(n / best),
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            # CPU time still slows when the other cores' work shares caches and SMT siblings
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cores": os.cpu_count(),
        }
        a.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
