"""Run the benchmark engine alone, on another interpreter, against the simulator.

    .venv/bin/python scripts/bench_engine_portable.py [--python /root/.pyenv/versions/3.9.18/bin/python3.9]

Copies only ``tunedeck.bench.ENGINE_MODULES`` into a temporary folder, starts
``tunedeck sim vllm`` (fixed TTFT 50 ms, ITL 10 ms) with this interpreter,
then runs a small benchmark (in-process and with ``--workers 2``) under
``PYTHON -I -S`` (no site-packages, no environment) with only that folder on
``sys.path``. It fails when the engine imports anything outside the standard
library, and prints one JSON line with what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = "/root/.pyenv/versions/3.9.18/bin/python3.9"
FORBIDDEN = ("httpx", "psutil", "platformdirs", "textual", "rich", "uvloop")

DRIVER = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.runner import run_benchmark
from tunedeck.util.aio import run_async

url, results = sys.argv[2], sys.argv[3]
out = {"python": ".".join(map(str, sys.version_info[:3])), "levels": []}
events = []

async def main():
    for workers in (1, 2):
        cfg = BenchConfig(url=url, concurrency=[4], num_prompts=16, input_len=64, output_len=16, warmup=2,
                          workers=workers, ready_timeout=30)
        [s] = await run_benchmark(cfg, emit=events.append, results_dir=results)
        out["levels"].append({k: s.get(k) for k in (
            "completed", "failed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "mean_itl_ms",
            "mean_tpot_ms", "input_len_mismatch", "tokenizer_id", "client_bound", "machine_busy")})
        out["levels"][-1]["workers"] = s["client"]["workers"]

run_async(main())
out["event_types"] = sorted({e["type"] for e in events})
out["forbidden_loaded"] = [m for m in FORBIDDEN if m in sys.modules]
print(json.dumps(out))
""".replace("FORBIDDEN", repr(FORBIDDEN))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_engine(dest: Path) -> None:
    """``dest/tunedeck/…``: the engine's modules alone, laid out as the package they import."""
    import tunedeck
    from tunedeck.bench import ENGINE_MODULES

    pkg = Path(tunedeck.__file__).resolve().parent
    for rel in ENGINE_MODULES:
        target = dest / "tunedeck" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pkg / rel, target)


def run(python: str, *, timeout: float = 120.0) -> dict:
    """Benchmark the simulator with the engine copied alone, under ``python -I -S``; returns its report."""
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        root = Path(tmp) / "engine"
        copy_engine(root)
        port = free_port()
        env = dict(os.environ, TUNEDECK_SIM_STATE=str(Path(tmp) / "sim-state"))
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
                "50",
                "--sim-fixed-itl-ms",
                "10",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            r = subprocess.run(
                [python, "-I", "-S", "-c", DRIVER, str(root), f"http://127.0.0.1:{port}", str(Path(tmp) / "results")],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=tmp,
            )
        finally:
            os.killpg(sim.pid, 15)
            sim.wait(10)
        if r.returncode != 0:
            raise RuntimeError(f"{python}: exit {r.returncode}\n{r.stderr[-3000:]}")
        report = json.loads(r.stdout.strip().splitlines()[-1])
        runs = sorted(p.name for p in (Path(tmp) / "results").iterdir())
        report["run_folders"] = len(runs)
        report["files"] = sorted(p.name for p in (Path(tmp) / "results" / runs[0]).iterdir())
        return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=DEFAULT_PYTHON if os.path.exists(DEFAULT_PYTHON) else sys.executable)
    args = ap.parse_args()
    try:
        rep = run(args.python)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"bench_engine_portable: {e}", file=sys.stderr)
        return 1
    print(json.dumps(rep))
    bad = rep["forbidden_loaded"] or any(lv["failed"] or not lv["completed"] for lv in rep["levels"])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
