"""Each workload source on data the test writes: what it sends, what it skips, determinism by seed."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.traces import write_jsonl
from tunedeck.bench.prompts import make_prompts
from tunedeck.bench.workloads import (
    MOONCAKE_BLOCK,
    WorkloadError,
    WorkloadSpec,
    build_workload,
    default_ignore_eos,
    workload_of,
)
from tunedeck.bench.workloads.base import estimate_tokens


def build(name: str, n: int = 10, seed: int = 0, path: Path | None = None, **params: object):
    return build_workload(WorkloadSpec(name, None if path is None else str(path), dict(params)), n, seed)


def write_sharegpt(path: Path, pairs: list[tuple[str, str]], extra: list[object] = ()) -> Path:
    recs: list[object] = [
        {"id": f"c{i}", "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
        for i, (q, a) in enumerate(pairs)
    ]
    path.write_text(json.dumps([*recs, *extra]))
    return path


# ---------------------------------------------------------------- random


def test_random_defaults_send_todays_prompts():
    wl = build("random", n=6, seed=3, input_len=32, output_len=8)
    old = make_prompts(6, 32, 8, 3, token_ids=True)
    assert [s.prompt for s in wl.specs] == [s.prompt for s in old]
    assert wl.record()["params"] == {"input_len": 32, "output_len": 8, "range_ratio": 0.0, "prefix_len": 0}


def test_random_range_ratio_and_fixed_prefix():
    wl = build("random", n=200, seed=1, input_len=100, output_len=50, range_ratio=0.5, prefix_len=16)
    ins = [s.prompt_len - 16 for s in wl.specs]
    outs = [s.output_len for s in wl.specs]
    assert min(ins) >= 50 and max(ins) <= 150 and len(set(ins)) > 20
    assert min(outs) >= 25 and max(outs) <= 75
    first = wl.specs[0].prompt[:16]
    for s in wl.specs:
        assert len(s.prompt) == s.prompt_len  # token ids: exact
        assert s.prompt[:16] == first  # one fixed prefix, byte-identical
    assert len({tuple(s.prompt[16:20]) for s in wl.specs}) > 150


def test_random_lengths_from_a_plan_table():
    wl = build("random", n=400, seed=2, input_lens=[[10, 3], [1000, 1]], output_lens=[7])
    ins = [s.prompt_len for s in wl.specs]
    assert set(ins) == {10, 1000}
    assert 0.6 < ins.count(10) / len(ins) < 0.9
    assert {s.output_len for s in wl.specs} == {7}
    with pytest.raises(WorkloadError, match=r"input_lens\[1\]: length 0"):
        build("random", input_lens=[5, 0])


# ---------------------------------------------------------------- generated shared prefixes


def test_prefix_repetition_has_n_prefixes_each_shared():
    wl = build("prefix_repetition", n=40, prefix_len=20, suffix_len=5, num_prefixes=4, output_len=3)
    assert all(s.prompt_len == 25 == len(s.prompt) and s.output_len == 3 for s in wl.specs)
    prefixes = {tuple(s.prompt[:20]) for s in wl.specs}
    assert len(prefixes) == 4
    assert len({tuple(s.prompt[20:]) for s in wl.specs}) == 40


def test_shared_prefix_groups_share_a_byte_identical_system_prompt():
    wl = build("shared_prefix", n=1, num_groups=3, prompts_per_group=4, system_prompt_len=30, question_len=6)
    assert len(wl.specs) == 12  # G x P: --num-prompts does not apply
    groups: dict[str, list[str]] = {}
    for s in wl.specs:
        groups.setdefault(json.dumps(s.prompt[:30]), []).append(json.dumps(s.prompt[30:]))
    assert len(groups) == 3
    assert all(len(qs) == 4 and len(set(qs)) == 4 for qs in groups.values())  # one system prompt, 4 questions
    assert [s.index for s in wl.specs] == list(range(12))
    words = build_workload(
        WorkloadSpec("shared_prefix", None, {"num_groups": 2, "prompts_per_group": 3, "system_prompt_len": 30}),
        1,
        0,
        token_ids=False,
    )
    heads = [" ".join(s.prompt.split(" ")[:30]) for s in words.specs]
    assert len(set(heads)) == 2 and all(heads.count(h) == 3 for h in heads)  # two system prompts, three each
    assert all(s.prompt.startswith(h + " ") for s, h in zip(words.specs, heads))  # then a question


def test_shared_prefix_is_sent_shuffled_by_the_seed_as_sglang_sends_it():
    """SGLang's bench_serving shuffles the G x P requests; in group order a prefix cache too small for
    every system prompt would hit more than under SGLang's own benchmark."""
    opts = {"num_groups": 8, "prompts_per_group": 8, "system_prompt_len": 16, "question_len": 4}
    wl = build("shared_prefix", n=1, seed=5, **opts)
    order = [json.dumps(s.prompt[:16]) for s in wl.specs]
    runs = sum(1 for a, b in zip(order, order[1:]) if a != b) + 1
    assert runs > 16  # grouped, it would be 8 runs of 8
    assert [s.prompt for s in build("shared_prefix", n=1, seed=5, **opts).specs] == [s.prompt for s in wl.specs]
    assert [s.prompt for s in build("shared_prefix", n=1, seed=6, **opts).specs] != [s.prompt for s in wl.specs]


# ---------------------------------------------------------------- text and conversations


def test_text_reads_like_text_from_the_standard_library():
    wl = build("text", n=5, input_len=50, output_len=9)
    for s in wl.specs:
        words = s.prompt.split()
        assert len(words) == 50 and s.output_len == 9 and not s.exact
        assert all(any(c.isalpha() for c in w) for w in words)
    assert wl.lengths == "estimate"  # fitted with the server's /tokenize at run time
    # the topics change between Python releases: the record names the corpus the prompts came from
    py = ".".join(map(str, sys.version_info[:3]))
    assert re.fullmatch(rf"pydoc_data\.topics of Python {re.escape(py)} \([0-9a-f]{{12}}\)", wl.params["corpus"])


def test_conversation_specs_carry_session_turn_and_think_time():
    wl = build("conversation", n=10, turns=3, think_s=2.5, input_len=12, output_len=5)
    assert len(wl.specs) == 12  # ceil(10 / 3) sessions of 3 turns
    by = {(s.session, s.turn): s for s in wl.specs}
    assert set(by) == {(i, t) for i in range(4) for t in range(3)}
    assert all(s.think_s == (0.0 if s.turn == 0 else 2.5) for s in wl.specs)
    assert all(isinstance(s.prompt, str) and len(s.prompt.split()) == 12 for s in wl.specs)
    assert [s.index for s in wl.specs] == list(range(12))


# ---------------------------------------------------------------- datasets


def test_sharegpt_prompts_and_output_lengths_follow_the_file(tmp_path):
    pairs = [(f"question {i} " + "w" * (20 + 8 * i), "answer " + "x" * (30 + 4 * i)) for i in range(6)]
    p = write_sharegpt(
        tmp_path / "sg.json",
        pairs,
        extra=[
            {"id": "short", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello!"}]},
            {"id": "gpt-first", "conversations": [{"from": "gpt", "value": "x" * 40}]},
            {
                "id": "long",
                "conversations": [{"from": "human", "value": "y" * 5000}, {"from": "gpt", "value": "ok" * 9}],
            },
        ],
    )
    wl = build("sharegpt", n=6, path=p)
    want = sorted((q, estimate_tokens(a)) for q, a in pairs)
    assert sorted((s.prompt, s.output_len) for s in wl.specs) == want
    assert all(s.prompt_len == estimate_tokens(s.prompt) for s in wl.specs)
    assert wl.skipped == {"too_short": 1, "no_human_then_gpt_turn": 1, "too_long": 1}
    assert wl.params["file_sha256"] and not default_ignore_eos("sharegpt")
    fixed = build("sharegpt", n=6, path=p, output_len=77)
    assert {s.output_len for s in fixed.specs} == {77}


def test_custom_jsonl_with_per_line_or_fixed_output_length(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"prompt": "alpha beta", "output_len": 5}\n\n{"prompt": "gamma", "output_len": 9}\n')
    wl = build("custom", n=2, path=p)
    assert sorted((s.prompt, s.output_len) for s in wl.specs) == [("alpha beta", 5), ("gamma", 9)]
    assert {s.output_len for s in build("custom", n=2, path=p, output_len=3).specs} == {3}


def test_custom_lines_as_vllm_writes_them_get_its_default_output_length(tmp_path):
    """``{"prompt"}`` lines alone, as for ``vllm bench serve --dataset-name custom``: 256 tokens each."""
    p = tmp_path / "v.jsonl"
    write_jsonl(p, [{"prompt": "alpha"}, {"prompt": "beta", "output_len": 7}])
    assert sorted(s.output_len for s in build("custom", n=2, path=p).specs) == [7, 256]


def test_jsonl_lines_end_at_newline_only(tmp_path):
    """U+2028, U+2029 and U+0085 are legal unescaped inside a JSON string (``json.dumps`` with
    ``ensure_ascii=False`` writes them so): they do not cut the line, nor shift the line numbers."""
    p = tmp_path / "u.jsonl"
    lines = [json.dumps({"prompt": f"one{c}two", "output_len": 4}, ensure_ascii=False) for c in "\u2028\u2029\x85"]
    p.write_text("\n".join([*lines, "{broken"]) + "\n", encoding="utf-8")
    with pytest.raises(WorkloadError, match=r"u\.jsonl:4: not valid JSON"):
        build("custom", n=3, path=p)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert sorted(s.prompt for s in build("custom", n=3, path=p).specs) == sorted(
        f"one{c}two" for c in "\u2028\u2029\x85"
    )


@pytest.mark.parametrize("ratio", [0.0, 0.9995])
def test_random_range_ratio_takes_all_of_zero_to_one(ratio):
    """The CLI takes 0 <= R < 1 (vLLM's bound); the source takes every such R."""
    assert build("random", n=4, input_len=100, output_len=10, range_ratio=ratio).params["range_ratio"] == ratio


def test_random_range_ratio_one_is_refused_by_name():
    with pytest.raises(WorkloadError, match=r"range_ratio = 1\.0: expected a number within 0\.\.1 \(1 excluded\)"):
        build("random", n=4, input_len=100, output_len=10, range_ratio=1.0)


def test_context_limit_skips_and_counts(tmp_path):
    wl = build("random", n=100, seed=4, input_len=100, output_len=10, range_ratio=0.5, context_limit=120)
    assert all(s.prompt_len + s.output_len <= 120 for s in wl.specs)
    assert wl.skipped["over_context_limit"] == 100 - len(wl.specs) > 0
    assert wl.params["context_limit"] == 120
    p = tmp_path / "c.jsonl"
    p.write_text('{"prompt": "%s", "output_len": 5}\n{"prompt": "short one", "output_len": 5}\n' % ("z" * 400))
    assert build("custom", n=1, path=p, context_limit=20).skipped == {"over_context_limit": 1}


# ---------------------------------------------------------------- traces
#: four Mooncake rows whose hash_ids share blocks: 7 (rows 1, 2), 8 (1, 3), 9 (1, 4)
BLOCK_ROWS = [
    {"timestamp": 0, "input_length": 1200, "output_length": 10, "hash_ids": [7, 8, 9]},
    {"timestamp": 250, "input_length": 700, "output_length": 20, "hash_ids": [7, 3]},
    {"timestamp": 250, "input_length": 1024, "output_length": 30, "hash_ids": [5, 8]},
    {"timestamp": 1250, "input_length": 100, "output_length": 5, "hash_ids": [9]},
]


def test_mooncake_equal_hash_ids_give_equal_blocks(tmp_path):
    p = write_jsonl(tmp_path / "trace.jsonl", BLOCK_ROWS)
    wl = build("mooncake", n=100, path=p, trace_speed=2.0)
    a, b, c, d = wl.specs
    B = MOONCAKE_BLOCK
    assert [len(s.prompt) for s in wl.specs] == [1200, 700, 1024, 100]
    assert a.prompt[:B] == b.prompt[:B]  # id 7 in both
    assert a.prompt[B : 2 * B] == c.prompt[B : 2 * B]  # id 8 at the same place
    assert a.prompt[2 * B : 2 * B + 100] == d.prompt  # id 9, cut to what each needs
    assert b.prompt[B:] != a.prompt[B : B + 188] and c.prompt[:B] != a.prompt[:B]
    assert [s.at_s for s in wl.specs] == [0.0, 0.125, 0.125, 0.625]
    assert [s.output_len for s in wl.specs] == [10, 20, 30, 5]
    # deterministic per id: another trace, another seed, the same block for id 8
    q = tmp_path / "other.jsonl"
    q.write_text(json.dumps({"timestamp": 5, "input_length": 512, "output_length": 1, "hash_ids": [8]}) + "\n")
    assert build("mooncake", seed=99, path=q).specs[0].prompt == a.prompt[B : 2 * B]
    assert build("mooncake", n=2, path=p).specs[1].at_s == 0.25  # first n rows, speed 1


def test_burstgpt_skips_failed_requests_and_scales_time(tmp_path):
    p = tmp_path / "burst.csv"
    p.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "10,ChatGPT,100,20,120,Conversation log\n"
        "11.5,GPT-4,50,0,50,Conversation log\n"
        "13,ChatGPT,30,7,37,API log\n"
    )
    wl = build("burstgpt", path=p, trace_speed=0.5)
    assert [(s.prompt_len, s.output_len, s.at_s) for s in wl.specs] == [(100, 20, 0.0), (30, 7, 6.0)]
    assert [len(s.prompt) for s in wl.specs] == [100, 30]
    assert wl.skipped == {"zero_response_tokens": 1}


# ---------------------------------------------------------------- determinism and records


@pytest.mark.parametrize(
    "name,params",
    [
        ("random", {"range_ratio": 0.3, "prefix_len": 8}),
        ("prefix_repetition", {"prefix_len": 8, "suffix_len": 8}),
        ("shared_prefix", {"num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 8}),
        ("text", {}),
        ("conversation", {}),
    ],
)
def test_same_seed_same_prompt_set_other_seed_another(name, params):
    a = build(name, seed=5, **params)
    b = build(name, seed=5, **params)
    c = build(name, seed=6, **params)
    assert a.sha256 == b.sha256 and [s.prompt for s in a.specs] == [s.prompt for s in b.specs]
    assert c.sha256 != a.sha256


def test_sharegpt_sampling_is_seeded(tmp_path):
    p = write_sharegpt(tmp_path / "sg.json", [(f"question number {i}", "an answer here") for i in range(20)])
    a, b, c = (
        build("sharegpt", n=5, seed=1, path=p),
        build("sharegpt", n=5, seed=1, path=p),
        build("sharegpt", n=5, seed=2, path=p),
    )
    assert a.sha256 == b.sha256 != c.sha256
    more = build("sharegpt", n=50, seed=1, path=p)  # fewer rows than asked: drawn again, like vLLM
    assert len(more.specs) == 50 and len({s.prompt for s in more.specs}) == 20


def test_results_without_a_workload_read_as_random():
    old = {"params": {"input_len": 128, "output_len": 64, "seed": 0}}
    assert workload_of(old) == {"name": "random", "params": {"input_len": 128, "output_len": 64}, "sha256": None}
    new = {"workload": {"name": "text", "params": {"input_len": 9}, "sha256": "ab"}}
    assert workload_of(new)["name"] == "text"


def test_the_workload_lines_of_a_result_cannot_act_on_the_terminal():
    from tunedeck.bench.metrics import format_extras

    summary = {
        "params": {"ignore_eos": True},
        "workload": {"name": "evil\x1b[2J", "params": {"note": "\u202ex\x07"}, "sha256": "0" * 64},
        "workload_lengths": {"input": {"count": 2, "min": 3, "mean": 4.5, "p50": 3, "p90": 6, "max": 6}},
        "workload_skipped": {"too_long": 2},
    }
    text = format_extras(summary)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "Workload: evil\\x1b[2J (note=\\u202ex\\x07)  prompt set 000000000000" in text
    assert "Lengths planned (output: max_tokens asked): input min/mean/p50/p90/p99/max 3/4.5/3/6/-/6" in text
    assert "Skipped: too_long=2" in text


def test_builds_for_a_sweep_are_independent_and_see_a_changed_file(tmp_path):
    import os

    p = write_sharegpt(tmp_path / "sg.json", [(f"question number {i}", "an answer here") for i in range(8)])
    small, big = build("sharegpt", n=3, path=p), build("sharegpt", n=8, path=p)
    assert [s.index for s in small.specs] == [0, 1, 2] and len(big.specs) == 8
    assert {s.prompt for s in small.specs} <= {s.prompt for s in big.specs}
    write_sharegpt(p, [(f"another question {i}", "an answer here") for i in range(8)])
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert all(s.prompt.startswith("another") for s in build("sharegpt", n=3, path=p).specs)
