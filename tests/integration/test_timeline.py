"""Every host-side benchmark level carries its GPU and server timeline (timeline.jsonl),
mirrored into the local store and printed by ``results show RUN --timeline``."""

from __future__ import annotations

import json

import pytest

from tests.clifix import bench_load, cli_json, run_cli
from tests.simfix import free_port, vllm_sim
from tunedeck.hostside.timeline import parse_gpu_rows, server_figures

pytestmark = pytest.mark.timeout(240)


def test_gpu_rows_keep_not_available_as_null():
    g = parse_gpu_rows(["1, 90, 1000, 1755, 650.5, 700.00, 60, 1980", "0, [N/A], 10, 345, 80, 700, 34, 1980"])
    assert g["util"] == [None, 90.0] and g["sm_clock"] == [345.0, 1755.0] and g["power_limit"] == [700.0, 700.0]


def test_server_figures_from_vllm_counters_are_rates_and_deltas():
    page = (
        'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting{engine="0"} 1\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:num_preemptions_total{engine="0"} %d\n'
        'vllm:generation_tokens_total{engine="0"} %d\n'
    )
    first = server_figures(page % (2, 1000), None, 10.0)
    second = server_figures(page % (2, 1500), first, 12.0)
    assert first["gen_tok_s"] is None and second["gen_tok_s"] == 250.0
    assert (second["running"], second["waiting"], second["kv"], second["preempt_raw"]) == (3, 1, 0.5, 2)


def test_a_host_side_benchmark_records_its_timeline_and_results_show_prints_it():
    port = free_port()
    with vllm_sim(port, itl_ms=20):
        run_id = cli_json("bench", "--demo", "--port", str(port), *bench_load(4, 12, 120))["run_id"]
    show = run_cli("results", "show", run_id, "--timeline", "--json")
    assert show.returncode == 0, show.stderr
    lines = json.loads(show.stdout)
    assert len(lines) >= 4, lines
    assert [ln["second"] for ln in lines] == sorted(ln["second"] for ln in lines)
    assert all(len(ln["gpu"]["util"]) == 8 and len(ln["gpu"]["sm_clock"]) == 8 for ln in lines)
    busy = [ln for ln in lines if (ln["client"]["tok_s"] or 0) > 0]
    assert busy and any((ln["server"]["running"] or 0) > 0 for ln in busy)
    assert any((ln["server"]["gen_tok_s"] or 0) > 0 for ln in busy)
    assert all(ln["server"]["preemptions"] == 0 for ln in lines if ln["server"]["preemptions"] is not None)
    table = run_cli("results", "show", run_id, "--timeline")
    assert table.returncode == 0 and "client tok/s" in table.stdout.splitlines()[0]
    assert len(table.stdout.splitlines()) == len(lines) + 1


def test_results_show_timeline_names_a_run_without_one():
    from tunedeck.bench.store import RunWriter

    w = RunWriter("r-no-timeline", {"model_id": "m"})
    w.close()
    r = run_cli("results", "show", "r-no-timeline", "--timeline")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no timeline.jsonl" in r.stderr
