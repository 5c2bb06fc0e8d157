"""`results export --vllm-json` and `bench --json` agree with vLLM's calculate_metrics, written out here.

The reference below follows vllm/benchmarks/serve.py (calculate_metrics) line by line with plain
Python (numpy's mean, population std and linear percentile); it does not use tunedeck.bench.metrics.
"""

import json
import math
import subprocess

import pytest

from tests.conftest import tunedeck_cmd
from tests.fakesrv import FakeServer


def _pct(xs, p):
    s = sorted(xs)
    if not s:
        return 0.0
    k = (len(s) - 1) * p / 100.0
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def _stats(xs):
    if not xs:
        return 0.0, 0.0, 0.0
    m = sum(xs) / len(xs)
    return m, _pct(xs, 50), math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def vllm_calculate_metrics(v, duration, percentiles=(90, 99)):
    """From vLLM's per-request arrays (request order) to its summary keys."""
    ttfts, tpots, itls, e2els, out_lens = [], [], [], [], []
    completed = total_input = 0
    ok = []
    for i, err in enumerate(v["errors"]):
        if err == "":
            n = v["output_lens"][i]
            out_lens.append(n)
            total_input += v["input_lens"][i]
            if n > 1:
                tpots.append((v["latencies"][i] - v["ttfts"][i]) / (n - 1))
            itls += v["itls"][i]
            ttfts.append(v["ttfts"][i])
            e2els.append(v["latencies"][i])
            completed += 1
            ok.append(i)
        else:
            out_lens.append(0)
    res = {
        "completed": completed,
        "failed": len(v["errors"]) - completed,
        "total_input_tokens": total_input,
        "total_output_tokens": sum(out_lens),
        "request_throughput": completed / duration,
        "output_throughput": sum(out_lens) / duration,
        "total_token_throughput": (total_input + sum(out_lens)) / duration,
    }
    # peak output events per 1-s bucket and requests active per bucket
    t0 = min(v["start_times"][i] for i in ok)
    t_end = max(v["start_times"][i] + v["latencies"][i] for i in ok)
    nb = math.ceil(t_end - t0) + 1
    tok, conc = [0] * nb, [0] * nb
    for i in ok:
        t = v["start_times"][i] + v["ttfts"][i]
        times = [t]
        for g in v["itls"][i]:
            t += g
            times.append(t)
        for t in times:
            b = int(t - t0)
            if 0 <= b < nb:
                tok[b] += 1
        for sec in range(int(v["start_times"][i] - t0), int(v["start_times"][i] + v["latencies"][i] - t0) + 1):
            conc[sec] += 1
    res["max_output_tokens_per_s"] = float(max(tok))
    res["max_concurrent_requests"] = max(conc)
    for name, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        m, med, sd = _stats(xs)
        res[f"mean_{name}_ms"], res[f"median_{name}_ms"], res[f"std_{name}_ms"] = m * 1000, med * 1000, sd * 1000
        for p in percentiles:
            res[f"p{p}_{name}_ms"] = _pct(xs, p) * 1000
    return res


@pytest.mark.timeout(90)
def test_json_and_vllm_export_match_vllms_metrics(tmp_path):
    pattern = "ok,ok,e500,ok,cut,ok,ok"
    with FakeServer("--ttft-ms", "15", "--itl-ms", "4", "--pattern", pattern) as srv:
        r = subprocess.run(
            [
                *tunedeck_cmd(),
                "bench",
                "--url",
                srv.url,
                "--concurrency",
                "6",
                "--num-prompts",
                "42",
                "--input-len",
                "9",
                "--output-len",
                "12",
                "--warmup",
                "0",
                "--json",
                "-",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    out = tmp_path / "v.json"
    e = subprocess.run(
        [*tunedeck_cmd(), "results", "export", summary["run_id"], "--vllm-json", str(out)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert e.returncode == 0, e.stderr
    v = json.loads(out.read_text())
    assert len(v["errors"]) == 42 and v["errors"] == summary["errors"]
    ref = vllm_calculate_metrics(v, v["duration"])
    assert ref["failed"] == 12 and ref["completed"] == 30
    assert summary["error_counts"] == {"HTTPStatus": 6, "IncompleteStream": 6}
    for key, want in ref.items():
        for got in (summary[key], v[key]):
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9), key
    assert summary["total_input_tokens"] == 30 * 9 and summary["total_output_tokens"] == 30 * 12
