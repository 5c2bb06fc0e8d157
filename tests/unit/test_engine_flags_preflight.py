"""Pre-flight against hosts whose engines print the releases' real --help: the host's help is the
authority for flag names, prefixes and choices; tunedeck's table only stands in, labelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.profilefix import fake_host
from tunedeck.profiles.model import ServerProfile
from tunedeck.profiles.preflight import preflight

pytestmark = pytest.mark.timeout(90)

SGLANG_HELP = "sglang-0.5.23-launch_server-help.txt"
VLLM_HELP = "vllm-0.33.0-serve-help-all.txt"


def _sglang(**kw) -> ServerProfile:
    return ServerProfile(name="t", engine="sglang", model="meta-llama/Llama-3.1-8B-Instruct", tp=8, **kw)


def _vllm(**kw) -> ServerProfile:
    return ServerProfile(name="t", engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", tp=8, **kw)


def _find(report, code: str):
    return [f for f in report.findings if f.code == code]


@pytest.fixture
def sglang_host(tmp_path: Path, engine_help: Path):
    return fake_host(tmp_path, sglang_help=engine_help / SGLANG_HELP)


async def test_cpu_offload_gb_is_a_real_sglang_flag(sglang_host):
    r = await preflight(sglang_host, _sglang(flags=(("cpu-offload-gb", 4),)))
    assert r.ok, r.errors
    assert r.command is not None and "--cpu-offload-gb=4" in r.command.args
    assert r.facts.flags is not None and r.facts.flags.origin == "the --help of sglang 0.5.23 on fakehost"
    assert r.facts.backends_source == "help" and len(r.facts.backends or ()) == 25
    assert not _find(r, "flags-builtin") and not [f for f in r.findings if f.code.startswith("flag-")]


async def test_cuda_graph_max_bs_is_ambiguous_on_sglang_0_5_23(sglang_host):
    r = await preflight(sglang_host, _sglang(flags=(("cuda-graph-max-bs", 256),)))
    (f,) = _find(r, "flag-ambiguous")
    assert f.severity == "error" and f.subject == "--cuda-graph-max-bs"
    assert "(could be --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill)" in f.message
    assert "the --help of sglang 0.5.23 on fakehost" in f.message


async def test_a_misspelt_flag_names_the_closest_real_one(sglang_host):
    r = await preflight(sglang_host, _sglang(extra_args="--cpu-ofload-gb 4"))
    assert not r.ok and r.command is None
    (f,) = r.errors
    assert "--cpu-ofload-gb is not a flag in the --help of sglang 0.5.23 on fakehost" in f.message
    assert f.message.endswith("did you mean --cpu-offload-gb? (allow_unlisted_flags = true passes it unchecked)")


async def test_an_unambiguous_prefix_is_accepted_with_a_note(sglang_host):
    r = await preflight(sglang_host, _sglang(extra_args="--cpu-offload 4"))
    assert r.ok, r.errors
    note = next(f for f in r.findings if "--cpu-offload is taken as --cpu-offload-gb" in f.message)
    assert note.severity == "info"


async def test_a_choice_the_release_does_not_list_is_an_error_listing_its_choices(sglang_host):
    # a flag tunedeck's schema lists without choices: the host's help has them
    r = await preflight(sglang_host, _sglang(flags=(("kv-cache-dtype", "fp8_e6m1"),)))
    (f,) = _find(r, "flag-choice")
    assert f.severity == "error" and f.subject == "--kv-cache-dtype"
    assert "'fp8_e6m1' is not one of its choices in the --help of sglang 0.5.23 on fakehost" in f.message
    assert "auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16" in f.message
    # a flag only the release knows: refused while the command is built, with the same words
    r = await preflight(sglang_host, _sglang(flags=(("tokenizer-backend", "bogus"),)))
    (e,) = r.errors
    assert e.subject == "flags.tokenizer-backend" and "choices in the --help of sglang 0.5.23" in e.message
    assert e.message.endswith("huggingface, fastokens")


async def test_vllm_0_33_real_help(tmp_path: Path, engine_help: Path):
    host = fake_host(tmp_path, vllm_help_all=engine_help / VLLM_HELP)
    ok = await preflight(host, _vllm(flags=(("enable-chunked-prefill", True), ("cpu-offload-gb", 4))))
    assert ok.ok, ok.errors
    assert ok.facts.flags is not None and ok.facts.flags.get("--disable-chunked-prefill") is not None
    # tunedeck's schema still lists --swap-space (older releases); 0.33's help does not
    r = await preflight(host, _vllm(flags=(("swap-space", 4),)))
    (f,) = _find(r, "flag-unknown")
    assert f.severity == "error" and "--swap-space is not a flag in the --help of vllm 0.33.0 on fakehost" in f.message


async def test_without_the_hosts_help_tunedecks_table_stands_in_and_says_so(tmp_path: Path):
    host = fake_host(tmp_path, help_fails=True)
    r = await preflight(host, _sglang(flags=(("cuda-graph-max-bs", 256), ("cpu-offload-gb", 4))))
    assert r.facts.flags is None
    (label,) = _find(r, "flags-builtin")
    assert label.severity == "warning"
    assert label.message == (
        "could not read sglang's --help on fakehost: flags checked against tunedeck's table of sglang 0.5.23 "
        "(the host's may differ)"
    )
    (amb,) = _find(r, "flag-ambiguous")
    assert amb.severity == "warning" and "tunedeck's table of sglang 0.5.23" in amb.message
    assert r.ok  # unverified against the host: nothing here proves the launch fails


async def test_the_cached_help_keeps_choices_and_prefixes(tmp_path: Path, engine_help: Path):
    log = tmp_path / "calls.log"
    host = fake_host(tmp_path, sglang_help=engine_help / SGLANG_HELP, log=log)
    p = _sglang(flags=(("cuda-graph-max-bs", 256), ("kv-cache-dtype", "fp8_e6m1")))
    first = await preflight(host, p)
    again = await preflight(host, p)
    assert not first.facts.cached and again.facts.cached
    assert log.read_text().count("--help") == 1
    for r in (first, again):
        assert [f.severity for f in r.findings if f.code in ("flag-ambiguous", "flag-choice")] == ["error", "error"]
