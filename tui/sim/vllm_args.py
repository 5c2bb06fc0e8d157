"""vLLM 0.33's ``vllm serve`` flags as the simulator declares them (the ones it models, with their
types, defaults and help; the rest through :func:`tunedeck.sim.engine_args.accept_rest`), and vLLM's
flexible argv (``--flag_name``, ``-O3``, ``-cc.key=value``) turned into plain flags."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any, Sequence

from tunedeck.engines import VLLM_VERSION, release_flags
from tunedeck.sim.engine_args import VLLM_BACKENDS, CaseInsensitiveChoices, accept_rest, add_sim_args, modeled

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
    fe = modeled(p.add_argument_group("Frontend", "Arguments for the OpenAI-compatible frontend server."), table)
    fe("--host", type=str, default=None, help="Host name.")
    fe("--port", type=int, default=8000, help="Port number.")
    fe(
        "--uvicorn-log-level",
        type=str,
        default="info",
        help="Log level for uvicorn.",
    )
    fe("--disable-uvicorn-access-log", action="store_true", help="Disable uvicorn access log.")
    fe(
        "--api-key",
        type=str,
        default=None,
        help="If provided, the server will require one of these keys to be presented in the header.",
    )
    fe("--served-model-name", nargs="+", type=str, default=None, help="The model name(s) used in the API.")
    fe("--chat-template", type=str, default=None, help="The file path to the chat template.")
    fe("--enable-force-include-usage", action="store_true", help="If set to True, including usage on every request.")
    fe("--enable-log-requests", action="store_true", help="Enable logging requests.")
    fe("--disable-log-stats", action="store_true", help="Disable logging statistics.")
    fe(
        "--disable-fastapi-docs",
        action="store_true",
        help="Disable FastAPI's OpenAPI schema, Swagger UI, and ReDoc endpoint.",
    )
    mc = modeled(p.add_argument_group("ModelConfig", "Configuration for the model."), table)
    mc("--model", type=str, default="Qwen/Qwen3-0.6B", help="Name or path of the Hugging Face model to use.")
    mc("--tokenizer", type=str, default=None, help="Name or path of the Hugging Face tokenizer to use.")
    mc("--trust-remote-code", action="store_true", help="Trust remote code.")
    mc(
        "--dtype",
        type=str,
        default="auto",
        help="Data type for model weights and activations.",
    )
    mc("--seed", type=int, default=0, help="Random seed for reproducibility.")
    mc("--max-model-len", type=str, default=None, help="Model context length (prompt and output).")
    mc("--quantization", "-q", type=str, default=None, help="Method used to quantize the weights.")
    mc("--enforce-eager", action="store_true", help="Whether to always use eager-mode PyTorch.")
    mc("--generation-config", type=str, default="auto", help="The folder path to the generation config.")
    mc("--revision", type=str, default=None, help="The specific model version to use.")
    lc = modeled(p.add_argument_group("LoadConfig", "Configuration for loading the model weights."), table)
    lc("--load-format", type=str, default="auto", help="The format of the model weights to load.")
    lc("--download-dir", type=str, default=None, help="Directory to download and load the weights.")
    pc = modeled(p.add_argument_group("ParallelConfig", "Configuration for the distributed execution."), table)
    pc("--tensor-parallel-size", "-tp", type=int, default=1, help="Number of tensor parallel groups.")
    pc("--data-parallel-size", "-dp", type=int, default=1, help="Number of data parallel groups.")
    pc("--pipeline-parallel-size", "-pp", type=int, default=1, help="Number of pipeline parallel groups.")
    pc(
        "--enable-expert-parallel",
        action="store_true",
        help="Use expert parallelism instead of tensor parallelism for MoE layers.",
    )
    pc(
        "--disable-custom-all-reduce",
        action="store_true",
        help="Disable the custom all-reduce kernel and fall back to NCCL.",
    )
    pc(
        "--distributed-executor-backend",
        type=str,
        default=None,
        help="Backend to use for distributed model workers.",
    )
    cc = modeled(p.add_argument_group("CacheConfig", "Configuration for the KV cache."), table)
    cc(
        "--gpu-memory-utilization",
        type=float,
        default=0.92,
        help="The fraction of GPU memory to be used for the model executor.",
    )
    cc(
        "--block-size",
        type=int,
        default=None,
        help="Size of a contiguous cache block in number of tokens.",
    )
    cc(
        "--kv-cache-dtype",
        type=str,
        default="auto",
        help="Data type for kv cache storage.",
    )
    oc = modeled(p.add_argument_group("OffloadConfig", "Configuration for offloading weights to CPU."), table)
    oc(
        "--cpu-offload-gb",
        type=float,
        default=0,
        help="The space in GiB to offload to CPU, per GPU: those weights leave GPU memory.",
    )
    cc(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Whether to enable prefix caching.",
    )
    sc = modeled(p.add_argument_group("SchedulerConfig", "Scheduler configuration."), table)
    sc(
        "--max-num-seqs",
        type=int,
        default=None,
        help="Maximum number of sequences to be processed in a single iteration.",
    )
    sc(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="Maximum number of tokens to be processed in a single iteration.",
    )
    sc(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Chunk long prefills into token-budgeted steps (vLLM V1: on unless disabled).",
    )
    sc("--async-scheduling", action=argparse.BooleanOptionalAction, default=None, help="Perform async scheduling.")
    ac = modeled(p.add_argument_group("AttentionConfig", "Configuration for attention mechanisms in vLLM."), table)
    ac(
        "--attention-backend",
        type=str,
        sim_choices=CaseInsensitiveChoices(VLLM_BACKENDS),
        metavar="ATTENTION_BACKEND",
        default=None,
        help="Attention backend to use. Use 'auto' or None for automatic selection.",
    )
    ac("--attention-config", "-ac", type=_json_arg, default=None, help="Configuration for attention (JSON).")
    vc = modeled(p.add_argument_group("VllmConfig", "Dataclass which contains all vllm-related configuration."), table)
    vc("--speculative-config", "-sc", type=_json_arg, default=None, help="Speculative decoding configuration (JSON).")
    vc(
        "--compilation-config",
        "-cc",
        type=_json_arg,
        default=None,
        help="torch.compile and cudagraph capture configuration (JSON).",
    )
    vc(
        "--optimization-level",
        type=int,
        default=2,
        help="The optimization level (-O0 ... -O3, which vLLM reads as this flag).",
    )
    vc("--max-cudagraph-capture-size", type=int, default=None, help="Maximum cudagraph capture size.")
    vc("--cudagraph-capture-sizes", type=int, nargs="+", default=None, help="Cudagraph capture sizes.")
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
