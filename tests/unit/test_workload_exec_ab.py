"""A/B verdicts that say when they cannot transfer: speculative or prefix-cache differences measured on
random token ids, speculative comparisons under ignore_eos, percentiles over too few requests; and the
per-level server counters as A/B rows."""

from __future__ import annotations

from tunedeck.ab.compare import compare, min_samples
from tunedeck.ab.render import to_text
from tunedeck.ab.sides import LevelResult, Side, SideRun
from tunedeck.ab.warnings import side_workloads, workload_warnings

BASE = ("vllm", "serve", "m", "--tensor-parallel-size", "8")
SPEC = BASE + ("--speculative-config", '{"method":"eagle3","model":"d","num_speculative_tokens":3}')


def summ(c: int, completed: int = 200, workload: dict | None = None, **kw) -> dict:
    d = {
        "max_concurrency": c,
        "completed": completed,
        "failed": 0,
        "output_throughput": 100.0 * c,
        "median_tpot_ms": 10.0,
        "median_ttft_ms": 50.0,
        "p99_ttft_ms": 100.0,
        "p99_itl_ms": 15.0,
    }
    if workload is not None:
        d["workload"] = workload
    d.update(kw)
    return d


def side(label: str, argv, levels, ignore_eos: bool = False) -> Side:
    return Side(
        label,
        label.lower(),
        "vllm",
        "m",
        tuple(argv),
        {},
        {"ignore_eos": ignore_eos},
        (SideRun(tuple(LevelResult(c, s) for c, s in levels)),),
    )


TEXT = {"name": "sharegpt", "params": {}, "sha256": "ab" * 32}


def test_speculative_difference_on_random_token_ids_is_named():
    a = side("A", BASE, [(1, summ(1)), (64, summ(64))])
    b = side("B", SPEC, [(1, summ(1)), (64, summ(64))])
    w = workload_warnings(a, b)
    assert any("differ in speculative decoding but were measured on random token ids" in x for x in w), w
    assert w == compare(a, b).warnings[: len(w)] or all(x in compare(a, b).warnings for x in w)
    # a text workload on both sides: no such warning
    at = side("A", BASE, [(1, summ(1, workload=TEXT))])
    bt = side("B", SPEC, [(1, summ(1, workload=TEXT))])
    assert not any("random token ids" in x for x in workload_warnings(at, bt))
    assert side_workloads(at) == {"sharegpt"} and side_workloads(a) == {"random"}
    # the same speculative settings on both sides: nothing to say about random ids
    assert workload_warnings(side("A", SPEC, [(1, summ(1))]), side("B", SPEC, [(1, summ(1))])) == []


def test_prefix_cache_difference_on_random_token_ids_is_named():
    a = side("A", BASE, [(1, summ(1))])
    b = side("B", BASE + ("--no-enable-prefix-caching",), [(1, summ(1))])
    w = workload_warnings(a, b)
    assert len(w) == 1 and "differ in prefix caching" in w[0] and "share no prefix" in w[0]
    sg_a = side("A", ("python", "-m", "sglang.launch_server"), [(1, summ(1, workload={"name": "random"}))])
    sg_b = side("B", ("python", "-m", "sglang.launch_server", "--disable-radix-cache"), [(1, summ(1))])
    assert any("prefix caching" in x for x in workload_warnings(sg_a, sg_b))


def test_speculative_comparison_under_ignore_eos_is_named():
    a = side("A", BASE, [(1, summ(1, workload=TEXT))], ignore_eos=True)
    b = side("B", SPEC, [(1, summ(1, workload=TEXT))], ignore_eos=True)
    w = workload_warnings(a, b)
    assert len(w) == 1 and "speculative decoding compared with ignore_eos" in w[0]
    a2 = side("A", BASE, [(1, summ(1, workload=TEXT))])
    b2 = side("B", SPEC, [(1, summ(1, workload=TEXT))])
    assert workload_warnings(a2, b2) == []
    # no speculative decoding anywhere: ignore_eos is the usual throughput setting, nothing to say
    assert workload_warnings(side("A", BASE, [(1, summ(1))], True), side("B", BASE, [(1, summ(1))], True)) == []


def test_a_p99_verdict_over_too_few_requests_is_replaced():
    assert min_samples(99) == 100 and min_samples(90) == 10 and min_samples(99.9) == 1000
    a = side("A", BASE, [(1, summ(1, completed=40)), (64, summ(64, completed=320))])
    b = side("B", BASE, [(1, summ(1, completed=40, p99_ttft_ms=150.0)), (64, summ(64, p99_ttft_ms=300.0))])
    cmp = compare(a, b)
    r1 = cmp.row("ttft_p99_ms_c1")
    assert r1.outcome == "na" and r1.verdict == "p99 needs >= 100 requests at this level; 40 measured"
    assert r1.delta_pct is None  # no Δ either: it would read as a verdict
    assert "TTFT p99 at C=1" not in cmp.headline  # not counted as a regression
    r64 = cmp.row("ttft_p99_ms_c64")
    assert r64.outcome == "worse" and r64.verdict.startswith("B +")
    assert "p99 needs >= 100 requests at this level; 40 measured" in to_text(cmp)


def test_server_counters_are_ab_rows():
    a = side("A", BASE, [(1, summ(1)), (64, summ(64, prefix_cache_hit_rate=0.40))])
    b = side(
        "B",
        SPEC,
        [
            (1, summ(1)),
            (
                64,
                summ(
                    64,
                    prefix_cache_hit_rate=0.62,
                    spec_decode_acceptance_rate=55.0,
                    spec_decode_acceptance_length=2.65,
                ),
            ),
        ],
    )
    cmp = compare(a, b)
    hit = cmp.row("prefix_cache_hit_pct")
    assert hit.a.mean == 40.0 and hit.b.mean == 62.0 and hit.outcome == "better"
    acc = cmp.row("spec_acceptance_pct")
    assert acc.a is None and acc.b.mean == 55.0
    ln = cmp.row("spec_accept_length")
    assert ln.b.mean == 2.65 and ln.verdict == "n/a (no A value)"
    text = to_text(cmp)
    assert "Prefix cache hit rate (%, C=64)" in text and "2.65" in text


def test_builtin_workload_plans_name_their_workload():
    from tunedeck.ab.plan import Plan
    from tunedeck.ab.plans import load_plan
    from tunedeck.bench.workloads import WorkloadSpec

    want = {"chat": "conversation", "rag": "shared_prefix", "spec-check": "text"}
    for plan_name, workload in want.items():
        plan = load_plan(plan_name)
        assert plan.workload.name == workload
        assert all(lv.num_prompts >= 100 for lv in plan.levels)  # p99 rows get a verdict
        assert Plan.from_dict(plan.to_dict()).workload == plan.workload  # travels to the host
    assert load_plan("chat").workload == WorkloadSpec("conversation", None, {"turns": 4, "think_s": 2.0})
    assert load_plan("spec-check").ignore_eos is False
    assert load_plan("quick").workload == WorkloadSpec()  # random token ids
