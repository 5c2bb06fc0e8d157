"""The per-engine allowlist of launch flags tunedeck knows, with value types.

Flags here are the ones ``serving-engines.md`` §1 names plus common serving flags, for
SGLang 0.5.5 … 0.5.23 and vLLM 0.11 … 0.33. A flag that exists in only some versions is still
listed (``versions``); the pre-flight check asks the host's ``--help`` whether it exists there.
Fields of the profile (model, tp, host, port, attention, speculative) own their flags
(``managed``): they cannot be set again through ``[flags]`` or ``extra_args``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunedeck.engines import SGLANG_ATTENTION_BACKENDS, VLLM_CUDA_ATTENTION_BACKENDS


@dataclass(frozen=True, slots=True)
class FlagSpec:
    name: str
    #: bool (bare flag), int, float, str, json
    type: str = "str"
    choices: tuple[str, ...] = ()
    #: the profile field that sets this flag; "" = free to set in [flags]
    managed: str = ""
    note: str = ""
    #: True for flags that widen what the server executes (e.g. --trust-remote-code)
    security: bool = False


def _specs(*items: FlagSpec) -> dict[str, FlagSpec]:
    return {s.name: s for s in items}


_CG_BACKENDS = ("full", "breakable", "disabled")

SGLANG_FLAGS = _specs(
    FlagSpec("model-path", managed="model"),
    FlagSpec("tp-size", "int", managed="tp"),
    FlagSpec("host", managed="host"),
    FlagSpec("port", "int", managed="port"),
    FlagSpec("attention-backend", managed="attention.backend"),
    FlagSpec("prefill-attention-backend", managed="attention.prefill"),
    FlagSpec("decode-attention-backend", managed="attention.decode"),
    FlagSpec("speculative-algorithm", managed="speculative.algorithm"),
    FlagSpec("speculative-draft-model-path", managed="speculative.draft_model"),
    FlagSpec("speculative-num-steps", "int", managed="speculative.num_steps"),
    FlagSpec("speculative-eagle-topk", "int", managed="speculative.eagle_topk"),
    FlagSpec("speculative-num-draft-tokens", "int", managed="speculative.num_draft_tokens"),
    FlagSpec("speculative-attention-mode", "str", ("prefill", "decode")),
    FlagSpec("speculative-draft-attention-backend"),
    FlagSpec("speculative-token-map"),
    FlagSpec("mem-fraction-static", "float", note="weights + KV pool; lower it after an OOM"),
    FlagSpec("max-running-requests", "int"),
    FlagSpec("max-total-tokens", "int"),
    FlagSpec("chunked-prefill-size", "int", note="-1 = off"),
    FlagSpec("max-prefill-tokens", "int"),
    FlagSpec("page-size", "int"),
    FlagSpec("num-continuous-decode-steps", "int"),
    FlagSpec("disable-custom-all-reduce", "bool"),
    FlagSpec("enable-nccl-nvls", "bool"),
    FlagSpec("enable-symm-mem", "bool"),
    FlagSpec("cuda-graph-max-bs", "int", note="0.5.5 only; an ambiguous prefix on 0.5.23"),
    FlagSpec("cuda-graph-max-bs-decode", "int"),
    FlagSpec("cuda-graph-max-bs-prefill", "int"),
    FlagSpec("cuda-graph-backend-decode", "str", _CG_BACKENDS),
    FlagSpec("cuda-graph-backend-prefill", "str", _CG_BACKENDS),
    FlagSpec("disable-cuda-graph", "bool", note="deprecated: --cuda-graph-backend-decode=disabled"),
    FlagSpec("enable-torch-compile", "bool"),
    FlagSpec("dp-size", "int"),
    FlagSpec("attn-dp-size", "int"),
    FlagSpec("ep-size", "int"),
    FlagSpec("pp-size", "int"),
    FlagSpec("enable-dp-attention", "bool", note="deprecated: --attn-dp-size N"),
    FlagSpec("enable-metrics", "bool", note="without it SGLang serves no /metrics"),
    FlagSpec("trust-remote-code", "bool", security=True, note="runs Python code shipped with the model"),
    FlagSpec("kv-cache-dtype"),
    FlagSpec("dtype"),
    FlagSpec("quantization"),
    FlagSpec("context-length", "int"),
    FlagSpec("served-model-name"),
    FlagSpec("tokenizer-path"),
    FlagSpec("decode-log-interval", "int"),
    FlagSpec("watchdog-timeout", "float"),
    FlagSpec("log-level"),
    FlagSpec("schedule-policy"),
    FlagSpec("disable-radix-cache", "bool"),
    FlagSpec("enable-mixed-chunk", "bool"),
    FlagSpec("disable-overlap-schedule", "bool"),
    FlagSpec("enable-deterministic-inference", "bool"),
    FlagSpec("random-seed", "int"),
    FlagSpec("stream-interval", "int"),
    FlagSpec("dist-init-addr"),
    FlagSpec("nnodes", "int"),
    FlagSpec("node-rank", "int"),
    FlagSpec("dist-timeout", "int", note="seconds torch.distributed waits for every rank"),
    FlagSpec("moe-runner-backend"),
    FlagSpec("moe-a2a-backend"),
    FlagSpec("sampling-backend"),
    FlagSpec("grammar-backend"),
    FlagSpec("chat-template"),
    FlagSpec("reasoning-parser"),
    FlagSpec("tool-call-parser"),
    FlagSpec("enable-cache-report", "bool"),
    FlagSpec("api-key", note="secret: redacted where stored"),
)

VLLM_FLAGS = _specs(
    FlagSpec("tensor-parallel-size", "int", managed="tp"),
    FlagSpec("host", managed="host"),
    FlagSpec("port", "int", managed="port"),
    FlagSpec("attention-backend", managed="attention.backend"),
    FlagSpec("speculative-config", "json", managed="speculative"),
    FlagSpec("gpu-memory-utilization", "float"),
    FlagSpec("max-num-seqs", "int"),
    FlagSpec("max-num-batched-tokens", "int"),
    FlagSpec("enforce-eager", "bool"),
    FlagSpec("disable-custom-all-reduce", "bool"),
    FlagSpec("compilation-config", "json"),
    FlagSpec("attention-config", "json"),
    FlagSpec("max-cudagraph-capture-size", "int"),
    FlagSpec("max-model-len", note="tokens; 0.33 also accepts 32k"),
    FlagSpec("kv-cache-dtype"),
    FlagSpec("block-size", "int"),
    FlagSpec("enable-prefix-caching", "bool"),
    FlagSpec("no-enable-prefix-caching", "bool"),
    FlagSpec("enable-chunked-prefill", "bool"),
    FlagSpec("enable-expert-parallel", "bool"),
    FlagSpec("data-parallel-size", "int"),
    FlagSpec("pipeline-parallel-size", "int"),
    FlagSpec("distributed-executor-backend", "str", ("mp", "ray", "uni", "external_launcher")),
    FlagSpec("data-parallel-size-local", "int"),
    FlagSpec("data-parallel-start-rank", "int"),
    FlagSpec("data-parallel-address"),
    FlagSpec("data-parallel-rpc-port", "int"),
    FlagSpec("headless", "bool"),
    FlagSpec("trust-remote-code", "bool", security=True, note="runs Python code shipped with the model"),
    FlagSpec("dtype"),
    FlagSpec("quantization"),
    FlagSpec("served-model-name"),
    FlagSpec("tokenizer"),
    FlagSpec("seed", "int"),
    FlagSpec("swap-space", "float"),
    FlagSpec("disable-log-stats", "bool"),
    FlagSpec("uvicorn-log-level"),
    FlagSpec("generation-config"),
    FlagSpec("reasoning-parser"),
    FlagSpec("tool-call-parser"),
    FlagSpec("enable-auto-tool-choice", "bool"),
    FlagSpec("async-scheduling", "bool"),
    FlagSpec("load-format"),
    FlagSpec("download-dir"),
    FlagSpec("api-key", note="secret: redacted where stored"),
)

FLAGS = {"sglang": SGLANG_FLAGS, "vllm": VLLM_FLAGS}

#: Short spellings accepted in extra_args; tunedeck always emits the full name.
ALIASES = {
    "sglang": {"tp": "tp-size", "model": "model-path"},
    "vllm": {
        "tp": "tensor-parallel-size",
        "dp": "data-parallel-size",
        "pp": "pipeline-parallel-size",
        "q": "quantization",
        "sc": "speculative-config",
        "cc": "compilation-config",
        "ac": "attention-config",
    },
}

#: Attention backends when the host cannot be asked (serving-engines.md §2.1); SGLang 0.5.23's are
#: ``tunedeck.engines.SGLANG_ATTENTION_BACKENDS``.
SGLANG_BACKENDS_0_5_5 = (
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
#: vLLM 0.33's CUDA members of ``AttentionBackendEnum`` (``tunedeck.engines``, the enum's one table)
VLLM_BACKENDS_0_33 = VLLM_CUDA_ATTENTION_BACKENDS
BUILTIN_BACKENDS = {"sglang": SGLANG_ATTENTION_BACKENDS, "vllm": VLLM_BACKENDS_0_33}


# ----------------------------------------------------------------------- MLA × architecture
#: SGLang backends valid for MLA models per compute-capability major (serving-engines.md §2.2).
#: "verify" = passes SGLang's argument checks there but is unverified on that arch.
SGLANG_MLA = {
    9: {"valid": {"fa3", "flashmla", "flashinfer", "triton"}, "verify": set()},
    10: {
        "valid": {"trtllm_mla", "flashinfer", "cutedsl_mla", "fa4", "flashmla", "triton", "cutlass_mla"},
        "verify": set(),
    },
    12: {"valid": {"triton"}, "verify": {"flashinfer", "trtllm_mla"}},
}
VLLM_MLA = {
    9: {"valid": {"FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"}, "verify": set()},
    10: {
        "valid": {"FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASHMLA", "TRITON_MLA"},
        "verify": set(),
    },
    12: {"valid": {"TRITON_MLA"}, "verify": set()},
}
MLA_TABLE = {"sglang": SGLANG_MLA, "vllm": VLLM_MLA}
#: Backends that never run MLA (trtllm_mha and hpc_ops are MHA-only; the vLLM MHA members).
NOT_MLA = {
    "sglang": {"trtllm_mha", "hpc_ops", "torch_native", "flex_attention"},
    "vllm": {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"},
}
