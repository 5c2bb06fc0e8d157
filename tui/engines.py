"""The engines' own names for the releases tunedeck follows: SGLang 0.5.23 and vLLM 0.33.

One table for both sides that must agree: what a profile may ask for before anything is launched
(``tunedeck.profiles``) and what the simulated engine accepts (``tunedeck.sim``, which travels in the
host-side runtime: constants only, Python 3.9+). Taken from the releases themselves: SGLang's
``--attention-backend`` choices and ``--speculative-algorithm`` values, vLLM's ``SpeculativeMethod``
(``vllm/config/speculative.py``, its MTP model types included) and ``AttentionBackendEnum``
(``vllm/v1/attention/backends/registry.py``). Every launch flag of both releases,
with its choices, is in :mod:`tunedeck.engine_flags` (:func:`release_flags`).
"""

from tunedeck.engine_flags import FlagTable, release_table

SGLANG_VERSION = "0.5.23"
VLLM_VERSION = "0.33.0"
#: the release tunedeck follows, per engine: its flag table is ``release_table(engine, VERSIONS[engine])``
VERSIONS = {"sglang": SGLANG_VERSION, "vllm": VLLM_VERSION}

#: SGLang 0.5.23 ``--attention-backend`` (and ``--prefill-``/``--decode-attention-backend``) choices,
#: from its flag table
SGLANG_ATTENTION_BACKENDS = release_table("sglang", SGLANG_VERSION).choices("--attention-backend")

#: vLLM 0.33 ``AttentionBackendEnum`` member names, in the release's order, with the hardware each is
#: for: ``nvidia`` (the CUDA members, serving-engines.md §2.1), ``rocm``, ``cpu``, or ``other`` (not a
#: choice made without asking the host: encoders' and attention-free models' backends, a plugin's
#: CUSTOM). ``--attention-backend`` is enum-typed, so vLLM's --help lists none of them; the host is
#: asked through the registry (``tunedeck sim vllm --sim-list-backends`` answers the same way).
VLLM_ATTENTION_BACKEND_HARDWARE = {
    "FLASH_ATTN": "nvidia",
    "FLASHINFER": "nvidia",
    "TRITON_ATTN": "nvidia",
    "FLEX_ATTENTION": "nvidia",
    "TURBOQUANT": "nvidia",
    "FLASH_ATTN_MLA": "nvidia",
    "FLASHMLA": "nvidia",
    "FLASHINFER_MLA": "nvidia",
    "TOKENSPEED_MLA": "nvidia",
    "CUTLASS_MLA": "nvidia",
    "TRITON_MLA": "nvidia",
    "FLASHMLA_SPARSE": "nvidia",
    "FLASHINFER_MLA_SPARSE": "nvidia",
    "TRITON_MLA_SPARSE": "other",
    "ROCM_ATTN": "rocm",
    "ROCM_AITER_MLA": "rocm",
    "ROCM_AITER_FA": "rocm",
    "ROCM_AITER_UNIFIED_ATTN": "rocm",
    "TORCH_SDPA": "other",
    "CPU_ATTN": "cpu",
    "XFORMERS": "other",
    "NO_ATTENTION": "other",
    "CUSTOM": "other",
}

#: every vLLM 0.33 attention backend (what the simulated vLLM accepts), in the release's order
VLLM_ATTENTION_BACKENDS = tuple(VLLM_ATTENTION_BACKEND_HARDWARE)

#: the ones for NVIDIA GPUs: what a profile may ask for when the host cannot be asked
VLLM_CUDA_ATTENTION_BACKENDS = tuple(n for n, hw in VLLM_ATTENTION_BACKEND_HARDWARE.items() if hw == "nvidia")

#: SGLang 0.5.23 ``--speculative-algorithm`` values (its --help shows a metavar, not choices: the
#: server checks them after parsing)
SGLANG_SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")

#: vLLM 0.33 ``--speculative-config`` ``method`` values (``SpeculativeMethod``, flattened)
VLLM_SPEC_METHODS = (
    "ngram",
    "draft_model",
    "suffix",
    "custom_class",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen4_exp_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "step5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
    "dflash",
    "ngram_gpu",
    "dspark",
)


def release_flags(engine: str) -> FlagTable:
    """The flag table of the ``engine`` release tunedeck follows (tunedeck's own, not a host's)."""
    return release_table(engine, VERSIONS[engine])


__all__ = [
    "SGLANG_ATTENTION_BACKENDS",
    "SGLANG_SPEC_ALGORITHMS",
    "SGLANG_VERSION",
    "VERSIONS",
    "VLLM_ATTENTION_BACKENDS",
    "VLLM_ATTENTION_BACKEND_HARDWARE",
    "VLLM_CUDA_ATTENTION_BACKENDS",
    "VLLM_SPEC_METHODS",
    "VLLM_VERSION",
    "release_flags",
]
