"""vLLM 0.33's ``vllm serve`` flags as the simulator declares them (the ones it models, one row each
with its type, default and help in :data:`GROUPS`; the rest through
:func:`tunedeck.sim.engine_args.accept_rest`), and vLLM's
flexible argv (``--flag_name``, ``-O3``, ``-cc.key=value``) turned into plain flags."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, Sequence

from tunedeck.engines import VLLM_VERSION, release_flags
from tunedeck.sim.engine_args import (
    VLLM_BACKENDS,
    CaseInsensitiveChoices,
    Modeled,
    accept_rest,
    add_modeled,
    add_sim_args,
)

_JSON_FLAGS = {
    "-cc": "compilation_config",
    "--compilation-config": "compilation_config",
    "-ac": "attention_config",
    "--attention-config": "attention_config",
    "-sc": "speculative_config",
    "--speculative-config": "speculative_config",
}


def _json_arg(s: str) -> dict[str, Any]:
    try:
        v = json.loads(s)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON: {e}") from None
    if not isinstance(v, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return v


#: the flags the simulator models, by --help group (title, description, its flags in order): option,
#: type (``bool``: a switch), default, help
GROUPS: tuple[tuple[str, str, tuple[Modeled, ...]], ...] = (
    (
        "Frontend",
        "Arguments for the OpenAI-compatible frontend server.",
        (
            ("--host", str, None, "Host name."),
            ("--port", int, 8000, "Port number."),
            ("--uvicorn-log-level", str, "info", "Log level for uvicorn."),
            ("--disable-uvicorn-access-log", bool, False, "Disable uvicorn access log."),
            (
                "--api-key",
                str,
                None,
                "If provided, the server will require one of these keys to be presented in the header.",
            ),
            ("--served-model-name", str, None, "The model name(s) used in the API."),
            ("--chat-template", str, None, "The file path to the chat template."),
            ("--enable-force-include-usage", bool, False, "If set to True, including usage on every request."),
            ("--enable-log-requests", bool, False, "Enable logging requests."),
            ("--disable-log-stats", bool, False, "Disable logging statistics."),
            (
                "--disable-fastapi-docs",
                bool,
                False,
                "Disable FastAPI's OpenAPI schema, Swagger UI, and ReDoc endpoint.",
            ),
        ),
    ),
    (
        "ModelConfig",
        "Configuration for the model.",
        (
            ("--model", str, "Qwen/Qwen3-0.6B", "Name or path of the Hugging Face model to use."),
            ("--tokenizer", str, None, "Name or path of the Hugging Face tokenizer to use."),
            ("--trust-remote-code", bool, False, "Trust remote code."),
            ("--dtype", str, "auto", "Data type for model weights and activations."),
            ("--seed", int, 0, "Random seed for reproducibility."),
            ("--max-model-len", str, None, "Model context length (prompt and output)."),
            ("--quantization", str, None, "Method used to quantize the weights."),
            ("--enforce-eager", bool, False, "Whether to always use eager-mode PyTorch."),
            ("--generation-config", str, "auto", "The folder path to the generation config."),
            ("--revision", str, None, "The specific model version to use."),
        ),
    ),
    (
        "LoadConfig",
        "Configuration for loading the model weights.",
        (
            ("--load-format", str, "auto", "The format of the model weights to load."),
            ("--download-dir", str, None, "Directory to download and load the weights."),
        ),
    ),
    (
        "ParallelConfig",
        "Configuration for the distributed execution.",
        (
            ("--tensor-parallel-size", int, 1, "Number of tensor parallel groups."),
            ("--data-parallel-size", int, 1, "Number of data parallel groups."),
            ("--pipeline-parallel-size", int, 1, "Number of pipeline parallel groups."),
            (
                "--enable-expert-parallel",
                bool,
                False,
                "Use expert parallelism instead of tensor parallelism for MoE layers.",
            ),
            ("--disable-custom-all-reduce", bool, False, "Disable the custom all-reduce kernel and fall back to NCCL."),
            ("--distributed-executor-backend", str, None, "Backend to use for distributed model workers."),
        ),
    ),
    (
        "CacheConfig",
        "Configuration for the KV cache.",
        (
            ("--gpu-memory-utilization", float, 0.92, "The fraction of GPU memory to be used for the model executor."),
            ("--block-size", int, None, "Size of a contiguous cache block in number of tokens."),
            ("--kv-cache-dtype", str, "auto", "Data type for kv cache storage."),
            ("--enable-prefix-caching", bool, None, "Whether to enable prefix caching."),
        ),
    ),
    (
        "OffloadConfig",
        "Configuration for offloading weights to CPU.",
        (
            (
                "--cpu-offload-gb",
                float,
                0,
                "The space in GiB to offload to CPU, per GPU: those weights leave GPU memory.",
            ),
        ),
    ),
    (
        "SchedulerConfig",
        "Scheduler configuration.",
        (
            ("--max-num-seqs", int, None, "Maximum number of sequences to be processed in a single iteration."),
            ("--max-num-batched-tokens", int, None, "Maximum number of tokens to be processed in a single iteration."),
            (
                "--enable-chunked-prefill",
                bool,
                None,
                "Chunk long prefills into token-budgeted steps (vLLM V1: on unless disabled).",
            ),
            ("--async-scheduling", bool, None, "Perform async scheduling."),
        ),
    ),
    (
        "AttentionConfig",
        "Configuration for attention mechanisms in vLLM.",
        (
            ("--attention-backend", str, None, "Attention backend to use. Use 'auto' or None for automatic selection."),
            ("--attention-config", _json_arg, None, "Configuration for attention (JSON)."),
        ),
    ),
    (
        "VllmConfig",
        "Dataclass which contains all vllm-related configuration.",
        (
            ("--speculative-config", _json_arg, None, "Speculative decoding configuration (JSON)."),
            ("--compilation-config", _json_arg, None, "torch.compile and cudagraph capture configuration (JSON)."),
            ("--optimization-level", int, 2, "The optimization level (-O0 ... -O3, which vLLM reads as this flag)."),
            ("--max-cudagraph-capture-size", int, None, "Maximum cudagraph capture size."),
            ("--cudagraph-capture-sizes", int, None, "Cudagraph capture sizes."),
        ),
    ),
)

#: what a few of them add to their row
MORE: dict[str, dict[str, Any]] = {
    "--attention-backend": {"sim_choices": CaseInsensitiveChoices(VLLM_BACKENDS), "metavar": "ATTENTION_BACKEND"},
}


def vllm_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP. "
        "Defaults to Qwen/Qwen3-0.6B if no model is specified.",
        epilog="Use `--help=<ConfigGroup>` to explore options by section (e.g., --help=ModelConfig, --help=Frontend)\n"
        "Use `--help=all` to show all available flags at once.",
    )
    p.add_argument("--version", action="version", version=VLLM_VERSION)
    table = release_flags("vllm")
    p.add_argument(
        "model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)"
    )
    for title, description, flags in GROUPS:
        add_modeled(p.add_argument_group(title, description), table, flags, MORE)
    accept_rest(p, table)
    add_sim_args(p, "vllm")
    return p


_DOT_RE = re.compile(
    r"^(-cc|-ac|-sc|--compilation-config|--attention-config|--speculative-config)\.([\w.]+)(?:=(.*))?$"
)


def preprocess_vllm_argv(argv: Sequence[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser tweaks: ``serve`` prefix, ``--flag_name`` underscores, ``-O3``,
    dotted JSON sub-keys (``-cc.cudagraph_mode=FULL``) merged into one JSON argument."""
    argv = list(argv)
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    out: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        m = _DOT_RE.match(a)
        if m:
            flag, key, val = m.group(1), m.group(2), m.group(3)
            if val is None and i + 1 < len(argv):
                val = argv[i + 1]
                i += 1
            try:
                parsed = json.loads(val) if val is not None else True
            except ValueError:
                parsed = val
            d = dotted.setdefault(_JSON_FLAGS[flag], {})
            cur = d
            parts = key.split(".")
            for part in parts[:-1]:
                cur = cur.setdefault(part, {})
            cur[parts[-1]] = parsed
            i += 1
            continue
        if a == "-O":
            a = "--optimization-level"
        elif a.startswith("-O"):  # -O3, -O=3: vLLM reads it as --optimization-level
            a = "--optimization-level=" + a[2:].lstrip("=")
        elif a.startswith("--") and not a.startswith("--sim-"):
            name, eq, rest = a.partition("=")
            a = name.replace("_", "-") + eq + rest
        out.append(a)
        i += 1
    for dest, d in dotted.items():
        flag = "--" + dest.replace("_", "-")
        out += [flag, json.dumps(d)]
    return out
