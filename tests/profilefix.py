"""Fake engine hosts for pre-flight tests: shell scripts named python3 / vllm / nvidia-smi that
answer like the real tools (help texts in tests/data were produced by argparse with each engine
version's flags), put first on PATH through ``LocalHost(env_overlay={"PATH": ...})``."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tunedeck.hostops.localhost import LocalHost

DATA = Path(__file__).resolve().parent / "data"

H200 = "NVIDIA H200"
B200 = "NVIDIA B200"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"

VLLM_ENUM = (
    "FLASH_ATTN FLASHINFER TRITON_ATTN FLEX_ATTENTION TURBOQUANT FLASH_ATTN_MLA FLASHMLA "
    "FLASHINFER_MLA TOKENSPEED_MLA CUTLASS_MLA TRITON_MLA FLASHMLA_SPARSE FLASHINFER_MLA_SPARSE"
)


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def make_fake_bin(
    folder: Path,
    *,
    sglang_version: str | None = "0.5.23",
    vllm_version: str | None = "0.33.0",
    gpus: int = 8,
    gpu_name: str = H200,
    compute_cap: str = "9.0",
    log: Path | None = None,
    sglang_help: Path | None = None,
    vllm_help_all: Path | None = None,
    help_fails: bool = False,
) -> Path:
    """Create ``folder/bin`` with fake tools; each call is appended to ``log`` when given.
    ``sglang_help`` / ``vllm_help_all``: the help text the engine prints (default: tests/data's);
    ``help_fails``: the engine's ``--help`` exits 1 (its version still answers)."""
    bin_ = folder / "bin"
    bin_.mkdir(parents=True, exist_ok=True)
    logline = f'printf "%s\\n" "$0 $*" >> {shlex.quote(str(log))}\n' if log else ""
    sg_help = sglang_help or (DATA / f"sglang-{sglang_version}-help.txt" if sglang_version else None)
    py = logline + 'case "$*" in\n'
    if help_fails:
        py += '  *"--help"*) echo "ImportError: libcuda.so.1: cannot open shared object file" >&2; exit 1;;\n'
    if sglang_version:
        py += f'  *"import sglang"*) echo {shlex.quote(sglang_version)}; exit 0;;\n'
        py += f'  "-m sglang.launch_server --help") cat {shlex.quote(str(sg_help))}; exit 0;;\n'
    if vllm_version:
        py += f'  *AttentionBackendEnum*) echo "{VLLM_ENUM}"; exit 0;;\n'
        py += f'  *"import vllm"*) echo {shlex.quote(vllm_version)}; exit 0;;\n'
    py += (
        '  *"import sglang"*|*"-m sglang"*) echo "ModuleNotFoundError: No module named \'sglang\'" >&2; exit 1;;\n'
        "  *vllm*) echo \"ModuleNotFoundError: No module named 'vllm'\" >&2; exit 1;;\n"
        'esac\necho "fake python3: unexpected arguments: $*" >&2; exit 2\n'
    )
    _script(bin_ / "python3", py)
    if vllm_version:
        help_all = vllm_help_all or DATA / "vllm-0.33.0-help-all.txt"
        fails = '  *"--help"*) echo "RuntimeError: Failed to infer device type" >&2; exit 1;;\n' if help_fails else ""
        _script(
            bin_ / "vllm",
            logline + 'case "$*" in\n' + fails + f'  "--version") echo {shlex.quote(vllm_version)}; exit 0;;\n'
            f'  "serve --help=all") cat {shlex.quote(str(help_all))}; exit 0;;\n'
            '  "serve --help") echo "usage: vllm serve [model_tag] [options]"; '
            'echo "Use --help=all to show all options"; exit 0;;\n'
            'esac\necho "fake vllm: unexpected arguments: $*" >&2; exit 2\n',
        )
    rows = "".join(f"{i}, {gpu_name}, {compute_cap}\\n" for i in range(gpus))
    _script(
        bin_ / "nvidia-smi",
        logline + 'if [ "$*" = "--query-gpu=index,name,compute_cap --format=csv,noheader" ]; then\n'
        f'  printf "{rows}"; exit 0\nfi\n'
        'echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2\n',
    )
    return bin_


def fake_host(folder: Path, **kw) -> LocalHost:
    bin_ = make_fake_bin(folder, **kw)
    return LocalHost("fakehost", env_overlay={"PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}"})
