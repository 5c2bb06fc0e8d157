"""The simulated engines take every flag of their release: modeled ones applied, the rest logged as
"accepted, not simulated"; a flag the release does not have ends the start with argparse's error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.simfix import SimProc, free_port
from tunedeck.engine_flags import parse_help
from tunedeck.engines import release_flags
from tunedeck.profiles.builder import build_command
from tunedeck.profiles.profileread import load_profile_file
from tunedeck.sim.simlog import model_facts
from tunedeck.sim.vllm_args import preprocess_vllm_argv, vllm_parser

pytestmark = pytest.mark.timeout(120)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _profile(tmp_path: Path, engine: str, flags: str):
    f = tmp_path / f"{engine}-offload.toml"
    f.write_text(
        f'schema_version = 1\nname = "{engine}-offload"\nengine = "{engine}"\nmodel = "{MODEL}"\ntp = 1\n'
        f'host = "127.0.0.1"\nport = {free_port()}\n\n[flags]\n{flags}'
    )
    return load_profile_file(f, source="user")


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*tunedeck_cmd(), "sim", *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def test_vllm_profile_with_real_flags_starts_and_logs_what_is_not_simulated(tmp_path: Path):
    p = _profile(tmp_path, "vllm", 'enable-chunked-prefill = true\ncpu-offload-gb = 4\nmax-logprobs = "5"\n')
    cmd = build_command(p, demo=True)
    assert "--cpu-offload-gb=4" in cmd.args and "--max-logprobs=5" in cmd.args
    with SimProc("vllm", *cmd.args, "--sim-load-seconds", "0.3") as sim:
        sim.wait_ready(30)
        out = sim.raw
    assert "tunedeck sim: --max-logprobs 5: accepted, not simulated" in out
    # modeled: chunked prefill on, and 4 GiB of the weights stay in CPU memory
    assert "enable_chunked_prefill=True" in out and "Chunked prefill is enabled" in out
    weights = model_facts(MODEL, 1)["weights_gib_total"]
    assert f"Model loading took {weights - 4:.2f} GiB memory" in out
    assert "--cpu-offload-gb 4: accepted" not in out and "--enable-chunked-prefill: accepted" not in out


def test_sglang_profile_with_cpu_offload_and_an_unmodeled_flag(tmp_path: Path):
    p = _profile(tmp_path, "sglang", "cpu-offload-gb = 4\nenable-fp32-lm-head = true\n")
    cmd = build_command(p, demo=True)
    with SimProc("sglang", *cmd.args, "--sim-load-seconds", "0.3", "--skip-server-warmup") as sim:
        sim.wait_ready(30)
        out = sim.raw
    assert "tunedeck sim: --enable-fp32-lm-head: accepted, not simulated" in out
    weights = model_facts(MODEL, 1)["weights_gib_total"]
    assert f"mem usage={weights - 4:.2f} GB." in out


def test_the_off_form_of_a_modeled_switch_is_applied():
    parse = vllm_parser().parse_args
    assert parse(preprocess_vllm_argv(["m", "--disable-chunked-prefill"])).enable_chunked_prefill is False
    assert parse(preprocess_vllm_argv(["m", "--enable-chunked-prefill"])).enable_chunked_prefill is True
    assert parse(["m"]).enable_chunked_prefill is None  # vLLM's default: on
    assert parse(["m", "--no-trust-remote-code"]).trust_remote_code is False
    assert parse(["m", "--trust-remote-code"]).trust_remote_code is True
    assert parse(preprocess_vllm_argv(["m", "-O3"])).optimization_level == 3


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["sglang", "--model-path", "m", "--not-a-flag"],
            "launch_server.py: error: unrecognized arguments: --not-a-flag",
        ),
        (
            ["sglang", "--model-path", "m", "--cuda-graph-max-bs", "8"],
            "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (
            ["sglang", "--model-path", "m", "--tokenizer-backend", "bogus"],
            "launch_server.py: error: argument --tokenizer-backend: invalid choice: 'bogus' "
            "(choose from 'huggingface', 'fastokens')",
        ),
        (["vllm", "m", "--swap-space", "4"], "vllm serve: error: unrecognized arguments: --swap-space 4"),
        (
            ["vllm", "m", "--kda-decode-backend", "bogus"],
            "vllm serve: error: argument --kda-decode-backend: invalid choice: 'bogus' "
            "(choose from 'auto', 'native', 'flashinfer', 'triton')",
        ),
    ],
)
def test_a_flag_the_release_refuses_ends_the_start_with_its_argparse_error(args: list[str], error: str):
    r = _sim(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("usage: ") and lines[-1] == error


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_simulated_help_lists_every_flag_of_the_release(engine: str):
    """Pre-flight on the demo host reads the simulator's --help: it must know the release's flags."""
    r = _sim(engine, "--help=all" if engine == "vllm" else "--help")
    assert r.returncode == 0, r.stderr
    listed = {n for f in parse_help(r.stdout) for n in f.names}
    table = release_flags(engine)
    assert set(table.names) <= listed
    listed_flags = {f.names[0]: f for f in parse_help(r.stdout)}
    for f in table.flags:  # the same choices as the release, wherever it lists some
        if f.choices and f.names[0] in listed_flags:
            assert listed_flags[f.names[0]].choices == f.choices, f.names
