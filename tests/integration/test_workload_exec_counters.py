"""Per-level server counters: /metrics read before and after each level's timed phase and differenced,
against a loopback server whose counters move with every request (and start at lifetime values)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakesrv import FakeServer
from tests.simfix import SimProc, free_port
from tunedeck.bench import metrics
from tunedeck.bench.config import BenchConfig
from tunedeck.bench.counters import FIGURE_KEYS, level_figures, parse_counters
from tunedeck.bench.runner import run_benchmark
from tunedeck.bench.store import rebuild_summary
from tunedeck.bench.workloads.base import WorkloadSpec
from tunedeck.util.aio import run_async

VLLM_PAGE = """# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m",engine="0"} 1000
vllm:prefix_cache_queries_total{model_name="m",engine="1"} 1000
vllm:prefix_cache_hits_total{model_name="m",engine="0"} 500
vllm:prefix_cache_hits_total{model_name="m",engine="1"} 700
vllm:spec_decode_num_drafts_total{model_name="m"} 100
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 300
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 150
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 80
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 50
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 20
vllm:spec_decode_num_drafts_created{model_name="m"} 1.7e9
vllm:num_requests_running{model_name="m"} 3
not a metric line at all {
"""


def test_counters_are_summed_over_label_sets_and_differenced():
    before = parse_counters(VLLM_PAGE)
    assert before["vllm:prefix_cache_hits_total"] == 1200
    assert before["vllm:spec_decode_num_accepted_tokens_per_pos_total{1}"] == 50
    assert "vllm:num_requests_running" not in before
    after = dict(before)
    after.update(
        {
            "vllm:prefix_cache_queries_total": 2400,
            "vllm:prefix_cache_hits_total": 1500,  # this level: 300 of 400 (the lifetime rate is 0.625)
            "vllm:spec_decode_num_drafts_total": 110,
            "vllm:spec_decode_num_draft_tokens_total": 330,
            "vllm:spec_decode_num_accepted_tokens_total": 165,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{0}": 90,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{1}": 55,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{2}": 20,
        }
    )
    f = level_figures(before, after)
    assert f["prefix_cache_hit_rate"] == pytest.approx(0.75)
    assert f["spec_decode_num_drafts"] == 10 and f["spec_decode_draft_tokens"] == 30
    assert f["spec_decode_accepted_tokens"] == 15
    assert f["spec_decode_acceptance_rate"] == pytest.approx(50.0)  # %, as vllm bench serve reports it
    assert f["spec_decode_acceptance_length"] == pytest.approx(2.5)
    assert f["spec_decode_per_position_acceptance_rates"] == pytest.approx([1.0, 0.5, 0.0])
    assert f["server_counters_note"] is None


def test_a_counter_that_goes_back_gives_no_figure_and_says_why():
    before = parse_counters(VLLM_PAGE)
    after = dict(before, **{"vllm:prefix_cache_hits_total": 10.0, "vllm:prefix_cache_queries_total": 20.0})
    f = level_figures(before, after)
    assert f["prefix_cache_hit_rate"] is None
    assert "went back" in f["server_counters_note"]


def test_sglang_counters_come_first_and_gauges_are_named_for_what_they_are():
    page = "sglang:prompt_tokens_total 1000\nsglang:cached_tokens_total 100\nsglang:cache_hit_rate 0.9\n"
    after = "sglang:prompt_tokens_total 1400\nsglang:cached_tokens_total 400\nsglang:cache_hit_rate 0.9\n"
    f = level_figures(parse_counters(page), parse_counters(after))
    assert f["prefix_cache_hit_rate"] == pytest.approx(0.75) and f["server_counters_note"] is None
    gauges = "sglang:cache_hit_rate 0.6\nsglang:spec_accept_length 2.75\nsglang:spec_accept_rate 0.58\n"
    g = level_figures(parse_counters(gauges), parse_counters(gauges))
    assert g["prefix_cache_hit_rate"] == 0.6 and g["spec_decode_acceptance_length"] == 2.75
    assert g["spec_decode_acceptance_rate"] == pytest.approx(58.0)
    assert "gauge sglang:cache_hit_rate (the latest prefill batch's)" in g["server_counters_note"]
    assert "gauge sglang:spec_accept_length (the last decode-log interval's)" in g["server_counters_note"]
    assert "lifetime" not in g["server_counters_note"]
    none = level_figures(None, parse_counters(gauges))
    assert all(none[k] is None for k in FIGURE_KEYS) and none["server_counters_note"] == "server /metrics not read"


def _bench(url: str, tmp_path, **kw) -> dict:
    cfg = BenchConfig(url=url, concurrency=[2], input_len=6, output_len=8, warmup=3, ready_timeout=20, **kw)
    (summary,) = run_async(run_benchmark(cfg, results_dir=tmp_path / "results"))
    return summary


@pytest.mark.timeout(120)
def test_level_summary_has_this_levels_counters_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with FakeServer("--ttft-ms", "3", "--itl-ms", "1", "--counters", "vllm") as srv:
        s = _bench(srv.url, tmp_path, num_prompts=10)
    # per request: hits = half of the queried tokens; 8 drafts of 3 tokens, 1.5 accepted each.
    # The lifetime values (and the 3 warmup requests) are not this level's: 0.5, not the lifetime ~0.6
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.5)
    assert s["spec_decode_num_drafts"] == 10 * 8
    assert s["spec_decode_draft_tokens"] == 10 * 8 * 3
    assert s["spec_decode_accepted_tokens"] == 10 * 8 * 3 // 2
    assert s["spec_decode_acceptance_rate"] == pytest.approx(50.0)
    assert s["spec_decode_acceptance_length"] == pytest.approx(2.5)
    assert s["spec_decode_per_position_acceptance_rates"] == pytest.approx([1.0, 0.5, 0.0])
    text = metrics.format_extras(s)
    assert "Server counters this level: prefix cache hit rate 50.0 %; acceptance length 2.50, rate 50.0 %" in text
    assert "Acceptance by position: 100 %, 50 %, 0 %" in text
    # stored with the run: a rebuilt summary keeps them
    on_disk = json.loads((tmp_path / "results" / s["run_id"] / "summary.json").read_text())
    assert on_disk["spec_decode_num_drafts"] == 80
    monkeypatch.setattr("tunedeck.bench.store.results_dir", lambda: tmp_path / "results")
    assert rebuild_summary(s["run_id"], write=False)["prefix_cache_hit_rate"] == pytest.approx(0.5)


@pytest.mark.timeout(120)
def test_counters_with_worker_processes_are_read_around_the_timed_phase(tmp_path):
    with FakeServer("--ttft-ms", "3", "--itl-ms", "1", "--counters", "sglang") as srv:
        s = _bench(srv.url, tmp_path, num_prompts=8, workers=2)
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.5)  # the counters, not the 0.9 gauge
    assert s["spec_decode_acceptance_length"] == pytest.approx(3.25)
    assert "gauge sglang:spec_accept_length (the last decode-log interval's)" in s["server_counters_note"]


@pytest.mark.timeout(120)
def test_a_server_without_metrics_gives_nulls(tmp_path):
    with FakeServer("--ttft-ms", "3", "--itl-ms", "1") as srv:
        s = _bench(srv.url, tmp_path, num_prompts=4)
    assert all(k in s and s[k] is None for k in FIGURE_KEYS)
    assert s["server_counters_note"] == "server /metrics not read"
    assert "Server counters: server /metrics not read" in metrics.format_extras(s)


@pytest.mark.timeout(180)
def test_simulator_speculative_counters(tmp_path):
    port = free_port()
    with SimProc(
        "vllm",
        "--port",
        str(port),
        "--speculative-config",
        '{"method":"eagle3","model":"draft","num_speculative_tokens":3}',
    ) as sim:
        sim.wait_ready(60)
        s = _bench(f"http://127.0.0.1:{port}", tmp_path, num_prompts=6)
    assert s["spec_decode_num_drafts"] and s["spec_decode_num_drafts"] > 0, sim.raw[-2000:]
    assert 1.0 <= s["spec_decode_acceptance_length"] <= 4.0
    assert len(s["spec_decode_per_position_acceptance_rates"]) == 3
    assert s["prefix_cache_hit_rate"] is not None  # the simulator serves both prefix-cache counters


def _truth(records: list[dict]) -> float:
    """Acceptance length from the simulator's own record of each request's emissions: the first is
    the prefill's token, each later one a verify step (its token plus the drafts it accepted)."""
    verify = sum(len(r["tokens"]) - 1 for r in records)
    accepted = sum(sum(r["tokens"]) - len(r["tokens"]) for r in records)
    return 1.0 + accepted / verify


@pytest.mark.timeout(240)
def test_sglang_simulator_levels_get_their_own_acceptance(tmp_path):
    """Two levels on one EAGLE server, natural text then random token ids: each level's acceptance
    is its own requests' (from SGLang's verify, token and request counters), equal to what the
    simulator recorded for those requests, and not the gauge, which is only the last decode line's."""
    port, rec = free_port(), tmp_path / "requests.jsonl"
    flags = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    flags += ["--speculative-num-draft-tokens", "4", "--enable-metrics", "--sim-record-timestamps", str(rec)]
    args = ["--model-path", "m", "--tp", "8", "--port", str(port), "--sim-load-seconds", "1", *flags]
    summaries, records, gauges = [], [], []
    with SimProc("sglang", *args) as sim:
        sim.wait_ready(60)
        url = f"http://127.0.0.1:{port}"
        for name in ("text", "random"):
            done = len(rec.read_text().splitlines()) if rec.exists() else 0
            cfg = BenchConfig(
                url=url, concurrency=[4], input_len=512, output_len=48, num_prompts=12, warmup=0,
                ready_timeout=20, workload=WorkloadSpec(name),
            )  # fmt: skip
            (s,) = run_async(run_benchmark(cfg, results_dir=tmp_path / "results"))
            summaries.append(s)
            records.append([json.loads(x) for x in rec.read_text().splitlines()[done:]])
            page = parse_counters(httpx.get(f"{url}/metrics").text)
            gauges.append(page["sglang:spec_accept_length"])
        text, rand = (s["spec_decode_acceptance_length"] for s in summaries)
        # the native API's per-request figures and the lifetime average agree with the same model
        body = {"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        meta = httpx.post(f"{url}/generate", json=body, timeout=30).json()["meta_info"]
        assert meta["completion_tokens"] == 40 and meta["spec_verify_ct"] > 0
        assert meta["spec_accept_length"] == pytest.approx(40 / meta["spec_verify_ct"])
        assert meta["spec_num_correct_drafts"] == 40 - 1 - meta["spec_verify_ct"]
        assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
        (state,) = httpx.get(f"{url}/get_server_info").json()["internal_states"]
        assert rand < state["avg_spec_accept_length"] < text + 0.3  # every decode line since start
    for s, recs in zip(summaries, records):
        assert len(recs) == 12 and s["server_counters_note"] is None, (s["server_counters_note"], sim.raw[-2000:])
        assert s["spec_decode_num_drafts"] == sum(len(r["tokens"]) - 1 for r in recs)
        assert s["spec_decode_acceptance_length"] == pytest.approx(_truth(recs), abs=1e-9)
        assert s["spec_decode_draft_tokens"] == 3 * s["spec_decode_num_drafts"]
        rate = s["spec_decode_accepted_tokens"] / s["spec_decode_draft_tokens"] * 100
        assert s["spec_decode_acceptance_rate"] == pytest.approx(rate)
    assert text - rand > 0.3, (text, rand)  # EAGLE accepts more on natural text (docs/sim-model.md)
    assert gauges[0] != text and gauges[1] != rand  # the gauge is the last decode line's, not the level's


def test_level_table_shows_the_counters_and_the_schedule_only_when_there():
    from rich.console import Console

    from tunedeck.model import SweepLevel, SweepReport
    from tunedeck.widgets.sweep_table import SweepTable

    def render(*summaries: dict) -> str:
        report = SweepReport(tuple(SweepLevel.from_summary(s, f"C={i}") for i, s in enumerate(summaries)), 2)
        con = Console(width=160, record=True, color_system=None)
        con.print(SweepTable().render_report(report))
        return con.export_text()

    plain = {"completed": 10, "failed": 0, "output_throughput": 100.0}
    text = render(plain)
    assert "Cache" not in text and "Spec" not in text and "Disp" not in text
    counted = dict(
        plain,
        prefix_cache_hit_rate=0.625,
        spec_decode_acceptance_length=2.5,
        dispatch_lag_p99_ms=180.0,
        dispatch_lag_max_ms=240.0,
        dispatch_behind=True,
        server_counters_note="speculative acceptance is SGLang's gauge sglang:spec_accept_length",
    )
    text = render(plain, counted)
    assert "Cache" in text and "62.5" in text and "2.50" in text and "180.0" in text
    assert "C=1 dispatch fell behind its schedule (p99 180.0 ms, max 240.0 ms)" in text
    assert "C=1 server counters: speculative acceptance is SGLang's gauge" in text
