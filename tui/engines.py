"""The engines' own names for the releases tunedeck follows: SGLang 0.5.23 and vLLM 0.33.

One table for both sides that must agree: what a profile may ask for before anything is launched
(``tunedeck.profiles``) and what the simulated engine accepts (``tunedeck.sim``, which travels in the
host-side runtime: constants only, Python 3.9+). Taken from the releases themselves: SGLang's
``--attention-backend`` choices and ``--speculative-algorithm`` values, vLLM's ``SpeculativeMethod``
(``vllm/config/speculative.py``, its MTP model types included). Every launch flag of both releases,
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
    "VLLM_SPEC_METHODS",
    "VLLM_VERSION",
    "release_flags",
]
