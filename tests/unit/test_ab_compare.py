"""Comparison math, verdicts, config diff, warnings and renderers."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tunedeck.ab.compare import DEFAULT_NOISE_PCT, Stat, compare, judge, noise_band
from tunedeck.ab.confdiff import config_diff
from tunedeck.ab.render import render, to_csv, to_dict, to_markdown, to_text
from tunedeck.ab.sides import LevelResult, Side, SideRun, side_from_dict, side_to_dict, summaries_to_levels


def summ(c, tput, tpot, ttft=50.0, failed=0, **kw):
    d = {
        "max_concurrency": c,
        "completed": 10,
        "failed": failed,
        "output_throughput": tput,
        "median_tpot_ms": tpot,
        "median_ttft_ms": ttft,
        "p99_ttft_ms": ttft * 2,
        "p99_itl_ms": tpot * 1.5,
    }
    d.update(kw)
    return d


def side(label, profile, runs, argv=("sglang", "--tp", "8"), env=None, params=None, model="m"):
    return Side(
        label,
        profile,
        "sglang",
        model,
        tuple(argv),
        env or {},
        params or {"ignore_eos": True, "levels": [{"concurrency": 1, "input_len": 128, "output_len": 64}]},
        tuple(runs),
    )


def run(single, peak, tpot1=10.0, tpot_p=25.0, startup=30.0, **kw):
    return SideRun(
        (LevelResult(1, summ(1, single, tpot1)), LevelResult(128, summ(128, peak, tpot_p, **kw))), startup_s=startup
    )


def test_better_worse_noise_verdicts_and_direction():
    a = side("A", "base", [run(100, 5000, tpot1=10.0, startup=30)])
    b = side("B", "tuned", [run(118, 4650, tpot1=8.0, startup=30.5)])
    cmp = compare(a, b)
    r = cmp.row("single_output_tok_s")
    assert r.delta_pct == pytest.approx(18.0)
    assert r.outcome == "better" and r.verdict == "B +18%"
    r = cmp.row("peak_output_tok_s")
    assert r.delta_pct == pytest.approx(-7.0)
    assert r.outcome == "worse" and r.verdict == "B \u22127.0% (worse)"
    # lower is better: TPOT 10 -> 8 is an improvement
    r = cmp.row("tpot_median_ms_c1")
    assert r.outcome == "better" and r.verdict == "B \u221220% (better)"
    # 1000/median TPOT: 100 -> 125 tok/s
    r = cmp.row("single_decode_tok_s")
    assert r.a.mean == pytest.approx(100.0) and r.b.mean == pytest.approx(125.0)
    # startup 30 -> 30.5 (+1.7%) is inside the default 10% startup band
    assert cmp.row("startup_s").outcome == "noise" and cmp.row("startup_s").verdict == "within noise"
    assert cmp.winner is None and cmp.headline.startswith("Mixed")


def test_default_noise_threshold_single_repeat():
    a = Stat.of([100.0])
    assert judge(a, Stat.of([102.9]), "higher", DEFAULT_NOISE_PCT)[2] == "noise"
    assert judge(a, Stat.of([103.1]), "higher", DEFAULT_NOISE_PCT)[2] == "better"
    assert judge(a, Stat.of([96.9]), "higher", DEFAULT_NOISE_PCT)[2] == "worse"
    assert judge(a, None, "higher", 3.0)[2] == "na"


def test_noise_band_from_repeats():
    a = Stat.of([100.0, 110.0, 90.0])
    b = Stat.of([106.0, 116.0, 96.0])
    band = noise_band(a, b, 3.0)
    # sd 10 on both sides, n 3: Welch df 4, t(0.975, 4) = 2.776: 100 * 2.776 * sqrt(100/3 + 100/3) / 100
    assert band == pytest.approx(22.67, abs=0.01)
    assert judge(a, b, "higher", 3.0)[2] == "noise"  # +6% is inside the measured band
    tight_a = Stat.of([100.0, 100.5, 99.5])
    tight_b = Stat.of([106.0, 106.5, 105.5])
    assert judge(tight_a, tight_b, "higher", 3.0)[2] == "better"
    same = Stat.of([100.0, 100.0])
    assert noise_band(same, same, 3.0) == 1.0  # floor


def test_t_interval_is_wider_than_two_standard_errors_with_few_repeats():
    from tunedeck.ab.compare import t975

    assert t975(1) == pytest.approx(12.706) and t975(4) == pytest.approx(2.776) and t975(500) == 1.96
    # +9% on 2 + 2 repeats: 2 x SE would call it, the 95% t interval (df 2, t 4.30) does not
    a, b = Stat.of([97.0, 103.0]), Stat.of([106.0, 112.0])
    # sample sd 4.243 each, SE = sqrt(18/2 + 18/2) = 4.243 (2 x SE = 8.5% < 9%); df 2, t 4.303: 18.3%
    assert noise_band(a, b, 3.0) == pytest.approx(4.303 * 18**0.5, rel=0.01)
    assert judge(a, b, "higher", 3.0)[2] == "noise"


def test_a_p99_verdict_needs_enough_requests_at_its_level():
    few = side("A", "base", [run(100, 5000)])  # 10 requests per level
    slow = side("B", "tuned", [run(100, 5000, p99_ttft_ms=400.0)])
    cmp = compare(few, slow)
    r = cmp.row("ttft_p99_ms_c1")
    assert r.outcome == "na" and r.verdict == "p99 needs >= 100 requests at this level; 10 measured"
    assert r.a is not None and r.b is not None  # the numbers are still shown
    assert "TTFT p99" not in cmp.headline  # no regression claimed on 10 samples
    many = SideRun((LevelResult(1, summ(1, 100, 10.0, completed=200, total_output_tokens=200 * 64)),))
    worse = SideRun(
        (LevelResult(1, summ(1, 100, 10.0, completed=200, total_output_tokens=200 * 64, p99_ttft_ms=400.0)),)
    )
    cmp = compare(side("A", "base", [many]), side("B", "tuned", [worse]))
    assert cmp.row("ttft_p99_ms_c1").outcome == "worse"
    assert cmp.row("itl_p99_ms_c1").outcome != "na"  # 200 x 63 token gaps
    # ITL p99 counts token gaps: 5 requests x 1 token have none
    tiny = SideRun((LevelResult(1, summ(1, 100, 10.0, completed=5, total_output_tokens=5)),))
    assert compare(side("A", "a", [tiny]), side("B", "b", [tiny])).row("itl_p99_ms_c1").verdict == (
        "p99 needs >= 100 token gaps at this level; 0 measured"
    )


def test_a_client_bound_or_busy_level_carries_no_headline():
    a = side("A", "base", [run(100, 5000)])
    b = side("B", "tuned", [run(100, 6000, client_bound=True)])  # +20% peak, but the client was the limit
    cmp = compare(a, b)
    assert cmp.row("peak_output_tok_s").outcome == "better"  # the row keeps its numbers
    assert cmp.winner is None and "faster" not in cmp.headline
    assert "Not judged: peak output tok/s at C=128 (B client bound)." in cmp.headline
    busy = side("A", "base", [run(100, 5000, machine_busy=True)])
    cmp = compare(busy, side("B", "tuned", [run(100, 6000)]))
    assert cmp.winner is None and "(A machine busy)" in cmp.headline


def test_repeats_mean_and_spread_in_rows():
    a = side("A", "base", [run(100, 5000), run(102, 5100), run(98, 4900)])
    b = side("B", "tuned", [run(120, 5900), run(121, 6000), run(119, 5800)])
    cmp = compare(a, b)
    r = cmp.row("single_output_tok_s")
    assert r.a.n == 3 and r.a.mean == pytest.approx(100.0) and r.a.spread == pytest.approx(2.0)
    assert r.outcome == "better"
    assert cmp.winner == "B" and "faster" in cmp.headline
    assert cmp.repeats == (3, 3) and "95% t interval" in cmp.noise_method
    text = to_text(cmp)
    assert "100.0 \u00b1 2.0" in text


def test_config_diff_flags_and_env():
    a = ["python", "-m", "sglang.launch_server", "--tp=8", "--attention-backend", "triton", "--x"]
    b = [
        "python",
        "-m",
        "sglang.launch_server",
        "--tp",
        "8",
        "--attention-backend=flashinfer",
        "--disable-custom-all-reduce",
        "--num-continuous-decode-steps=4",
    ]
    d = config_diff(a, {"A": "1", "HF_TOKEN": "s1"}, b, {"A": "1", "NCCL_PROTO": "LL", "HF_TOKEN": "s2"})
    got = {(c.kind, c.name): (c.a, c.b) for c in d}
    assert got == {
        ("flag", "--attention-backend"): ("triton", "flashinfer"),
        ("flag", "--disable-custom-all-reduce"): (None, ""),
        ("flag", "--num-continuous-decode-steps"): (None, "4"),
        ("flag", "--x"): ("", None),
        ("env", "NCCL_PROTO"): (None, "LL"),
    }  # --tp=8 vs --tp 8 is the same; secret values are redacted so they never show as changed


def test_warnings_model_lengths_ignore_eos_failures():
    pa = {"ignore_eos": True, "levels": [{"concurrency": 1, "input_len": 128, "output_len": 64}]}
    pb = {"ignore_eos": False, "levels": [{"concurrency": 1, "input_len": 256, "output_len": 64}]}
    a = side("A", "base", [run(100, 5000)], params=pa, model="llama")
    b = side("B", "tuned", [run(110, 5100, failed=3)], params=pb, model="qwen")
    w = "\n".join(compare(a, b).warnings)
    assert "different models" in w
    assert "different ignore_eos: True vs False" in w
    assert "prompt length: 128 vs 256" in w
    assert "B: 3 of 13 requests failed at C=128" in w
    assert compare(a, b).row("failed_requests").verdict == "B +3 (worse)"


def test_different_prompt_sets_at_a_level_are_said():
    """Same options, other prompts (another seed, a changed file, another Python's text corpus): the
    comparison says so at the level where the workloads' sha256 differ, and only there."""

    def sent(sha1, sha128):
        return SideRun(
            (
                LevelResult(1, summ(1, 100, 10, workload={"name": "text", "sha256": sha1})),
                LevelResult(128, summ(128, 5000, 25, workload={"name": "text", "sha256": sha128})),
            )
        )

    a = side("A", "base", [sent("a" * 64, "c" * 64)])
    same = side("B", "tuned", [sent("a" * 64, "c" * 64)])
    other = side("B", "tuned", [sent("a" * 64, "d" * 64)])
    assert not [w for w in compare(a, same).warnings if "prompt sets" in w]
    assert [w for w in compare(a, other).warnings if "prompt sets" in w] == [
        f"C=128: A and B were sent different prompt sets (workload sha256 {'c' * 12} vs {'d' * 12}): the "
        "difference is the workloads' as well as the servers'"
    ]


def test_answers_that_end_at_eos_warn_only_when_their_lengths_differ():
    """ignore_eos off is not by itself a warning (greedy answers of one model are the same with and
    without speculative decoding); answers of a different mean length are: different work."""
    eos = {"ignore_eos": False, "levels": [{"concurrency": 1, "input_len": 128, "output_len": 64}]}
    same = side("A", "base", [run(100, 5000, total_output_tokens=600, completed=10)], params=eos)
    also = side("B", "eagle", [run(150, 5200, total_output_tokens=610, completed=10)], params=eos)
    assert not [x for x in compare(same, also).warnings if "length" in x or "ignore_eos" in x]
    longer = side("B", "eagle", [run(150, 5200, total_output_tokens=900, completed=10)], params=eos)
    w = [x for x in compare(same, longer).warnings if "different length" in x]
    assert w == [
        "C=128: A and B generated answers of different length (mean 60 vs 90 tokens per request): tok/s "
        "compares different work; compare with ignore_eos on, or per-request latency"
    ]


def test_warnings_give_the_client_health_verdicts_with_their_reasons():
    client = {
        "client_bound": True,
        "client_bound_reason": "a client process used 0.97 of a core",
        "machine_busy": True,
        "machine_busy_reason": "steal 12 %",
    }
    a = side("A", "base", [run(100, 5000, client_bound=True, machine_busy=True, client=client)])
    b = side("B", "tuned", [run(110, 5100, machine_busy=True, client={"machine_busy": True})])
    cmp = compare(a, b)
    w = "\n".join(cmp.warnings)
    assert (
        "A: the benchmark client was saturated at C=128 (a client process used 0.97 of a core); "
        "throughput may be understated"
    ) in w
    assert "A: the benchmark client's machine was busy at C=128 (steal 12 %); its timestamps may be late" in w
    assert "B: the benchmark client's machine was busy at C=128; its timestamps may be late" in w  # no reason
    assert "B: the benchmark client was saturated" not in w and "C=1 " not in w
    assert "machine was busy at C=128 (steal 12 %)" in to_text(cmp) and "(steal 12 %)" in to_markdown(cmp)


def test_missing_values_are_na_not_zero():
    a = side("A", "base", [SideRun((LevelResult(1, {"max_concurrency": 1, "output_throughput": 50.0}),))])
    b = side(
        "B",
        "tuned",
        [SideRun((LevelResult(1, {"max_concurrency": 1, "output_throughput": 60.0, "median_tpot_ms": 9.0}),))],
    )
    cmp = compare(a, b)
    r = cmp.row("single_decode_tok_s")
    assert r.a is None and r.outcome == "na" and r.verdict.startswith("n/a")
    assert cmp.row("startup_s") is None
    assert "N/A" in to_text(cmp)


def test_spec_acceptance_row_only_when_present():
    a = side("A", "base", [run(100, 5000)])
    b = side("B", "eagle", [run(150, 5200, spec_decode_acceptance_rate=62.5)])
    r = compare(a, b).row("spec_acceptance_pct")
    assert r is not None and r.a is None and r.b.mean == 62.5
    assert compare(a, a).row("spec_acceptance_pct") is None


def test_sweep_intermediate_levels():
    def sw(k):
        return SideRun(tuple(LevelResult(c, summ(c, c * 10.0 * k, 10.0)) for c in (1, 8, 32, 128)))

    cmp = compare(side("A", "a", [sw(1.0)]), side("B", "b", [sw(1.1)]))
    keys = [r.key for r in cmp.rows]
    assert "output_tok_s_c8" in keys and "output_tok_s_c32" in keys
    assert cmp.row("peak_output_tok_s").concurrency == 128


def test_renderers_agree():
    a = side("A", "base", [run(100, 5000)], argv=("s", "--a=1"))
    b = side("B", "tuned", [run(120, 5500)], argv=("s", "--a=2"))
    cmp = compare(a, b)
    md = to_markdown(cmp)
    assert "| Peak output tok/s (C=128) | 5,000.0 | 5,500.0 | +10% | B +10% |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(cmp))))
    peak = next(r for r in rows if r["key"] == "peak_output_tok_s")
    assert float(peak["delta_pct"]) == pytest.approx(10.0) and peak["outcome"] == "better"
    js = json.loads(render(cmp, "json"))
    assert js["winner"] == "B" and js["config_diff"] == [{"kind": "flag", "name": "--a", "a": "1", "b": "2"}]
    assert to_dict(cmp)["rows"][0]["a"]["mean"] == 100.0
    with pytest.raises(ValueError):
        render(cmp, "xml")


def test_side_round_trip_and_summary_shapes():
    a = side("A", "base", [run(100, 5000)], env={"HF_TOKEN": "x"})
    back = side_from_dict(json.loads(json.dumps(side_to_dict(a))))
    assert back.env == {"HF_TOKEN": "<redacted>"}
    assert compare(back, back).row("peak_output_tok_s").outcome == "noise"
    lv = summaries_to_levels({"levels": [summ(1, 1, 1), summ(8, 2, 2)]}, run_id="r1")
    assert [x.concurrency for x in lv] == [1, 8] and lv[0].run_id == "r1"
    assert summaries_to_levels(summ(4, 1, 1))[0].concurrency == 4
