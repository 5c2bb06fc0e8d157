"""Engine argument parsers (help, choices, argparse errors) and the pure performance model."""

from __future__ import annotations

import argparse
import re
import subprocess

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.engines import SGLANG_ATTENTION_BACKENDS, release_flags
from tunedeck.sim import perf
from tunedeck.sim.engine_args import VLLM_BACKENDS, add_modeled
from tunedeck.sim.sglang_args import sglang_parser
from tunedeck.sim.simlog import model_facts, sglang_capture_bs, tqdm_bar, tqdm_frame
from tunedeck.sim.vllm_args import preprocess_vllm_argv, vllm_parser


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*tunedeck_cmd(), "sim", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout)


# ---------------------------------------------------------------------- parsers


def test_sglang_help_lists_backends_like_the_engine():
    r = run("sglang", "--help")
    assert r.returncode == 0
    joined = re.sub(r"\s*\n\s*", " ", r.stdout)
    m = re.search(r"--attention-backend \{([^}]*)\}", joined)
    assert m and m.group(1).split(",") == list(SGLANG_ATTENTION_BACKENDS)
    assert "cutlass_mla" not in m.group(1)
    for flag in (
        "--tp-size",
        "--num-continuous-decode-steps",
        "--disable-custom-all-reduce",
        "--enable-metrics",
        "--speculative-algorithm",
        "--cuda-graph-max-bs-decode",
        "--mem-fraction-static",
    ):
        assert flag in r.stdout
    assert r.stdout.startswith("usage: launch_server.py")


def test_sglang_invalid_backend_fails_like_argparse():
    r = run("sglang", "--model-path", "m", "--attention-backend", "cutlass_mla")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: launch_server.py")
    # Python < 3.12.8 quotes the choices, newer releases do not: accept both
    assert re.search(
        r"launch_server.py: error: argument --attention-backend: invalid choice: 'cutlass_mla' "
        r"\(choose from '?triton'?, '?torch_native'?,",
        r.stderr,
    )
    assert r.stdout == ""


def test_sglang_unknown_flag_and_ambiguous_old_spelling():
    r = run("sglang", "--model-path", "m", "--disaggregation-decode-url", "http://x")
    assert (
        r.returncode == 2
        and "launch_server.py: error: unrecognized arguments: --disaggregation-decode-url http://x" in r.stderr
    )
    r = run("sglang", "--model-path", "m", "--cuda-graph-max-bs", "256")
    assert r.returncode == 2 and "ambiguous option: --cuda-graph-max-bs could match" in r.stderr
    r = run("sglang", "--model-path", "m", "--speculative-num-steps", "3", "--sim-load-seconds", "0")
    assert r.returncode == 1 and "must be set together" in r.stderr


def test_sglang_tp_prefix_and_serve_form():
    a = sglang_parser().parse_args(["--model-path", "m", "--tp", "4"])
    assert a.tp_size == 4
    a = sglang_parser().parse_args(["--model", "x", "--attention-backend", "flashinfer"])
    assert a.model_path == "x" and a.attention_backend == "flashinfer"


def test_vllm_backend_case_insensitive_and_invalid():
    a = vllm_parser().parse_args(["m", "--attention-backend", "flashinfer"])
    assert a.attention_backend == "flashinfer"
    r = run("vllm", "serve", "m", "--attention-backend", "nope")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: vllm serve [model_tag] [options]\n")
    assert re.search(
        r"vllm serve: error: argument --attention-backend: invalid choice: 'nope' "
        r"\(choose from '?FLASH_ATTN'?, '?FLASHINFER'?,",
        r.stderr,
    )
    # enum-typed: --help names the flag but lists no choices
    h = run("vllm", "--help").stdout
    assert "--attention-backend ATTENTION_BACKEND" in h and "{FLASH_ATTN" not in h


def test_vllm_registry_probe_version_and_help_search():
    r = run("vllm", "--sim-list-backends")
    assert r.returncode == 0 and r.stdout.strip().split(" ") == VLLM_BACKENDS
    assert run("vllm", "--version").stdout.strip() == "0.33.0"
    assert run("sglang", "--version").stdout.strip() == "0.5.23"
    h = run("vllm", "--help=max-num-seqs")
    assert h.returncode == 0 and "--max-num-seqs" in h.stdout


def test_vllm_flexible_argv():
    argv = preprocess_vllm_argv(
        ["serve", "m", "--tensor_parallel_size", "2", "-cc.cudagraph_mode=FULL_DECODE_ONLY", "-O3"]
    )
    a = vllm_parser().parse_args(argv)
    assert a.model_tag == "m" and a.tensor_parallel_size == 2
    assert a.compilation_config == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert a.optimization_level == 3
    a = vllm_parser().parse_args(preprocess_vllm_argv(["m", "-sc", '{"method":"eagle3","num_speculative_tokens":3}']))
    assert a.speculative_config["method"] == "eagle3"


def test_sim_options_and_env_default(monkeypatch):
    monkeypatch.setenv("TUNEDECK_SIM_LOAD_S", "3.5")
    a = sglang_parser().parse_args(["--model-path", "m"])
    assert a.sim_load_seconds == 3.5 and a.sim_speed == 1.0 and a.sim_fault is None
    r = run("sglang", "--model-path", "m", "--sim-fault", "segv")
    assert r.returncode == 2 and re.search(
        r"argument --sim-fault: invalid choice: 'segv' \(choose from '?oom'?, '?nccl'?, '?port'?, '?hang'?, '?crash'?\)",
        r.stderr,
    )


def test_a_modeled_flag_must_be_the_releases_and_of_its_kind():
    """Each row the simulator models is checked against the release's table when the parser is built."""
    table = release_flags("sglang")
    p = argparse.ArgumentParser()
    with pytest.raises(ValueError, match=r"models --no-such-flag, which sglang 0\.5\.23 does not have"):
        add_modeled(p, table, [("--no-such-flag", int, 0, "x")])
    with pytest.raises(ValueError, match=r"models --port as a switch, which it is not in sglang 0\.5\.23"):
        add_modeled(p, table, [("--port", bool, False, "x")])
    with pytest.raises(ValueError, match="models --enable-metrics as a value, which it is not"):
        add_modeled(p, table, [("--enable-metrics", int, 0, "x")])
    # a switch with the release's off form: both spellings, the default as the row says
    add_modeled(p, release_flags("vllm"), [("--enable-prefix-caching", bool, None, "x")])
    assert p.parse_args([]).enable_prefix_caching is None
    assert p.parse_args(["--disable-prefix-caching"]).enable_prefix_caching is False


# ---------------------------------------------------------------------- perf model


def test_defaults_reproduce_targets():
    for engine, (single, total) in perf.TARGETS.items():
        cfg = perf.PerfConfig(engine, 8)
        per1, _ = perf.throughput(cfg, 1)
        _, tot128 = perf.throughput(cfg, 128)
        # the model leaves room for prefill/TTFT overhead a real client sees (a few %)
        assert single * 0.97 <= per1 <= single * 1.05
        assert total * 0.97 <= tot128 <= total * 1.05


def test_tuned_sglang_is_faster_at_128():
    base = perf.PerfConfig("sglang", 8)
    tuned = perf.PerfConfig(
        "sglang",
        8,
        "flashinfer",
        None,
        None,
        4,
        True,
        (("NCCL_ALGO", "Ring"), ("NCCL_P2P_LEVEL", "SYS"), ("NCCL_PROTO", "LL")),
    )
    gain = perf.throughput(tuned, 128)[1] / perf.throughput(base, 128)[1] - 1
    assert 0.15 <= gain <= 0.22


@pytest.mark.parametrize(
    "kw,faster",
    [
        ({"attention_backend": "flashinfer"}, True),
        ({"attention_backend": "triton"}, False),
        ({"attention_backend": "torch_native"}, False),
        ({"decode_steps": 4}, True),
        ({"nccl_env": (("NCCL_P2P_DISABLE", "1"),)}, False),
        ({"enforce_eager": True}, False),
    ],
)
def test_each_knob_moves_step_time_deterministically(kw, faster):
    base = perf.decode_step_time(perf.PerfConfig("sglang", 8), 64)
    t = perf.decode_step_time(perf.PerfConfig("sglang", 8, **kw), 64)
    assert (t < base) == faster and t != base
    assert perf.decode_step_time(perf.PerfConfig("sglang", 8, **kw), 64) == t


def test_custom_all_reduce_off_hurts_small_batches_helps_large():
    on = perf.PerfConfig("vllm", 8)
    off = perf.PerfConfig("vllm", 8, disable_custom_all_reduce=True)
    assert perf.decode_step_time(off, 1) > perf.decode_step_time(on, 1)
    assert perf.decode_step_time(off, 128) < perf.decode_step_time(on, 128)
    single = perf.PerfConfig("vllm", 1, disable_custom_all_reduce=True)
    assert perf.comm_mult(single, 128) == 1.0


def test_speculative_decoding():
    spec = perf.SpecConfig("EAGLE3", 3, 1, 4)
    assert 2.5 < perf.expected_accept_length(spec) < 2.9
    cfg = perf.PerfConfig("sglang", 8, spec=spec)
    assert perf.throughput(cfg, 1)[0] > 1.5 * perf.throughput(perf.PerfConfig("sglang", 8), 1)[0]
    import random

    rng = random.Random(1)
    acc = [perf.sample_accepted(spec, rng) for _ in range(4000)]
    assert all(0 <= a <= 3 for a in acc)
    assert abs(1 + sum(acc) / len(acc) - perf.expected_accept_length(spec)) < 0.08


def test_prefill_grows_with_prompt_and_seed_offset_small():
    cfg = perf.PerfConfig("sglang", 8)
    assert perf.prefill_time(cfg, 8000) > perf.prefill_time(cfg, 100) > 0
    offs = [perf.run_offset(s) for s in range(50)]
    assert all(0.99 <= o <= 1.01 for o in offs) and len(set(offs)) > 10


# ---------------------------------------------------------------------- small helpers


def test_tqdm_frames_match_real_shapes():
    assert tqdm_frame("Loading safetensors checkpoint shards", 0, 37, 0, shards=True) == (
        "Loading safetensors checkpoint shards:   0% Completed | 0/37 [00:00<?, ?it/s]"
    )
    assert tqdm_frame("Loading safetensors checkpoint shards", 37, 37, 10.48, shards=True).endswith(
        "100% Completed | 37/37 [00:10<00:00,  3.53it/s]"
    )
    assert tqdm_frame("Loading safetensors checkpoint shards", 1, 1, 36.34, shards=True).endswith(
        "[00:36<00:00, 36.34s/it]"
    )
    assert tqdm_frame("", 0, 8, 0) == "  0%|          | 0/8 [00:00<?, ?it/s]"
    assert tqdm_bar(1 / 8) == "█▎        "
    assert tqdm_bar(1.0) == "█" * 10
    assert len(sglang_capture_bs(512)) == 52 and sglang_capture_bs(128)[-1] == 128 and len(sglang_capture_bs(128)) == 20


def test_model_facts():
    f = model_facts("deepseek-ai/DeepSeek-R1", 8)
    assert f["mla"] and f["arch"] == "DeepseekV3ForCausalLM" and f["bytes_per_param"] == 1.0
    f = model_facts("meta-llama/Llama-3.1-8B-Instruct", 1)
    assert not f["mla"] and 14 < f["weights_gib_total"] < 16
