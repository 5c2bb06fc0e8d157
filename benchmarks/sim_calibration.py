"""Measure the simulator's throughput with a plain streaming client and compare with the model.

Starts ``tunedeck sim`` servers (SGLang base, SGLang tuned, vLLM base), runs a
closed-loop client at C=1 and C=128 (chat completions, 256 output tokens,
ignore_eos, stream with include_usage) and prints measured vs target tok/s.

    python benchmarks/sim_calibration.py            # all three configs, ~2 minutes
    python benchmarks/sim_calibration.py --quick    # fewer requests
    python benchmarks/sim_calibration.py --only sglang-base --conc 1,128

Output tokens per second = completion tokens of all requests / wall time of
the run (first request sent to last [DONE]), so it includes TTFT and prefill
interruptions, as a real benchmark would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tunedeck.sim import perf

PCIE_NCCL = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"}
CONFIGS = {
    "sglang-base": ("sglang", ["--model-path", "m", "--tp-size", "8"], {}),
    "sglang-tuned": (
        "sglang",
        [
            "--model-path",
            "m",
            "--tp-size",
            "8",
            "--attention-backend",
            "flashinfer",
            "--num-continuous-decode-steps",
            "4",
            "--disable-custom-all-reduce",
        ],
        PCIE_NCCL,
    ),
    "vllm-base": ("vllm", ["m", "--tensor-parallel-size", "8"], {}),
}


def model_estimate(name: str, conc: int) -> float:
    engine, _argv, env = CONFIGS[name]
    if name == "sglang-tuned":
        cfg = perf.PerfConfig("sglang", 8, "flashinfer", None, None, 4, True, perf.PerfConfig.nccl_from_env(env))
    else:
        cfg = perf.PerfConfig(engine, 8)
    per, total = perf.throughput(cfg, conc)
    return per if conc == 1 else total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_request(port: int, max_tokens: int) -> int:
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Write a long story about GPUs. " * 8}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    data = await reader.read()  # until the server closes (connection: close)
    writer.close()
    i = data.rfind(b'"usage":{')
    if i < 0:
        raise RuntimeError(f"no usage chunk in response: {data[:200]!r}")
    j = data.find(b'"completion_tokens":', i)
    return int(data[j + 20 : data.find(b"}", j)].split(b",")[0])


async def run_load(port: int, conc: int, per_worker: int, max_tokens: int) -> tuple[int, float]:
    async def worker() -> int:
        n = 0
        for _ in range(per_worker):
            n += await one_request(port, max_tokens)
        return n

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(worker() for _ in range(conc)))
    return sum(counts), time.perf_counter() - t0


def start(name: str) -> tuple[subprocess.Popen, int]:
    engine, argv, env = CONFIGS[name]
    port = free_port()
    e = dict(os.environ)
    e.update(env)
    e.setdefault("TUNEDECK_SIM_STATE", f"/tmp/tunedeck-sim-calibration-{os.getpid()}")
    p = subprocess.Popen(
        [sys.executable, "-m", "tunedeck", "sim", engine, *argv, "--port", str(port), "--sim-load-seconds", "1"],
        cwd=REPO,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ready = "The server is fired up and ready to roll!" if engine == "sglang" else "Application startup complete."
    assert p.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stdout.readline().decode("utf-8", "replace")
        if ready in line:
            break
        if not line and p.poll() is not None:
            raise RuntimeError(f"{name}: sim exited with {p.returncode}")
    # drain the log so the pipe never blocks the server
    import threading

    threading.Thread(target=lambda: [None for _ in iter(lambda: p.stdout.read(65536), b"")], daemon=True).start()
    return p, port


def stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(CONFIGS), help="config(s) to run (default: all)")
    ap.add_argument("--conc", default="1,128", help="concurrency levels, comma separated (default 1,128)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="one round per worker at C>1, one request at C=1")
    args = ap.parse_args()
    concs = [int(x) for x in args.conc.split(",")]
    names = args.only or list(CONFIGS)
    targets = {
        ("sglang-base", 1): 64.0,
        ("sglang-base", 128): 2370.0,
        ("vllm-base", 1): 82.5,
        ("vllm-base", 128): 1536.0,
    }
    rows = []
    for name in names:
        p, port = start(name)
        try:
            asyncio.run(run_load(port, 1, 1, 16))  # warm the connection path
            for c in concs:
                per_worker = 1 if (args.quick or c > 1) else 2
                toks, dt = asyncio.run(run_load(port, c, per_worker, args.max_tokens))
                measured = toks / dt / (c if c == 1 else 1)
                rows.append((name, c, measured, model_estimate(name, c), targets.get((name, c))))
                print(f"  {name} C={c}: {toks} tokens in {dt:.2f} s", file=sys.stderr)
        finally:
            stop(p)
    print(f"{'config':<14} {'C':>4} {'measured tok/s':>15} {'model tok/s':>12} {'target':>8} {'vs target':>10}")
    for name, c, m, est, tgt in rows:
        vs = f"{100.0 * (m - tgt) / tgt:+.1f}%" if tgt else ""
        print(f"{name:<14} {c:>4} {m:>15.1f} {est:>12.1f} {tgt if tgt else '':>8} {vs:>10}")
    base = {c: m for n, c, m, _e, _t in rows if n == "sglang-base"}
    tuned = {c: m for n, c, m, _e, _t in rows if n == "sglang-tuned"}
    for c in sorted(set(base) & set(tuned)):
        print(f"sglang-tuned vs sglang-base at C={c}: {100.0 * (tuned[c] - base[c]) / base[c]:+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
