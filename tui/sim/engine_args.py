"""Argument parsers that mirror SGLang 0.5.23 and vLLM 0.33 (flags, choices, help, argparse errors).

A pre-flight can probe them exactly like the real engines:

- SGLang: ``tunedeck sim sglang --help`` contains ``--attention-backend {triton,torch_native,...}``
  (regex ``--attention-backend \\{([^}]*)\\}``) and every flag name.
- vLLM: ``--attention-backend`` is enum-typed, so ``--help`` lists no choices; the registry probe
  (``python -c "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; ..."``)
  is answered by ``tunedeck sim vllm --sim-list-backends``: the member names, space-separated, one line.

Every flag of the release (``tui.engine_flags``: names, aliases, ``--no-``/``--disable-`` forms,
choices, as its ``--help`` lists them) is accepted with argparse's own rules and errors: a flag the
release does not have, an ambiguous prefix or a choice it does not list ends the start as the
engine's argparse does. The flags the simulator models are declared here with their types and
defaults and applied; every other one is collected in ``sim_accepted`` and logged at start-up as
"accepted, not simulated". Simulator-only options all start with ``--sim-``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any, Sequence

from tui.engine_flags import FlagTable
from tui.engines import SGLANG_SPEC_ALGORITHMS, SGLANG_VERSION, VLLM_VERSION, release_flags

SGLANG_ALIASES = {"nsa": "dsa", "compressed": "dsv4", "tokenspeed_mla": "cutedsl_mla"}

VLLM_BACKENDS = [
    "FLASH_ATTN",
    "FLASHINFER",
    "TRITON_ATTN",
    "FLEX_ATTENTION",
    "TURBOQUANT",
    "FLASH_ATTN_MLA",
    "FLASHMLA",
    "FLASHINFER_MLA",
    "TOKENSPEED_MLA",
    "CUTLASS_MLA",
    "TRITON_MLA",
    "FLASHMLA_SPARSE",
    "FLASHINFER_MLA_SPARSE",
    "TRITON_MLA_SPARSE",
    "ROCM_ATTN",
    "ROCM_AITER_MLA",
    "ROCM_AITER_FA",
    "ROCM_AITER_UNIFIED_ATTN",
    "TORCH_SDPA",
    "CPU_ATTN",
    "XFORMERS",
    "NO_ATTENTION",
    "CUSTOM",
]
VLLM_CUDAGRAPH_MODES = ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]

SIM_FAULTS = ["oom", "nccl", "port", "hang", "crash"]


class _CaseInsensitiveChoices(list[str]):
    """Choices that match any case (vLLM parses AttentionBackendEnum names case-insensitively)."""

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and item.upper() in (c.upper() for c in self)


def _env_float(name: str, default: float) -> float:
    v = os.environ.get(name)
    if not v:
        return default
    try:
        return float(v)
    except ValueError:
        return default


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {s!r}")
    return v


def _speed(s: str) -> float:
    v = _positive_float(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {s!r}")
    return v


def _negates(first: str, name: str) -> bool:
    """``--no-X`` for ``--X``, ``--disable-Y`` for ``--enable-Y`` and back: the switch's off form."""
    body = first[2:]
    if name == f"--no-{body}":
        return True
    for on, off in (("enable-", "disable-"), ("disable-", "enable-")):
        if body.startswith(on) and name == f"--{off}{body[len(on) :]}":
            return True
    return False


class _Toggle(argparse.Action):
    """A switch with its off form (``--enable-x`` / ``--disable-x``, ``--x`` / ``--no-x``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not _negates(self.option_strings[0], option_string or ""))


class _Accepted(argparse.Action):
    """A real flag the simulator does not model: parsed (nargs, choices) and remembered."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if values is None:
            vals: tuple[str, ...] = ()
        elif isinstance(values, list):
            vals = tuple(str(v) for v in values)
        else:
            vals = (str(values),)
        seen = list(getattr(namespace, self.dest, None) or [])
        seen.append((option_string or self.option_strings[0], vals))
        setattr(namespace, self.dest, seen)


_NARGS: dict[str, Any] = {"": 0, "1": None, "?": "?", "+": "+", "*": "*"}


def _modeled(container: Any, table: FlagTable) -> Any:
    """``add_argument`` for a flag the simulator models: the release's option strings (all its
    aliases) and choices; ``sim_choices`` are the simulator's own check where the release lists none."""

    def add(*names: str, sim_choices: Any = None, **kw: Any) -> argparse.Action:
        flag = table.get(names[0])
        if flag is None or not set(names) <= set(flag.names):
            raise ValueError(f"the simulator models {names[0]}, which {table.engine} {table.release} does not have")
        if flag.choices:
            conv = kw.get("type")
            kw["choices"] = [conv(c) for c in flag.choices] if conv in (int, float) else list(flag.choices)
        elif sim_choices is not None:
            kw["choices"] = sim_choices
        action = kw.get("action")
        if action in ("store_true", argparse.BooleanOptionalAction) and len(flag.names) > 1:
            kw["action"] = _Toggle
            if action == "store_true":
                kw.setdefault("default", False)
        act: argparse.Action = container.add_argument(*flag.names, **kw)
        return act

    return add


def _accept_rest(p: argparse.ArgumentParser, table: FlagTable) -> None:
    """Every flag of the release the simulator does not model: accepted, checked, remembered."""
    g = p.add_argument_group("accepted, not simulated", f"{table.engine} {table.release} flags the simulator ignores")
    taken = p._option_string_actions
    for flag in table.flags:
        if any(n in taken for n in flag.names):
            continue
        g.add_argument(
            *flag.names,
            action=_Accepted,
            nargs=_NARGS[flag.nargs],
            choices=list(flag.choices) or None,
            dest="sim_accepted",
            default=None,
            help="accepted, not simulated",
        )


def _add_sim_args(p: argparse.ArgumentParser, engine: str) -> None:
    g = p.add_argument_group("simulator (tunedeck sim only)")
    g.add_argument(
        "--sim-load-seconds",
        type=_positive_float,
        default=_env_float("TUNEDECK_SIM_LOAD_S", 20.0),
        help="Seconds from start to ready (env TUNEDECK_SIM_LOAD_S; default 20).",
    )
    g.add_argument(
        "--sim-fault",
        choices=SIM_FAULTS,
        default=None,
        help="End the start-up like a real failure; crash: serve, then die of a CUDA error "
        "(after --sim-crash-after seconds).",
    )
    g.add_argument(
        "--sim-crash-after",
        type=_positive_float,
        default=_env_float("TUNEDECK_SIM_CRASH_AFTER_S", 3.0),
        help="With --sim-fault crash: seconds of serving before the crash (env TUNEDECK_SIM_CRASH_AFTER_S; default 3).",
    )
    g.add_argument("--sim-seed", type=int, default=0, help="Seed for noise, token text and pseudo-EOS.")
    g.add_argument("--sim-speed", type=_speed, default=1.0, help="Time scale: every simulated duration / X.")
    g.add_argument(
        "--sim-record-timestamps",
        metavar="PATH",
        default=None,
        help="Append one JSON line per finished request: id, arrival, token write times (epoch s).",
    )
    g.add_argument("--sim-fixed-ttft-ms", type=_positive_float, default=None, help="Fixed TTFT, bypassing the model.")
    g.add_argument("--sim-fixed-itl-ms", type=_positive_float, default=None, help="Fixed inter-token delay.")
    g.add_argument("--sim-gpu-start", type=int, default=None, help="First simulated GPU index used.")
    g.add_argument("--sim-stats-interval", type=_positive_float, default=None, help=argparse.SUPPRESS)
    if engine == "vllm":
        g.add_argument(
            "--sim-list-backends",
            action="store_true",
            help="Print AttentionBackendEnum member names (the registry probe) and exit.",
        )


# ====================================================================== SGLang


def sglang_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py")
    p.add_argument("--version", action="version", version=SGLANG_VERSION)
    table = release_flags("sglang")
    a = _modeled(p, table)
    a(
        "--model-path",
        "--model",
        dest="model_path",
        type=str,
        required=True,
        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    )
    a("--tokenizer-path", type=str, default=None, help="The path of the tokenizer.")
    a("--tokenizer-mode", type=str, default="auto", help="Tokenizer mode.")
    a("--tokenizer-worker-num", type=int, default=1, help="The worker num of the tokenizer manager.")
    a(
        "--skip-tokenizer-init",
        action="store_true",
        help="If set, skip init tokenizer and pass input_ids in generate request.",
    )
    a(
        "--load-format",
        type=str,
        default="auto",
        help="The format of the model weights to load.",
    )
    a("--trust-remote-code", action="store_true", help="Whether or not to allow for custom models defined on the Hub.")
    a("--context-length", type=int, default=None, help="The model's maximum context length.")
    a(
        "--dtype",
        type=str,
        default="auto",
        help="Data type for model weights and activations.",
    )
    a(
        "--quantization",
        type=str,
        default=None,
        help="The quantization method.",
    )
    a(
        "--kv-cache-dtype",
        type=str,
        default="auto",
        help="Data type for kv cache storage.",
    )
    a("--served-model-name", type=str, default=None, help="Override the model name returned by the v1/models endpoint.")
    a(
        "--chat-template",
        type=str,
        default=None,
        help="The builtin chat template name or the path of the chat template file.",
    )
    a("--revision", type=str, default=None, help="The specific model version to use.")
    a("--host", type=str, default="127.0.0.1", help="The host of the HTTP server.")
    a("--port", type=int, default=30000, help="The port of the HTTP server.")
    a("--skip-server-warmup", action="store_true", help="If set, skip warmup.")
    a("--warmups", type=str, default=None, help="Warmup configurations to run before the server is ready.")
    a("--nccl-port", type=int, default=None, help="The port for NCCL distributed environment setup.")
    a(
        "--mem-fraction-static",
        type=float,
        default=None,
        help="The fraction of the memory used for static allocation (model weights and KV cache memory pool).",
    )
    a("--max-running-requests", type=int, default=None, help="The maximum number of running requests.")
    a("--max-queued-requests", type=int, default=None, help="The maximum number of queued requests.")
    a("--max-total-tokens", type=int, default=None, help="The maximum number of tokens in the memory pool.")
    a(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="The maximum number of tokens in a chunk for the chunked prefill. -1 disables it.",
    )
    a("--max-prefill-tokens", type=int, default=16384, help="The maximum number of tokens in a prefill batch.")
    a(
        "--schedule-policy",
        type=str,
        default="fcfs",
        help="The scheduling policy of the requests.",
    )
    a("--schedule-conservativeness", type=float, default=1.0, help="How conservative the schedule policy is.")
    a("--page-size", type=int, default=None, help="The number of tokens in a page.")
    a(
        "--num-continuous-decode-steps",
        type=int,
        default=1,
        help="Run multiple continuous decoding steps to reduce scheduling overhead.",
    )
    a("--tp-size", dest="tp_size", type=int, default=1, help="The tensor parallelism size.")
    a("--dp-size", type=int, default=1, help="The data parallelism size.")
    a("--attn-dp-size", type=int, default=1, help="The attention data parallelism size.")
    a("--pp-size", type=int, default=1, help="The pipeline parallelism size.")
    a("--ep-size", type=int, default=1, help="The expert parallelism size.")
    a("--nnodes", type=int, default=1, help="The number of nodes.")
    a("--node-rank", type=int, default=0, help="The node rank.")
    a("--dist-init-addr", type=str, default=None, help="The host address for initializing distributed backend.")
    a("--dist-timeout", type=int, default=None, help="Set timeout for torch.distributed initialization.")
    a("--base-gpu-id", type=int, default=0, help="The base GPU ID to start allocating GPUs from.")
    a("--gpu-id-step", type=int, default=1, help="The delta between consecutive GPU IDs that are used.")
    a("--random-seed", type=int, default=None, help="The random seed.")
    a(
        "--stream-interval",
        type=int,
        default=1,
        help="The interval (or buffer size) for streaming in terms of the token length.",
    )
    a("--watchdog-timeout", type=float, default=300, help="Set watchdog timeout in seconds.")
    a("--download-dir", type=str, default=None, help="Model download directory for huggingface.")
    a("--log-level", type=str, default="info", help="The logging level of all loggers.")
    a("--log-level-http", type=str, default=None, help="The logging level of HTTP server.")
    a("--log-requests", action="store_true", help="Log metadata, inputs, outputs of all requests.")
    a("--show-time-cost", action="store_true", help="Show time cost of custom marks.")
    a("--enable-metrics", action="store_true", help="Enable log prometheus metrics.")
    a("--enable-metrics-for-all-schedulers", action="store_true", help="Enable metrics for all schedulers.")
    a("--decode-log-interval", type=int, default=40, help="The log interval of decode batch.")
    a(
        "--enable-cache-report",
        action="store_true",
        help="Return number of cached tokens in usage.prompt_tokens_details.",
    )
    a("--api-key", type=str, default=None, help="Set API key of the server.")
    a(
        "--stream-response-default-include-usage",
        action="store_true",
        help="Include usage in the final streaming chunk even if the request did not ask for it.",
    )
    a(
        "--incremental-streaming-output",
        action="store_true",
        help="Stream deltas from /generate instead of cumulative text.",
    )
    a("--reasoning-parser", type=str, default=None, help="Specify the parser for reasoning models.")
    a("--tool-call-parser", type=str, default=None, help="Specify the parser for handling tool-call interactions.")
    a(
        "--attention-backend",
        type=str,
        default=None,
        help="Choose the kernels for attention layers.",
    )
    a(
        "--prefill-attention-backend",
        type=str,
        default=None,
        help="Choose the kernels for prefill attention layers (have priority over --attention-backend).",
    )
    a(
        "--decode-attention-backend",
        type=str,
        default=None,
        help="Choose the kernels for decode attention layers (have priority over --attention-backend).",
    )
    a(
        "--sampling-backend",
        type=str,
        default=None,
        help="Choose the kernels for sampling layers.",
    )
    a(
        "--grammar-backend",
        type=str,
        default=None,
        help="Choose the backend for grammar-guided decoding.",
    )
    a(
        "--mm-attention-backend",
        type=str,
        default=None,
        help="Set multimodal attention backend.",
    )
    a(
        "--speculative-algorithm",
        type=str,
        sim_choices=SGLANG_SPEC_ALGORITHMS,
        default=None,
        help="Speculative algorithm.",
    )
    a(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        type=str,
        default=None,
        help="The path of the draft model weights.",
    )
    a(
        "--speculative-num-steps",
        type=int,
        default=None,
        help="The number of steps sampled from draft model in Speculative Decoding.",
    )
    a(
        "--speculative-eagle-topk",
        type=int,
        default=None,
        help="The number of tokens sampled from the draft model in eagle2 each step.",
    )
    a(
        "--speculative-num-draft-tokens",
        type=int,
        default=None,
        help="The number of tokens sampled from the draft model in Speculative Decoding.",
    )
    a(
        "--speculative-accept-threshold-single",
        type=float,
        default=1.0,
        help="Accept a draft token if its probability in the target model is greater than this threshold.",
    )
    a(
        "--speculative-attention-mode",
        type=str,
        default="prefill",
        help="Attention backend for speculative decoding operations (both target verify and draft extend).",
    )
    a("--speculative-draft-attention-backend", type=str, default=None, help="Attention backend for the draft model.")
    a("--speculative-token-map", type=str, default=None, help="The path of the draft model's small vocab table.")
    a(
        "--cpu-offload-gb",
        type=int,
        default=0,
        help="How many GBs of RAM to reserve for CPU offloading: those weights leave each GPU's memory.",
    )
    a("--disable-radix-cache", action="store_true", help="Disable RadixAttention for prefix caching.")
    a("--cuda-graph-max-bs-decode", type=int, default=None, help="Set the maximum batch size for decode cuda graph.")
    a(
        "--cuda-graph-max-bs-prefill",
        type=int,
        default=None,
        help="Set the maximum number of tokens for prefill cuda graph.",
    )
    a(
        "--cuda-graph-backend-decode",
        type=str,
        default="full",
        help="CUDA graph backend for decode.",
    )
    a(
        "--cuda-graph-backend-prefill",
        type=str,
        default="disabled",
        help="CUDA graph backend for prefill.",
    )
    a(
        "--disable-cuda-graph",
        action="store_true",
        help="Disable cuda graph (deprecated: use --cuda-graph-backend-decode=disabled).",
    )
    a("--disable-cuda-graph-padding", action="store_true", help="Disable cuda graph when padding is needed.")
    a("--enable-torch-compile", action="store_true", help="Optimize the model with torch.compile.")
    a("--torch-compile-max-bs", type=int, default=32, help="Set the maximum batch size when using torch compile.")
    a(
        "--disable-custom-all-reduce",
        action="store_true",
        help="Disable the custom all-reduce kernel and fall back to NCCL.",
    )
    a("--enable-nccl-nvls", action="store_true", help="Enable NCCL NVLS for prefill heavy requests when available.")
    a("--enable-symm-mem", action="store_true", help="Enable NCCL symmetric memory for fast collectives.")
    a(
        "--enable-dp-attention",
        action="store_true",
        help="Enable data parallelism for attention (deprecated: use --attn-dp-size).",
    )
    a(
        "--enable-mixed-chunk",
        action="store_true",
        help="Enabling mixing prefill and decode in a batch when using chunked prefill.",
    )
    a("--disable-overlap-schedule", action="store_true", help="Disable the overlap scheduler.")
    a("--enable-two-batch-overlap", action="store_true", help="Enabling two micro batches to overlap.")
    a(
        "--moe-runner-backend",
        type=str,
        default="auto",
        help="Choose the runner backend for MoE.",
    )
    a("--enable-hierarchical-cache", action="store_true", help="Enable hierarchical cache.")
    a("--enable-deterministic-inference", action="store_true", help="Enable deterministic inference mode.")
    _accept_rest(p, table)
    _add_sim_args(p, "sglang")
    return p


# ====================================================================== vLLM

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
    fe = _modeled(p.add_argument_group("Frontend", "Arguments for the OpenAI-compatible frontend server."), table)
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
    mc = _modeled(p.add_argument_group("ModelConfig", "Configuration for the model."), table)
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
    lc = _modeled(p.add_argument_group("LoadConfig", "Configuration for loading the model weights."), table)
    lc("--load-format", type=str, default="auto", help="The format of the model weights to load.")
    lc("--download-dir", type=str, default=None, help="Directory to download and load the weights.")
    pc = _modeled(p.add_argument_group("ParallelConfig", "Configuration for the distributed execution."), table)
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
    cc = _modeled(p.add_argument_group("CacheConfig", "Configuration for the KV cache."), table)
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
    oc = _modeled(p.add_argument_group("OffloadConfig", "Configuration for offloading weights to CPU."), table)
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
    sc = _modeled(p.add_argument_group("SchedulerConfig", "Scheduler configuration."), table)
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
    ac = _modeled(p.add_argument_group("AttentionConfig", "Configuration for attention mechanisms in vLLM."), table)
    ac(
        "--attention-backend",
        type=str,
        sim_choices=_CaseInsensitiveChoices(VLLM_BACKENDS),
        metavar="ATTENTION_BACKEND",
        default=None,
        help="Attention backend to use. Use 'auto' or None for automatic selection.",
    )
    ac("--attention-config", "-ac", type=_json_arg, default=None, help="Configuration for attention (JSON).")
    vc = _modeled(p.add_argument_group("VllmConfig", "Dataclass which contains all vllm-related configuration."), table)
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
    _accept_rest(p, table)
    _add_sim_args(p, "vllm")
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


def help_search(parser: argparse.ArgumentParser, keyword: str) -> str:
    """``vllm serve --help=<keyword>``: the groups or options whose name matches."""
    kw = keyword.lower()
    if kw == "all":
        return parser.format_help()
    lines = []
    for g in parser._action_groups:
        if g.title and g.title.lower() == kw:
            f = parser._get_formatter()
            f.start_section(g.title)
            f.add_text(g.description)
            f.add_arguments(g._group_actions)
            f.end_section()
            return f.format_help()
    for act in parser._actions:
        if any(kw in s.lower() for s in act.option_strings):
            lines.append(f"  {', '.join(act.option_strings)}\n      {act.help or ''}")
    if not lines:
        return f"No group or parameter matching '{keyword}'\n"
    return "Parameters matching '" + keyword + "':\n\n" + "\n".join(lines) + "\n"
