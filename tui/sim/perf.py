"""The simulator's performance model: pure, deterministic functions (documented in docs/sim-model.md).

A continuous-batching engine runs *steps*. A decode step over ``b`` running
requests takes::

    step(b) = base(b) x M_attn x M_comm(b) x M_steps x M_graph(b) x M_run x jitter

with ``base(b) = a + c*(b-1)`` fitted so the defaults reproduce measured
figures (SGLang 0.5.23: 64 tok/s single stream, 2,370 tok/s at C=128;
vLLM 0.33: 82.5 and 1,536), and every multiplier a documented constant.
Prefill costs ``fixed + per_token x tokens``; SGLang runs it as its own
step, vLLM adds it to the decode step (chunked prefill). Speculative
decoding makes a step emit ``1 + accepted`` tokens at a higher step cost.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Mapping

# ---------------------------------------------------------------- calibration targets
#: engine -> (single-stream tok/s, total tok/s at 128 concurrent streams)
TARGETS: dict[str, tuple[float, float]] = {"sglang": (64.0, 2370.0), "vllm": (82.5, 1536.0)}
#: Measured throughput includes prefill interruptions and the first-token wait; the
#: base step is made this much shorter so a plain benchmark (short prompts, 256
#: output tokens, ignore_eos) lands on the targets.
OVERHEAD_COMP: dict[str, tuple[float, float]] = {"sglang": (1.0, 0.987), "vllm": (0.997, 0.988)}

#: fixed cost of a prefill (s) and cost per prompt token (s/token)
PREFILL_FIXED = {"sglang": 0.004, "vllm": 0.003}
PREFILL_PER_TOKEN = {"sglang": 0.000012, "vllm": 0.000014}

#: step-time multipliers per attention backend (lower = faster); unknown names 1.05
ATTN_MULT: dict[str, dict[str, float]] = {
    "sglang": {
        "fa3": 1.00,
        "flashinfer": 0.97,
        "triton": 1.08,
        "torch_native": 1.90,
        "flex_attention": 1.30,
        "trtllm_mha": 0.99,
        "fa4": 1.02,
        "hpc_ops": 0.99,
        "flashmla": 1.00,
        "cutedsl_mla": 1.00,
        "trtllm_mla": 1.00,
    },
    "vllm": {
        "FLASH_ATTN": 1.00,
        "FLASHINFER": 0.98,
        "TRITON_ATTN": 1.07,
        "FLEX_ATTENTION": 1.30,
        "TURBOQUANT": 1.03,
        "FLASH_ATTN_MLA": 1.00,
        "FLASHMLA": 1.00,
        "FLASHINFER_MLA": 1.00,
        "TRITON_MLA": 1.08,
        "CUTLASS_MLA": 1.00,
    },
}
DEFAULT_ATTN = {"sglang": "fa3", "vllm": "FLASH_ATTN"}

#: share of a decode step spent in tensor-parallel all-reduce (TP > 1)
COMM_FRAC = 0.25
#: all-reduce factor when --disable-custom-all-reduce (NCCL does every all-reduce):
#: worse for tiny messages (batch 1), better for large ones (batch >= 64)
CAR_OFF_AT_1 = 1.15
CAR_OFF_AT_64 = 0.80
#: with custom all-reduce on, NCCL still carries this share of the traffic
NCCL_SHARE_WITH_CAR = 0.30

#: NCCL variable -> value -> factor on NCCL all-reduce time
NCCL_FACTORS: dict[str, dict[str, float]] = {
    "NCCL_PROTO": {"LL": 0.85, "LL128": 0.93, "SIMPLE": 1.08},
    "NCCL_ALGO": {
        "RING": 0.97,
        "TREE": 1.03,
        "NVLS": 0.92,
        "NVLSTREE": 0.95,
        "COLLNETCHAIN": 1.05,
        "COLLNETDIRECT": 1.05,
        "PAT": 1.05,
    },
    "NCCL_P2P_DISABLE": {"1": 1.80},
    "NCCL_SHM_DISABLE": {"1": 1.05},
    "NCCL_P2P_LEVEL": {"LOC": 1.80},
    "NCCL_NVLS_ENABLE": {"1": 0.97},
    "NCCL_NTHREADS": {"64": 1.06, "128": 1.02},
}

#: --num-continuous-decode-steps k: scheduler overhead saved, 1 - GAIN*(1 - 1/k)
DECODE_STEPS_GAIN = 0.06
#: batches larger than the CUDA-graph max batch run eagerly
NO_GRAPH_MULT = 1.15
CUDA_GRAPH_MAX_BS = 512

#: speculative decoding: per-draft-token acceptance probability by method
SPEC_ALPHA: dict[str, float] = {
    "EAGLE": 0.70,
    "EAGLE3": 0.75,
    "NEXTN": 0.80,
    "MTP": 0.80,
    "DEEPSEEK_MTP": 0.80,
    "QWEN3_NEXT_MTP": 0.78,
    "STANDALONE": 0.60,
    "DRAFT_MODEL": 0.60,
    "NGRAM": 0.45,
    "NGRAM_GPU": 0.45,
    "SUFFIX": 0.50,
    "DFLASH": 0.78,
    "DSPARK": 0.72,
    "UNO": 0.70,
}
#: acceptance from the prompt's content (docs/sim-model.md): a prompt whose bigram repetition reaches
#: SPEC_REP_FULL (natural text) accepts at the method's alpha, one without repetition (random token
#: ids) at SPEC_ALPHA_FLOOR times it; SPEC_REP_PRIOR pseudo-bigrams at SPEC_REP_FULL keep short prompts
#: near the method's alpha
SPEC_REP_FULL = 0.10
SPEC_ALPHA_FLOOR = 0.5
SPEC_REP_PRIOR = 256
#: cost of one draft forward relative to a target step at batch 1
SPEC_DRAFT_COST = 0.10
#: extra verify cost per draft token at large batch (scaled by min(1, b/32))
SPEC_VERIFY_COST = 0.22

#: step-to-step jitter (standard deviation) and the per-run offset range
JITTER_SD = 0.015
RUN_OFFSET = 0.01


@dataclass(frozen=True)
class SpecConfig:
    method: str  # upper case
    num_steps: int = 3
    topk: int = 1
    draft_tokens: int = 4

    @property
    def alpha(self) -> float:
        return SPEC_ALPHA.get(self.method.upper(), 0.6)


@dataclass(frozen=True)
class PerfConfig:
    engine: str = "sglang"
    tp: int = 8
    attention_backend: str | None = None  # None = the engine's default on SM90
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_steps: int = 1
    disable_custom_all_reduce: bool = False
    nccl_env: tuple[tuple[str, str], ...] = ()
    spec: SpecConfig | None = None
    cuda_graph_max_bs: int = CUDA_GRAPH_MAX_BS
    enforce_eager: bool = False
    seed: int = 0

    @staticmethod
    def nccl_from_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in env.items() if k.startswith("NCCL_")))


def base_coeffs(engine: str) -> tuple[float, float]:
    """(a, c): base(b) = a + c*(b-1) seconds, from the calibration targets."""
    single, total128 = TARGETS[engine]
    k1, k128 = OVERHEAD_COMP[engine]
    a = k1 / single
    s128 = k128 * 128.0 / total128
    return a, (s128 - a) / 127.0


def base_step(engine: str, b: int) -> float:
    a, c = base_coeffs(engine)
    return a + c * max(0, b - 1)


def attn_mult(engine: str, name: str | None) -> float:
    if not name:
        name = DEFAULT_ATTN[engine]
    table = ATTN_MULT[engine]
    return table.get(name if engine == "sglang" else name.upper(), 1.05)


def nccl_factor(nccl_env: tuple[tuple[str, str], ...]) -> float:
    f = 1.0
    for k, v in nccl_env:
        table = NCCL_FACTORS.get(k)
        if not table:
            continue
        val = v.strip().upper()
        if val.startswith("^"):
            continue
        # a comma list: the first value decides (NCCL tries them in order)
        val = re.split(r"[,;]", val)[0].split(":")[-1]
        f *= table.get(val, 1.0)
    if any(k == "NCCL_BUFFSIZE" and v.isdigit() and int(v) < (1 << 20) for k, v in nccl_env):
        f *= 1.05
    for k, v in nccl_env:
        if k in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS") and v.isdigit() and int(v) < 4:
            f *= 1.10
    return f


def car_off_factor(b: int) -> float:
    t = min(1.0, math.log2(max(1, b)) / 6.0)
    return CAR_OFF_AT_1 + (CAR_OFF_AT_64 - CAR_OFF_AT_1) * t


def comm_mult(cfg: PerfConfig, b: int) -> float:
    if cfg.tp <= 1:
        return 1.0
    fn = nccl_factor(cfg.nccl_env)
    if cfg.disable_custom_all_reduce:
        f = car_off_factor(b) * fn
    else:
        f = 1.0 + NCCL_SHARE_WITH_CAR * (fn - 1.0)
    return 1.0 + COMM_FRAC * (f - 1.0)


def decode_steps_mult(k: int) -> float:
    k = max(1, k)
    return 1.0 - DECODE_STEPS_GAIN * (1.0 - 1.0 / k)


def spec_step_mult(spec: SpecConfig | None, b: int) -> float:
    if spec is None:
        return 1.0
    draft = SPEC_DRAFT_COST * spec.num_steps
    verify = SPEC_VERIFY_COST * (spec.draft_tokens - 1) * min(1.0, b / 32.0)
    return 1.0 + draft + verify


def expected_accept_length(spec: SpecConfig | None) -> float:
    """Mean tokens emitted per verify step: 1 + a + a^2 + ... + a^n."""
    if spec is None:
        return 1.0
    return accept_length(spec.alpha, spec.num_steps)


def run_offset(seed: int) -> float:
    return 1.0 + RUN_OFFSET * (2.0 * random.Random(seed * 7919 + 17).random() - 1.0)


def decode_step_time(cfg: PerfConfig, b: int) -> float:
    """Mean seconds of one decode step over ``b`` running requests (no jitter)."""
    if b <= 0:
        return 0.0
    attn = attn_mult(cfg.engine, cfg.decode_attention_backend or cfg.attention_backend)
    t = base_step(cfg.engine, b) * attn * comm_mult(cfg, b) * decode_steps_mult(cfg.decode_steps)
    if cfg.enforce_eager or b > cfg.cuda_graph_max_bs:
        t *= NO_GRAPH_MULT
    t *= spec_step_mult(cfg.spec, b)
    return t * run_offset(cfg.seed)


def prefill_time(cfg: PerfConfig, tokens: int) -> float:
    if tokens <= 0:
        return 0.0
    attn = attn_mult(cfg.engine, cfg.prefill_attention_backend or cfg.attention_backend)
    return (PREFILL_FIXED[cfg.engine] + PREFILL_PER_TOKEN[cfg.engine] * tokens) * attn * run_offset(cfg.seed)


def jitter(rng: random.Random) -> float:
    return max(0.9, min(1.1, rng.gauss(1.0, JITTER_SD)))


def content_alpha(alpha: float, repeats: int, bigrams: int) -> float:
    """Per-draft-token acceptance for a prompt with ``repeats`` of its ``bigrams`` seen earlier in it."""
    r = (repeats + SPEC_REP_FULL * SPEC_REP_PRIOR) / (bigrams + SPEC_REP_PRIOR)
    return alpha * (SPEC_ALPHA_FLOOR + (1.0 - SPEC_ALPHA_FLOOR) * min(1.0, r / SPEC_REP_FULL))


def accept_length(alpha: float, num_steps: int) -> float:
    """Mean tokens emitted per verify step at acceptance ``alpha``: 1 + a + a^2 + ... + a^n."""
    return sum(alpha**i for i in range(num_steps + 1))


def sample_accepted(spec: SpecConfig, rng: random.Random, alpha: float | None = None) -> int:
    """Draft tokens accepted in one verify step (0..num_steps), at ``alpha`` (default: the method's)."""
    a = spec.alpha if alpha is None else alpha
    n = 0
    for _ in range(spec.num_steps):
        if rng.random() < a:
            n += 1
        else:
            break
    return n


def throughput(cfg: PerfConfig, concurrency: int) -> tuple[float, float]:
    """Steady-state decode estimate: (per-stream tok/s, total tok/s) at ``concurrency``."""
    st = decode_step_time(cfg, concurrency)
    per = expected_accept_length(cfg.spec) / st
    return per, per * concurrency


@dataclass
class Estimate:
    engine: str
    label: str
    single: float
    total128: float
    extra: dict[str, float] = field(default_factory=dict)


def model_table(configs: list[tuple[str, PerfConfig]]) -> list[Estimate]:
    out = []
    for label, c in configs:
        out.append(Estimate(c.engine, label, throughput(c, 1)[0], throughput(c, 128)[1]))
    return out
