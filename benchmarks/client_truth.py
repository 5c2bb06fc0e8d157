"""Does `tunedeck bench` report what the server actually did?

Starts ``tunedeck sim vllm`` with a fixed TTFT and inter-token delay and
``--sim-record-timestamps`` (the simulator records, per request, when it had
read it and when it handed each chunk to the socket), then runs
``tunedeck bench`` (its own process, as in production) at each concurrency,
``--repeats`` times, and compares tunedeck's numbers with the simulator's
record of the same timed requests (warmups excluded by time):

* mean TTFT: tunedeck vs the simulator's (first chunk written − request read);
* mean TPOT and mean ITL: tunedeck vs the simulator's gaps between writes;
* output tok/s: tunedeck (Σ output tokens / its duration) vs Σ completion_tokens over
  the simulator's span (first request read → last chunk written);
* total_input_tokens vs N × --input-len (and the simulator's Σ prompt_tokens);
* the client's largest event-loop stall during the timed phase;
* where a TTFT difference comes from: *server ingest* (the simulator had read the request − the
  client had written it, mean) and *receive lag* (the client saw the first token − the simulator
  had written it, mean).

When ``vllm`` is on PATH (or ``--vllm CMD``; the optional extra ``pip install 'tunedeck[vllm]'``,
never needed by the tests), ``vllm bench serve`` runs right after each tunedeck run, same load
(random dataset, same lengths, ``--ignore-eos``, same concurrency and N), against the same
simulator, and is set against the simulator's record the same way; a last table says, per metric
and concurrency, whether tunedeck was at least as close to the truth as vLLM's client. vLLM needs a
tokenizer: a small local word-level one is written (nothing is downloaded).

Medians over the repeats. Usage::

    python benchmarks/client_truth.py [--conc 1,32,128,256] [--repeats 3] [--ttft-ms 50] [--itl-ms 10]
                                      [--input-len 128] [--output-len 64] [--json OUT]
                                      [--vllm CMD | --no-vllm]

Timing agreement is checked here, on purpose not in unit tests (which must hold
on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"client_truth: the simulator did not listen on port {port} within {timeout:g} s")


def truth(records: List[Dict[str, Any]]) -> Dict[str, float]:
    ttft = [r["times"][0] - r["arrival"] for r in records if r["times"]]
    tpot = [
        (r["times"][-1] - r["times"][0]) / (r["completion_tokens"] - 1)
        for r in records
        if r["completion_tokens"] > 1 and len(r["times"]) > 1
    ]
    gaps = [b - a for r in records for a, b in zip(r["times"], r["times"][1:])]
    span = max(r["times"][-1] for r in records if r["times"]) - min(r["arrival"] for r in records)
    return {
        "mean_ttft_ms": statistics.fmean(ttft) * 1000,
        "mean_tpot_ms": statistics.fmean(tpot) * 1000,
        "mean_itl_ms": statistics.fmean(gaps) * 1000,
        "output_throughput": sum(r["completion_tokens"] for r in records) / span,
        "prompt_tokens": sum(r["prompt_tokens"] for r in records),
        "requests": len(records),
    }


def one_run(url: str, conc: int, args: argparse.Namespace, rec: Path, data_home: Path) -> Dict[str, Any]:
    n = max(10, 5 * conc)
    offset = rec.stat().st_size if rec.exists() else 0
    env = dict(os.environ, XDG_DATA_HOME=str(data_home))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunedeck",
            "bench",
            "--url",
            url,
            "--concurrency",
            str(conc),
            "--num-prompts",
            str(n),
            "--input-len",
            str(args.input_len),
            "--output-len",
            str(args.output_len),
            "--warmup",
            str(conc),
            "--ready-timeout",
            "60",
            "--workers",
            str(getattr(args, "workers", 1)),
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"client_truth: tunedeck bench failed at C={conc}: {r.stderr.strip().splitlines()[-1:]}")
    s = json.loads(r.stdout)
    meta = json.loads((data_home / "tunedeck" / "results" / s["run_id"] / "meta.json").read_text())
    time.sleep(0.2)  # the simulator appends each record after the response ended
    with open(rec, "rb") as f:
        f.seek(offset)
        new = [json.loads(x) for x in f.read().splitlines() if x.strip()]
    timed = [x for x in new if x["arrival"] >= meta["bench_start_wall"] - 0.005]
    if len(timed) != n:
        raise SystemExit(f"client_truth: C={conc}: {len(timed)} timed requests recorded by the simulator, expected {n}")
    t = truth(timed)
    cl = s.get("client") or {}
    samples = [
        json.loads(x)
        for x in (data_home / "tunedeck" / "results" / s["run_id"] / "samples.jsonl").read_text().splitlines()
    ]
    # where a TTFT difference comes from (means over the timed requests, wall clock):
    # ingest = the simulator had read the request − the client had written it;
    # receive lag = the client saw the first token − the simulator had written it
    sent = statistics.fmean(x["wall_start"] + x["send_time"] for x in samples)
    first_seen = statistics.fmean(x["wall_start"] + x["ttft"] for x in samples)
    ingest_ms = (statistics.fmean(x["arrival"] for x in timed) - sent) * 1000
    recv_lag_ms = (first_seen - statistics.fmean(x["times"][0] for x in timed)) * 1000
    return {
        "conc": conc,
        "n": n,
        "ttft": s["mean_ttft_ms"],
        "ttft_true": t["mean_ttft_ms"],
        "tpot": s["mean_tpot_ms"],
        "tpot_true": t["mean_tpot_ms"],
        "itl": s["mean_itl_ms"],
        "itl_true": t["mean_itl_ms"],
        "tok_s": s["output_throughput"],
        "tok_s_true": t["output_throughput"],
        "input_tokens": s["total_input_tokens"],
        "input_asked": n * args.input_len,
        "input_sim": t["prompt_tokens"],
        "ingest_ms": ingest_ms,
        "recv_lag_ms": recv_lag_ms,
        "stall_ms": cl.get("loop_lag_max_ms"),
        "lag_p99_ms": cl.get("loop_lag_p99_ms"),
        "cpu": cl.get("cpu_mean"),
        "client_bound": s.get("client_bound"),
        "machine_busy": s.get("machine_busy"),
        "failed": s["failed"],
    }


#: the figures compared with the simulator's truth, for both clients
METRICS = (("ttft", "mean TTFT"), ("tpot", "mean TPOT"), ("itl", "mean ITL"), ("tok_s", "output tok/s"))


def write_tokenizer(folder: Path, vocab: int = 32000) -> Path:
    """A word-level tokenizer (``tokenizer.json``, loadable by ``transformers``) with ``vocab``
    tokens: vLLM's random dataset only samples token ids and decodes them."""
    folder.mkdir(parents=True, exist_ok=True)
    words = {"<unk>": 0, **{f"w{i}": i for i in range(1, vocab)}}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": 0,
                "content": "<unk>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "model_max_length": 1 << 20})
    )
    return folder


def vllm_run(vllm: str, url: str, conc: int, args: argparse.Namespace, rec: Path, tmpd: Path) -> Dict[str, Any]:
    """``vllm bench serve`` with the same load as :func:`one_run`, set against the simulator's record."""
    n = max(10, 5 * conc)
    offset = rec.stat().st_size if rec.exists() else 0
    out = tmpd / f"vllm-c{conc}-{time.monotonic_ns()}"
    out.mkdir()
    cmd = [
        *vllm.split(),
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "m",
        "--tokenizer",
        str(tmpd / "tokenizer"),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(conc),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "result.json",
        "--disable-tqdm",
        "--seed",
        "0",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmpd, timeout=900)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"client_truth: vllm bench serve failed at C={conc}: {tail}")
    s = json.loads((out / "result.json").read_text())
    time.sleep(0.2)
    with open(rec, "rb") as f:
        f.seek(offset)
        new = [json.loads(x) for x in f.read().splitlines() if x.strip()]
    # vLLM sends a test prompt (and any warmups) first: the timed requests are the last n to arrive
    timed = sorted(new, key=lambda x: x["arrival"])[-n:]
    if len(timed) != n:
        raise SystemExit(f"client_truth: C={conc}: {len(timed)} vLLM requests recorded by the simulator, expected {n}")
    t = truth(timed)
    return {
        "conc": conc,
        "n": n,
        "ttft": s["mean_ttft_ms"],
        "ttft_true": t["mean_ttft_ms"],
        "tpot": s["mean_tpot_ms"],
        "tpot_true": t["mean_tpot_ms"],
        "itl": s["mean_itl_ms"],
        "itl_true": t["mean_itl_ms"],
        "tok_s": s["output_throughput"],
        "tok_s_true": t["output_throughput"],
        "input_tokens": s.get("total_input"),
        "failed": int(s.get("num_prompts", n)) - int(s.get("completed", n)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conc", default="1,32,128,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    ap.add_argument(
        "--vllm",
        default=shutil.which("vllm"),
        metavar="CMD",
        help="vLLM's CLI, run as CMD bench serve (default: vllm on PATH, if any)",
    )
    ap.add_argument("--no-vllm", action="store_true", help="do not run vllm bench serve")
    args = ap.parse_args()
    vllm = None if args.no_vllm else args.vllm
    if vllm is None and not args.no_vllm:
        print("# vllm is not installed here: tunedeck alone (pip install 'tunedeck[vllm]' to compare)", file=sys.stderr)
    vruns: List[Dict[str, Any]] = []
    concs = [int(c) for c in args.conc.split(",")]
    runs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="client-truth-") as tmp:
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
        )
        try:
            wait_port(port, 60)
            if vllm:
                write_tokenizer(tmpd / "tokenizer")
            for rep in range(args.repeats):
                for c in concs:
                    res = one_run(f"http://127.0.0.1:{port}", c, args, rec, tmpd / "data")
                    res["repeat"] = rep
                    runs.append(res)
                    if vllm:  # interleaved: the same load right after, against the same simulator
                        v = vllm_run(vllm, f"http://127.0.0.1:{port}", c, args, rec, tmpd)
                        v["repeat"] = rep
                        vruns.append(v)
                        print(
                            f"# C={c} repeat {rep + 1}: vllm ttft {v['ttft']:.2f}/{v['ttft_true']:.2f} ms, "
                            f"itl {v['itl']:.3f}/{v['itl_true']:.3f} ms",
                            file=sys.stderr,
                            flush=True,
                        )
                    print(
                        f"# C={c} repeat {rep + 1}: ttft {res['ttft']:.2f}/{res['ttft_true']:.2f} ms, "
                        f"itl {res['itl']:.3f}/{res['itl_true']:.3f} ms, stall {res['stall_ms']:.1f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            os.killpg(sim.pid, signal.SIGTERM)
            sim.wait(15)
    if args.json:
        args.json.write_text(json.dumps(runs + [{**v, "client": "vllm"} for v in vruns], indent=1) + "\n")
    print(
        f"fixed TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, input {args.input_len}, output "
        f"{args.output_len}; medians of {args.repeats}; tunedeck / simulator's record"
    )
    print()
    print(
        "| C | N | mean TTFT ms | mean TPOT ms | mean ITL ms | output tok/s | input tokens (asked) "
        "| max loop stall ms | server ingest ms | receive lag ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in concs:
        rs = [r for r in runs if r["conc"] == c]

        def med(k: str, rs: list = rs) -> float:
            return statistics.median(r[k] for r in rs)

        print(
            f"| {c} | {rs[0]['n']} | {med('ttft'):.2f} / {med('ttft_true'):.2f} | {med('tpot'):.3f} / "
            f"{med('tpot_true'):.3f} | {med('itl'):.3f} / {med('itl_true'):.3f} | {med('tok_s'):,.0f} / "
            f"{med('tok_s_true'):,.0f} | {med('input_tokens'):,.0f} ({rs[0]['input_asked']:,}) "
            f"| {med('stall_ms'):.1f} | {med('ingest_ms'):.2f} | {med('recv_lag_ms'):.2f} |"
        )
    if vruns:
        print_vllm(concs, runs, vruns)
    bad = [r for r in runs if r["failed"] or r["input_tokens"] != r["input_asked"]]
    return 1 if bad else 0


def print_vllm(concs: List[int], runs: List[Dict[str, Any]], vruns: List[Dict[str, Any]]) -> None:
    """vLLM's client against the same truth, and who was closer (medians of the absolute errors)."""

    def err(rs: List[Dict[str, Any]], k: str) -> float:
        if k == "tok_s":
            return statistics.median(abs(r[k] / r[k + "_true"] - 1) * 100 for r in rs)
        return statistics.median(abs(r[k] - r[k + "_true"]) for r in rs)

    print()
    print("vllm bench serve / simulator, same load, interleaved (medians):")
    print()
    print("| C | mean TTFT ms | mean TPOT ms | mean ITL ms | output tok/s |")
    print("|---|---|---|---|---|")
    for c in concs:
        vs = [r for r in vruns if r["conc"] == c]

        def med(k: str, vs: list = vs) -> float:
            return statistics.median(r[k] for r in vs)

        print(
            f"| {c} | {med('ttft'):.2f} / {med('ttft_true'):.2f} | {med('tpot'):.3f} / {med('tpot_true'):.3f} "
            f"| {med('itl'):.3f} / {med('itl_true'):.3f} | {med('tok_s'):,.0f} / {med('tok_s_true'):,.0f} |"
        )
    print()
    print("|error| from the truth, tunedeck vs vllm bench serve (ms; tok/s in %); = / < : tunedeck as close or closer")
    print()
    print("| C | " + " | ".join(label for _, label in METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    for c in concs:
        ts = [r for r in runs if r["conc"] == c]
        vs = [r for r in vruns if r["conc"] == c]
        cells = []
        for k, _ in METRICS:
            a, b = err(ts, k), err(vs, k)
            d = 2 if k in ("ttft", "tok_s") else 3
            cells.append(f"{a:.{d}f} {'<' if a < b else '=' if a == b else '>'} {b:.{d}f}")
        print(f"| {c} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
