"""Where the benchmark client runs: on the GPU host vs here through the SSH tunnel.

A real OpenSSH sshd on 127.0.0.1 stands in for the GPU host: its sessions run as a
plain user whose PATH has no tunedeck and whose ``python3`` (the system one) has no
httpx. The simulator (fixed TTFT 50 ms, ITL 10 ms) records when it received each
request and when it wrote each chunk: that is the truth. For each concurrency the
same ``tunedeck bench --host ... --port ...`` runs with the client on the host (the
default) and with ``--client-where local`` (through the SSH port forward),
interleaved, ``--repeats`` times; the table shows medians.

    python benchmarks/host_vs_tunnel.py [--repeats 3] [--conc 1,128,256] [--out FILE]

Needs root (the sshd fixture creates its test user) and /usr/sbin/sshd.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.simfix import SimProc, free_port
from tests.sshd import ROOT_USER, TEST_USER, SshdServer, _ensure_root_alias, _ensure_user

TTFT_MS, ITL_MS, IN_LEN, OUT_LEN = 50.0, 10.0, 128, 64


def truth(records: list[dict]) -> dict[str, float]:
    """What the server saw: TTFT = first chunk written - request read; tok/s over the span."""
    ttft = [(r["times"][0] - r["arrival"]) * 1000 for r in records if r.get("times")]
    start = min(r["arrival"] for r in records)
    end = max(r["times"][-1] for r in records if r.get("times"))
    toks = sum(int(r.get("completion_tokens") or sum(r.get("tokens") or [])) for r in records)
    return {"ttft_ms": statistics.fmean(ttft), "tok_s": toks / (end - start), "n": len(records)}


def one(
    sshd: SshdServer,
    port: int,
    rec: Path,
    conc: int,
    where: str,
    env: dict[str, str],
    user: str = TEST_USER,
    python: str | None = None,
) -> dict[str, float]:
    n = 20 if conc == 1 else 5 * conc
    before = rec.stat().st_size if rec.exists() else 0
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunedeck",
            "bench",
            "--host",
            sshd.target(user),
            "--port",
            str(port),
            *(["--python", python] if python and where == "host" else []),
            "--concurrency",
            str(conc),
            "--num-prompts",
            str(n),
            "--input-len",
            str(IN_LEN),
            "--output-len",
            str(OUT_LEN),
            "--warmup",
            str(min(conc, 32)),
            "--client-where",
            where,
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=900,
    )
    if r.returncode != 0:
        raise SystemExit(f"bench failed (C={conc}, {where}): {r.stderr[-2000:]}")
    s = json.loads(r.stdout)
    with open(rec, "rb") as f:
        f.seek(before)
        recs = [json.loads(x) for x in f.read().splitlines() if x.strip()]
    start = s["client"].get("bench_start_wall") or 0
    timed = recs[-n:]  # the warmup requests came first
    t = truth(timed)
    return {
        "ttft_ms": s["mean_ttft_ms"],
        "true_ttft_ms": t["ttft_ms"],
        "ttft_err_ms": s["mean_ttft_ms"] - t["ttft_ms"],
        "p99_ttft_ms": s["p99_ttft_ms"],
        "tok_s": s["output_throughput"],
        "true_tok_s": t["tok_s"],
        "tok_err_pct": (s["output_throughput"] - t["tok_s"]) / t["tok_s"] * 100,
        "completed": s["completed"],
        "start": start,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conc", default="1,128,256")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "host_vs_tunnel.json")
    ap.add_argument(
        "--itl-ms",
        type=float,
        default=ITL_MS,
        help=f"the simulator's fixed inter-token delay (default {ITL_MS:g}; larger = a lighter server)",
    )
    ap.add_argument(
        "--python",
        default=None,
        help="the host's interpreter for the host-side client (default: the plain user's python3, "
        "no uvloop); a root-readable one runs as the uid-0 test user",
    )
    a = ap.parse_args(argv)
    concs = [int(x) for x in a.conc.split(",")]
    _ensure_user(TEST_USER)
    _ensure_root_alias()
    base = Path(tempfile.mkdtemp(prefix="tunedeck-htt-"))
    sshd = SshdServer(base)
    sshd.start()
    xdg = base / "xdg"
    env = sshd.client_env(**{k: str(xdg / k.lower()) for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")})
    rec = base / "truth.jsonl"
    port = free_port()
    rows: dict[tuple[int, str], list[dict[str, float]]] = {}
    sim = SimProc(
        "vllm",
        "m",
        "-tp",
        "8",
        "--port",
        str(port),
        "--sim-load-seconds",
        "0.5",
        "--sim-fixed-ttft-ms",
        str(TTFT_MS),
        "--sim-fixed-itl-ms",
        str(a.itl_ms),
        "--sim-record-timestamps",
        str(rec),
        "--max-num-seqs",
        "1024",
    )
    try:
        sim.wait_ready(60)
        for rep in range(a.repeats):
            for c in concs:
                for where in ("host", "local") if rep % 2 == 0 else ("local", "host"):
                    res = one(sshd, port, rec, c, where, env, ROOT_USER if a.python else TEST_USER, a.python)
                    rows.setdefault((c, where), []).append(res)
                    print(
                        f"repeat {rep + 1} C={c:<4} {where:<5} TTFT {res['ttft_ms']:8.1f} ms "
                        f"(truth {res['true_ttft_ms']:6.1f}, {res['ttft_err_ms']:+7.1f})  "
                        f"tok/s {res['tok_s']:9.1f} (truth {res['true_tok_s']:9.1f}, "
                        f"{res['tok_err_pct']:+5.1f}%)",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        sim.stop()
        sshd.stop()

    def med(c: int, w: str, k: str) -> float:
        return statistics.median(x[k] for x in rows[(c, w)])

    lines = [
        f"Medians of {a.repeats} interleaved repeats; simulator at fixed TTFT {TTFT_MS:g} ms / ITL {a.itl_ms:g} ms, "
        f"input {IN_LEN}, output {OUT_LEN} tokens; truth = the server's own timestamps.",
        "",
        "| C | client | mean TTFT (ms) | truth (ms) | error (ms) | p99 TTFT (ms) | output tok/s | truth tok/s | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in concs:
        for w, label in (("host", "on the host (default)"), ("local", "here, through the SSH tunnel")):
            lines.append(
                f"| {c} | {label} | {med(c, w, 'ttft_ms'):.1f} | {med(c, w, 'true_ttft_ms'):.1f} | "
                f"{med(c, w, 'ttft_err_ms'):+.1f} | {med(c, w, 'p99_ttft_ms'):.1f} | {med(c, w, 'tok_s'):,.0f} | "
                f"{med(c, w, 'true_tok_s'):,.0f} | {med(c, w, 'tok_err_pct'):+.2f}% |"
            )
    table = "\n".join(lines)
    print(table)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(
        json.dumps({"rows": {f"{c}-{w}": v for (c, w), v in rows.items()}, "table": table}, indent=1) + "\n"
    )
    ok = all(abs(med(c, "host", "ttft_err_ms")) <= 10 and abs(med(c, "host", "tok_err_pct")) <= 1.5 for c in concs)
    print("host-side client within 10 ms TTFT and 1.5% tok/s of the truth at every C:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("TUNEDECK_SIM_LOAD_S", "1")
    raise SystemExit(main())
