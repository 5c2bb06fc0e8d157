"""What the simulated server is configured to do with a level of load, and the model's figure for
its capacity at an SLO (docs/sim-model.md "Capacity at an SLO").

:func:`serve_config_of` derives, from the engine's parsed flags, everything the scheduler
(:mod:`tunedeck.sim.scheduler`) serves with: the performance model's :class:`~tunedeck.sim.perf.PerfConfig`,
the running-request cap, the prefill budget and the chunk size; the simulator itself is configured
by the same functions, so the prediction and the served behaviour cannot drift apart.

:func:`predict_level` applies the performance model's equations to one closed-loop benchmark level
(C concurrent users, every request ``input_len`` prompt tokens and exactly ``output_len`` output
tokens) and gives the statistics a level summary carries, under the summary's own keys, so that
:func:`tunedeck.ab.capacity.slo_check` judges a prediction exactly as it judges a measurement.
:func:`predicted_capacity` is the highest C whose prediction meets the SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tunedeck.ab.capacity import SloTerm, slo_check
from tunedeck.sim import perf
from tunedeck.sim.engine_args import SGLANG_ALIASES
from tunedeck.sim.sglang_args import sglang_parser
from tunedeck.sim.vllm_args import preprocess_vllm_argv, vllm_parser

#: SLO terms the model judges beside the latencies: requests all succeed and every level is whole
_WHOLE_LEVEL = {"completed": 1, "failed": 0, "partial": False}

#: SGLang's --chunked-prefill-size when not given (its choice for a GPU of H200's memory)
SGLANG_CHUNK = 8192
#: SGLang's --max-running-requests when not given (48 under speculative decoding, as SGLang resets it)
SGLANG_MAX_RUNNING, SGLANG_MAX_RUNNING_SPEC = 2048, 48
#: SGLang's --max-prefill-tokens, vLLM's --max-num-seqs and --max-num-batched-tokens when not given
SGLANG_PREFILL_BUDGET, VLLM_MAX_SEQS, VLLM_BATCHED_TOKENS = 16384, 1024, 8192
#: the standard normal's 90th percentile (the step jitter's share of ITL p90)
Z90 = 1.2816


@dataclass(frozen=True)
class ServeConfig:
    """How the simulated server serves: the step-time model and the scheduler's limits."""

    perf: perf.PerfConfig
    #: requests decoded at once (SGLang --max-running-requests, vLLM --max-num-seqs); more wait
    max_running: int
    #: prompt tokens per prefill batch (SGLang --max-prefill-tokens) or per step (vLLM
    #: --max-num-batched-tokens)
    prefill_budget: int
    #: prompt tokens per chunk (SGLang --chunked-prefill-size; vLLM: the step budget); None: prompts
    #: are not split
    chunk_size: int | None

    @property
    def engine(self) -> str:
        return self.perf.engine


# ---------------------------------------------------------------- from the engine's flags


def spec_config(engine: str, args: Any) -> perf.SpecConfig | None:
    """The speculative decoding the flags ask for (None: off)."""
    if engine == "sglang":
        if not args.speculative_algorithm:
            return None
        steps = args.speculative_num_steps or 3
        topk = args.speculative_eagle_topk or 1
        draft = args.speculative_num_draft_tokens or (steps + 1 if topk == 1 else steps * topk)
        if topk == 1:
            draft = steps + 1
        return perf.SpecConfig(args.speculative_algorithm.upper(), steps, topk, draft)
    sc = args.speculative_config
    if not sc:
        return None
    method = str(sc.get("method") or ("draft_model" if sc.get("model") else "ngram"))
    n = int(sc.get("num_speculative_tokens") or 1)
    return perf.SpecConfig(method.upper(), n, 1, n + 1)


def perf_config(
    engine: str, args: Any, tp: int, spec: perf.SpecConfig | None, env: Mapping[str, str]
) -> perf.PerfConfig:
    """The performance model's configuration for the flags, ``tp`` ranks and the NCCL variables of ``env``."""
    nccl = perf.PerfConfig.nccl_from_env(env)
    if engine == "sglang":
        attn = args.attention_backend
        attn = SGLANG_ALIASES.get(attn, attn) if attn else None
        max_bs = args.cuda_graph_max_bs_decode or perf.CUDA_GRAPH_MAX_BS
        eager = args.disable_cuda_graph or args.cuda_graph_backend_decode == "disabled"
        return perf.PerfConfig(
            "sglang",
            tp,
            attn,
            args.decode_attention_backend,
            args.prefill_attention_backend,
            max(1, args.num_continuous_decode_steps),
            args.disable_custom_all_reduce,
            nccl,
            spec,
            max_bs,
            eager,
            args.sim_seed,
        )
    attn = (args.attention_backend or "").upper() or None
    if attn is None and args.attention_config and args.attention_config.get("backend"):
        attn = str(args.attention_config["backend"]).upper()
    cc = args.compilation_config or {}
    eager = args.enforce_eager or str(cc.get("cudagraph_mode", "")).upper() == "NONE"
    max_bs = args.max_cudagraph_capture_size or perf.CUDA_GRAPH_MAX_BS
    return perf.PerfConfig(
        "vllm", tp, attn, None, None, 1, args.disable_custom_all_reduce, nccl, spec, max_bs, eager, args.sim_seed
    )


def serve_config_of(engine: str, args: Any, tp: int, env: Mapping[str, str]) -> ServeConfig:
    """Everything the scheduler serves with, from the engine's parsed flags (the simulator's own
    configuration: :func:`tunedeck.sim.state.sim_config` calls this)."""
    spec = spec_config(engine, args)
    pc = perf_config(engine, args, tp, spec, env)
    if engine == "sglang":
        max_running = args.max_running_requests or (SGLANG_MAX_RUNNING_SPEC if spec else SGLANG_MAX_RUNNING)
        budget = args.max_prefill_tokens or SGLANG_PREFILL_BUDGET
        chunk = args.chunked_prefill_size if args.chunked_prefill_size is not None else SGLANG_CHUNK
        return ServeConfig(pc, max_running, budget, chunk if chunk > 0 else None)
    budget = args.max_num_batched_tokens or VLLM_BATCHED_TOKENS
    return ServeConfig(pc, args.max_num_seqs or VLLM_MAX_SEQS, budget, budget)


def serve_config(engine: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeConfig:
    """:func:`serve_config_of` for an engine command line as ``tunedeck sim ENGINE`` takes it
    (SGLang: ``--model-path M [flags]``; vLLM: ``[serve] M [flags]``) and the server's environment
    (its NCCL variables; default none). The engine's argparse errors exit as the engine's do."""
    argv = list(argv)
    if engine == "vllm":
        args = vllm_parser().parse_args(preprocess_vllm_argv(argv))
        tp = max(1, args.tensor_parallel_size) * max(1, args.pipeline_parallel_size) * max(1, args.data_parallel_size)
    elif engine == "sglang":
        args = sglang_parser().parse_args(argv[1:] if argv[:1] == ["serve"] else argv)
        tp = max(1, args.tp_size) * max(1, args.pp_size)
    else:
        raise ValueError(f"engine {engine!r}: expected sglang or vllm")
    return serve_config_of(engine, args, tp, dict(env) if env is not None else {})


# ---------------------------------------------------------------- one closed-loop level


def cycle_prefill(sc: ServeConfig, tokens: int) -> float:
    """Seconds of prefill for ``tokens`` prompt tokens arriving together: one prefill per chunk of
    at most the prefill budget (and chunk size), each ``fixed + per_token x tokens``."""
    room = sc.prefill_budget if sc.chunk_size is None else min(sc.prefill_budget, sc.chunk_size)
    room = max(1, room)
    full, rest = divmod(tokens, room)
    t = full * perf.prefill_time(sc.perf, room)
    return t + perf.prefill_time(sc.perf, rest)


def predict_level(
    sc: ServeConfig, input_len: int, output_len: int, concurrency: int, num_prompts: int | None = None
) -> dict[str, float]:
    """The model's figures for one closed-loop level, under the level summary's keys (ms, tok/s).

    ``b = min(C, max_running)`` requests decode together; equal lengths keep them in step, so a
    *cycle* is the prefill ``P`` of the ``b`` prompts (:func:`cycle_prefill`) then
    ``(output_len - 1) / A`` decode steps of ``d(b)`` (``A``: tokens per step, 1 without
    speculative decoding). TTFT is ``P`` (vLLM: ``P + d(b)``, the first token comes out of a
    step). TPOT is ``d(b) / A + P / (output_len - 1)``: a request whose first token came early
    waits through the prefill of the cycle's later prompts. Above the cap, the ``C - b`` requests
    that wait in the queue get their first token one cycle later: a share ``(C - b) / b`` of the
    requests (all of them from ``C >= 2b``), and a percentile whose share is smaller than that
    takes the long TTFT. ITL p90 is ``d(b)`` with the step jitter's 90th percentile, p99 includes
    one prefill while a request has at most 100 gaps. E2EL = TTFT + (output_len - 1) x TPOT. The
    level's ``num_prompts`` requests (default the benchmark's, ``max(5 x C, 10)``) take
    ``ceil(num_prompts / b)`` cycles: output throughput ``num_prompts x output_len / (cycles x cycle)``,
    and per user that divided by C.
    """
    if concurrency < 1 or input_len < 1 or output_len < 1:
        raise ValueError(
            f"predict_level: concurrency, input_len and output_len must be >= 1, got {concurrency}, {input_len}, {output_len}"
        )
    pc = sc.perf
    b = min(concurrency, sc.max_running)
    step = perf.decode_step_time(pc, b)
    tokens_per_step = perf.expected_accept_length(pc.spec)
    gaps = output_len - 1
    prefill = cycle_prefill(sc, b * input_len)
    ttft = prefill + (step if sc.engine == "vllm" else 0.0)
    decode = gaps / tokens_per_step * step
    cycle = ttft + decode
    tpot = step / tokens_per_step + (prefill / gaps if gaps else 0.0)
    queued = concurrency - b
    share_long = min(1.0, queued / b) if queued > 0 else 0.0
    waits = math.ceil(queued / b) if queued > 0 else 0
    ttft_long = ttft + waits * cycle
    out: dict[str, float] = {}
    for p, word in ((50.0, "median"), (90.0, "p90"), (99.0, "p99")):
        t = ttft_long if share_long > 1.0 - p / 100.0 else ttft
        out[f"{word}_ttft_ms"] = t * 1000.0
        out[f"{word}_tpot_ms"] = tpot * 1000.0
        out[f"{word}_e2el_ms"] = (t + gaps * tpot) * 1000.0
    out["median_itl_ms"] = step * 1000.0
    out["p90_itl_ms"] = step * (1.0 + Z90 * perf.JITTER_SD) * 1000.0
    out["p99_itl_ms"] = (step + (prefill if 0 < gaps <= 100 else 0.0)) * 1000.0
    n = num_prompts if num_prompts is not None else max(5 * concurrency, 10)
    out["output_throughput"] = n * output_len / (math.ceil(n / b) * cycle)
    out["per_user_output_throughput"] = out["output_throughput"] / concurrency
    return out


def predicted_capacity(
    sc: ServeConfig,
    slo: Sequence[SloTerm],
    *,
    input_len: int,
    output_len: int,
    max_concurrency: int = 1024,
) -> int:
    """The highest concurrency (at most ``max_concurrency``) up to which every level's prediction
    meets ``slo`` (0: not even C = 1)."""
    cap = 0
    for c in range(1, max_concurrency + 1):
        met, _ = slo_check({**_WHOLE_LEVEL, **predict_level(sc, input_len, output_len, c)}, slo)
        if not met:
            break
        cap = c
    return cap


def predicted_single_user_tok_s(sc: ServeConfig, *, input_len: int, output_len: int) -> float:
    """The model's per-user output tok/s at C = 1 (what :class:`tunedeck.ab.capacity.CapacityResult`
    calls ``single_user_tok_s``)."""
    return predict_level(sc, input_len, output_len, 1)["per_user_output_throughput"]
