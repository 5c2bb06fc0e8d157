"""Pre-flight checks against fake hosts: shell-script python3 / vllm / nvidia-smi first on PATH."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.profilefix import B200, DATA, RTX_PRO, fake_host, make_fake_bin
from tunedeck.profiles.hostfacts import host_flags, parse_gpus
from tunedeck.profiles.model import ServerProfile
from tunedeck.profiles.preflight import preflight
from tunedeck.profiles.store import ProfileStore
from tunedeck.util.paths import state_dir

pytestmark = pytest.mark.timeout(60)


def codes(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in report.findings:
        out.setdefault(f.code, []).append(f.severity)
    return out


def test_help_parsing_reads_option_lines():
    text = (DATA / "sglang-0.5.23-help.txt").read_text()
    t = host_flags(text, "sglang", "0.5.23", "h")
    assert t is not None and "cutlass_mla" not in t.choices("--attention-backend")
    assert t.get("--cuda-graph-max-bs") is None and t.get("--tp-size") is not None
    old = host_flags((DATA / "sglang-0.5.5-help.txt").read_text(), "sglang", "0.5.5", "h")
    assert old is not None and "cutlass_mla" in old.choices("--attention-backend")
    assert host_flags("usage: x\n\nno options\n", "sglang", None, "h") is None
    assert parse_gpus("0, NVIDIA H200, 9.0\n1, NVIDIA H200, 9.0\n")[1].major == 9


async def test_sglang_tuned_on_h200_passes(tmp_path):
    store = ProfileStore()
    host = fake_host(tmp_path)
    r = await preflight(host, store.get("sglang-tuned"), store=store)
    assert r.ok, r.findings
    assert r.facts.version == "0.5.23" and r.facts.backends_source == "help"
    assert len(r.facts.gpus) == 8 and r.facts.gpus[0].compute_cap == "9.0"
    c = codes(r)
    assert c["nccl-debug-knobs"] == ["warning"]
    assert "flag-unknown" not in c and "backend-not-offered" not in c and "backend-arch" not in c


async def test_backend_not_offered_by_engine_version(tmp_path):
    host = fake_host(tmp_path)
    p = ServerProfile(name="t", engine="sglang", model="deepseek-ai/DeepSeek-V3", attention_backend="cutlass_mla")
    r = await preflight(host, p)
    assert not r.ok
    f = next(f for f in r.findings if f.code == "backend-not-offered")
    assert "'cutlass_mla' is not offered by sglang 0.5.23 on fakehost" in f.message
    # the same backend on a 0.5.5 host is offered, and valid for MLA on SM100
    old = fake_host(tmp_path / "old", sglang_version="0.5.5", gpu_name=B200, compute_cap="10.0")
    r2 = await preflight(old, p)
    assert "backend-not-offered" not in codes(r2) and "backend-arch" not in codes(r2), r2.findings


async def test_mla_backend_by_architecture(tmp_path):
    p = ServerProfile(name="t", engine="sglang", model="deepseek-ai/DeepSeek-R1", attention_backend="fa3")
    h100 = await preflight(fake_host(tmp_path / "a"), p)
    assert "backend-arch" not in codes(h100)
    b200 = await preflight(fake_host(tmp_path / "b", gpu_name=B200, compute_cap="10.0"), p)
    f = next(f for f in b200.findings if f.code == "backend-arch")
    assert f.severity == "error" and "SM100" in f.message and "trtllm_mla" in f.message
    sm120 = await preflight(
        fake_host(tmp_path / "c", gpu_name=RTX_PRO, compute_cap="12.0"), p.with_(attention_backend="flashinfer")
    )
    assert codes(sm120)["backend-arch-unverified"] == ["warning"]
    a100 = await preflight(fake_host(tmp_path / "d", gpu_name="NVIDIA A100", compute_cap="8.0"), p)
    f = next(f for f in a100.findings if f.code == "backend-arch-unverified")
    assert "unverified" in f.message and "SM80" in f.message
    mha = await preflight(fake_host(tmp_path / "e"), p.with_(attention_backend="trtllm_mha"))
    assert any(f.code == "backend-arch" and "does not run MLA" in f.message for f in mha.findings)


async def test_flags_unknown_ambiguous_and_tp(tmp_path):
    host = fake_host(tmp_path, gpus=4)
    p = ServerProfile(
        name="t",
        engine="sglang",
        model="Qwen/Qwen3-32B",
        tp=8,
        flags=(("cuda-graph-max-bs", 256), ("enable-metrics", True)),
    )
    r = await preflight(host, p)
    c = codes(r)
    assert c["flag-ambiguous"] == ["error"] and c["tp-gpus"] == ["error"]
    amb = next(f for f in r.findings if f.code == "flag-ambiguous")
    assert "--cuda-graph-max-bs-decode" in amb.message and "--cuda-graph-max-bs-prefill" in amb.message
    assert "8 > 4 GPU(s)" in next(f for f in r.findings if f.code == "tp-gpus").message
    # on 0.5.5 the flag exists; a 0.5.23-only flag is unknown there
    old = fake_host(tmp_path / "old", sglang_version="0.5.5")
    r2 = await preflight(old, p.with_(flags=(("cuda-graph-max-bs", 256), ("attn-dp-size", 2))))
    assert "flag-ambiguous" not in codes(r2)
    assert any(f.code == "flag-unknown" and "--attn-dp-size" in f.message for f in r2.findings)


async def test_vllm_backends_from_registry(tmp_path):
    host = fake_host(tmp_path)
    p = ServerProfile(
        name="v",
        engine="vllm",
        model="deepseek-ai/DeepSeek-V3",
        attention_backend="flashmla",
        flags=(("max-num-seqs", 256),),
    )
    r = await preflight(host, p)
    assert r.facts.backends_source == "registry" and "FLASHMLA" in r.facts.backends
    assert r.facts.version == "0.33.0"
    assert r.ok, r.findings  # lower-case name accepted (case-insensitive), valid for MLA on SM90
    bad = await preflight(host, p.with_(attention_backend="CUTLASS_MLA"))
    assert any(f.code == "backend-arch" and "SM90" in f.message for f in bad.findings)
    nope = await preflight(host, p.with_(attention_backend="PAGED_MAGIC"))
    assert any(f.code == "backend-not-offered" for f in nope.findings)


async def test_engine_missing_and_dangerous_env(tmp_path):
    host = fake_host(tmp_path, sglang_version=None)
    p = ServerProfile(name="t", engine="sglang", model="m", env=(("LD_PRELOAD", "/x.so"),))
    r = await preflight(host, p)
    c = codes(r)
    assert c["engine-missing"] == ["error"] and c["dangerous-env"] == ["error"]
    r2 = await preflight(host, p.with_(confirm_dangerous=("LD_PRELOAD",)))
    assert codes(r2)["dangerous-env"] == ["warning"]


async def test_help_facts_are_cached_per_host_engine_version(tmp_path):
    log = tmp_path / "calls.log"
    host = fake_host(tmp_path, log=log)
    p = ProfileStore().get("sglang-base")
    r1 = await preflight(host, p)
    assert not r1.facts.cached
    n_help = log.read_text().count("--help")
    assert n_help == 1
    r2 = await preflight(host, p)
    assert r2.facts.cached and r2.facts.backends == r1.facts.backends
    assert log.read_text().count("--help") == 1  # not asked again
    cache = json.loads((state_dir() / "preflight-cache.json").read_text())
    assert any('"0.5.23"' in k and "fakehost" in k for k in cache)
    r3 = await preflight(host, p, use_cache=False)
    assert not r3.facts.cached and log.read_text().count("--help") == 2


def _preflight(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tunedeck_cmd(), "preflight", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout
    )


def test_cli_preflight_warns_before_launch(tmp_path):
    bin_ = make_fake_bin(tmp_path)
    f = tmp_path / "cut.toml"
    f.write_text('engine = "sglang"\nmodel = "deepseek-ai/DeepSeek-V3"\n[attention]\nbackend = "cutlass_mla"\n')
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    r = _preflight(str(f), "--host", "local", env=env, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "'cutlass_mla' is not offered by sglang 0.5.23" in r.stdout
    r = _preflight("sglang-tuned", "--json", env=env, timeout=60)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["ok"] is True and out["host"]["version"] == "0.5.23"
    assert any(x["code"] == "nccl-debug-knobs" for x in out["findings"])


# ------------------------------------------------------------------------------ the demo (tunedeck sim)


def test_demo_preflight_uses_the_simulators_help(tmp_path):
    """`tunedeck sim <engine> --help` answers like the engine, so the demo shows the same findings."""
    f = tmp_path / "demo-bad.toml"
    f.write_text(
        'engine = "sglang"\nmodel = "deepseek-ai/DeepSeek-V3"\ntp = 8\n'
        '[attention]\nbackend = "cutlass_mla"\n[flags]\ncuda-graph-max-bs = 256\n'
    )
    r = _preflight(str(f), "--demo", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr
    assert out["host"]["version"] == "0.5.23" and out["host"]["backends_source"] == "help"
    assert out["command"].split(" sim sglang ")[0].endswith("tunedeck")
    found = {x["code"]: x for x in out["findings"]}
    assert "'cutlass_mla' is not offered by sglang 0.5.23" in found["backend-not-offered"]["message"]
    assert found["flag-ambiguous"]["subject"] == "--cuda-graph-max-bs"
    assert len(out["host"]["gpus"]) == 8
    for name in ("sglang-tuned", "sglang-base", "sglang-eagle3", "vllm-baseline"):
        r = _preflight(name, "--demo")
        assert r.returncode == 0, (name, r.stdout, r.stderr)


def test_demo_vllm_preflight_reads_the_sims_backend_registry(tmp_path):
    """The demo swaps the engine for `tunedeck sim vllm`: its registry probe is
    `tunedeck sim vllm --sim-list-backends`, so the choices come from the host, not tunedeck's list."""
    r = _preflight("vllm-baseline", "--demo", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert out["host"]["backends_source"] == "registry"
    assert "TRITON_MLA_SPARSE" in out["host"]["backends"]  # the sim lists more than the builtin list
    assert not any("backend registry" in p for p in out["host"]["problems"]), out["host"]["problems"]
    f = tmp_path / "vllm-odd.toml"
    f.write_text('engine = "vllm"\nmodel = "Qwen/Qwen3-32B"\n[attention]\nbackend = "PAGED_MAGIC"\n')
    r = _preflight(str(f), "--demo", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr
    found = {x["code"]: x for x in out["findings"]}
    assert found["backend-not-offered"]["severity"] == "error"
    assert "'PAGED_MAGIC' is not offered by vllm 0.33.0 on demo" in found["backend-not-offered"]["message"]
    # a backend only the sim's registry lists is accepted
    f.write_text('engine = "vllm"\nmodel = "Qwen/Qwen3-32B"\n[attention]\nbackend = "ROCM_ATTN"\n')
    r = _preflight(str(f), "--demo", "--json")
    out = json.loads(r.stdout)
    assert not any(x["code"].startswith("backend-") for x in out["findings"]), out["findings"]


def test_a_findings_subject_is_said_once():
    """evaluate() puts a profile issue's key in its message and in its subject; every display says it once."""
    from tunedeck.profiles.preflight import Finding
    from tunedeck.ui.screens.profiles import warnings_modal

    f = Finding("warning", "nccl-debug-knobs", "nccl.preset: pcie: not for production", "nccl.preset")
    assert f.line == "nccl.preset: pcie: not for production" and f.detail == "pcie: not for production"
    plain = Finding("warning", "probe", "GPUs: nvidia-smi failed")
    assert plain.line == plain.detail == "GPUs: nvidia-smi failed"
    backend = Finding("warning", "backend", "attention backend 'x' is unverified", "attention_backend")
    assert backend.line == "attention_backend: attention backend 'x' is unverified"
    question = warnings_modal("p", [f, plain]).question
    assert question.count("nccl.preset:") == 1 and "• GPUs: nvidia-smi failed" in question
