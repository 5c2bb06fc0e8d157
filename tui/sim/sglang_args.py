"""SGLang 0.5.23's ``launch_server`` flags as the simulator declares them: the ones it models,
one row each with its type, default and help (:data:`MODELED`); the rest of the release's flags are
accepted by :func:`tunedeck.sim.engine_args.accept_rest` (see :mod:`tunedeck.sim.engine_args`)."""

from __future__ import annotations

import argparse
from typing import Any

from tunedeck.engines import SGLANG_SPEC_ALGORITHMS, SGLANG_VERSION, release_flags
from tunedeck.sim.engine_args import Modeled, accept_rest, add_modeled, add_sim_args

#: the flags the simulator models, in --help order: option, type (``bool``: a switch), default, help
MODELED: tuple[Modeled, ...] = (
    ("--model-path", str, None, "The path of the model weights. This can be a local folder or a Hugging Face repo ID."),
    ("--tokenizer-path", str, None, "The path of the tokenizer."),
    ("--tokenizer-mode", str, "auto", "Tokenizer mode."),
    ("--tokenizer-worker-num", int, 1, "The worker num of the tokenizer manager."),
    ("--skip-tokenizer-init", bool, False, "If set, skip init tokenizer and pass input_ids in generate request."),
    ("--load-format", str, "auto", "The format of the model weights to load."),
    ("--trust-remote-code", bool, False, "Whether or not to allow for custom models defined on the Hub."),
    ("--context-length", int, None, "The model's maximum context length."),
    ("--dtype", str, "auto", "Data type for model weights and activations."),
    ("--quantization", str, None, "The quantization method."),
    ("--kv-cache-dtype", str, "auto", "Data type for kv cache storage."),
    ("--served-model-name", str, None, "Override the model name returned by the v1/models endpoint."),
    ("--chat-template", str, None, "The builtin chat template name or the path of the chat template file."),
    ("--revision", str, None, "The specific model version to use."),
    ("--host", str, "127.0.0.1", "The host of the HTTP server."),
    ("--port", int, 30000, "The port of the HTTP server."),
    ("--skip-server-warmup", bool, False, "If set, skip warmup."),
    ("--warmups", str, None, "Warmup configurations to run before the server is ready."),
    ("--nccl-port", int, None, "The port for NCCL distributed environment setup."),
    (
        "--mem-fraction-static",
        float,
        None,
        "The fraction of the memory used for static allocation (model weights and KV cache memory pool).",
    ),
    ("--max-running-requests", int, None, "The maximum number of running requests."),
    ("--max-queued-requests", int, None, "The maximum number of queued requests."),
    ("--max-total-tokens", int, None, "The maximum number of tokens in the memory pool."),
    (
        "--chunked-prefill-size",
        int,
        None,
        "The maximum number of tokens in a chunk for the chunked prefill. -1 disables it.",
    ),
    ("--max-prefill-tokens", int, 16384, "The maximum number of tokens in a prefill batch."),
    ("--schedule-policy", str, "fcfs", "The scheduling policy of the requests."),
    ("--schedule-conservativeness", float, 1.0, "How conservative the schedule policy is."),
    ("--page-size", int, None, "The number of tokens in a page."),
    ("--num-continuous-decode-steps", int, 1, "Run multiple continuous decoding steps to reduce scheduling overhead."),
    ("--tp-size", int, 1, "The tensor parallelism size."),
    ("--dp-size", int, 1, "The data parallelism size."),
    ("--attn-dp-size", int, 1, "The attention data parallelism size."),
    ("--pp-size", int, 1, "The pipeline parallelism size."),
    ("--ep-size", int, 1, "The expert parallelism size."),
    ("--nnodes", int, 1, "The number of nodes."),
    ("--node-rank", int, 0, "The node rank."),
    ("--dist-init-addr", str, None, "The host address for initializing distributed backend."),
    ("--dist-timeout", int, None, "Set timeout for torch.distributed initialization."),
    ("--base-gpu-id", int, 0, "The base GPU ID to start allocating GPUs from."),
    ("--gpu-id-step", int, 1, "The delta between consecutive GPU IDs that are used."),
    ("--random-seed", int, None, "The random seed."),
    ("--stream-interval", int, 1, "The interval (or buffer size) for streaming in terms of the token length."),
    ("--watchdog-timeout", float, 300, "Set watchdog timeout in seconds."),
    ("--download-dir", str, None, "Model download directory for huggingface."),
    ("--log-level", str, "info", "The logging level of all loggers."),
    ("--log-level-http", str, None, "The logging level of HTTP server."),
    ("--log-requests", bool, False, "Log metadata, inputs, outputs of all requests."),
    ("--show-time-cost", bool, False, "Show time cost of custom marks."),
    ("--enable-metrics", bool, False, "Enable log prometheus metrics."),
    ("--enable-metrics-for-all-schedulers", bool, False, "Enable metrics for all schedulers."),
    ("--decode-log-interval", int, 40, "The log interval of decode batch."),
    ("--enable-cache-report", bool, False, "Return number of cached tokens in usage.prompt_tokens_details."),
    ("--api-key", str, None, "Set API key of the server."),
    (
        "--stream-response-default-include-usage",
        bool,
        False,
        "Include usage in the final streaming chunk even if the request did not ask for it.",
    ),
    ("--incremental-streaming-output", bool, False, "Stream deltas from /generate instead of cumulative text."),
    ("--reasoning-parser", str, None, "Specify the parser for reasoning models."),
    ("--tool-call-parser", str, None, "Specify the parser for handling tool-call interactions."),
    ("--attention-backend", str, None, "Choose the kernels for attention layers."),
    (
        "--prefill-attention-backend",
        str,
        None,
        "Choose the kernels for prefill attention layers (have priority over --attention-backend).",
    ),
    (
        "--decode-attention-backend",
        str,
        None,
        "Choose the kernels for decode attention layers (have priority over --attention-backend).",
    ),
    ("--sampling-backend", str, None, "Choose the kernels for sampling layers."),
    ("--grammar-backend", str, None, "Choose the backend for grammar-guided decoding."),
    ("--mm-attention-backend", str, None, "Set multimodal attention backend."),
    ("--speculative-algorithm", str, None, "Speculative algorithm."),
    ("--speculative-draft-model-path", str, None, "The path of the draft model weights."),
    ("--speculative-num-steps", int, None, "The number of steps sampled from draft model in Speculative Decoding."),
    ("--speculative-eagle-topk", int, None, "The number of tokens sampled from the draft model in eagle2 each step."),
    (
        "--speculative-num-draft-tokens",
        int,
        None,
        "The number of tokens sampled from the draft model in Speculative Decoding.",
    ),
    (
        "--speculative-accept-threshold-single",
        float,
        1.0,
        "Accept a draft token if its probability in the target model is greater than this threshold.",
    ),
    (
        "--speculative-attention-mode",
        str,
        "prefill",
        "Attention backend for speculative decoding operations (both target verify and draft extend).",
    ),
    ("--speculative-draft-attention-backend", str, None, "Attention backend for the draft model."),
    ("--speculative-token-map", str, None, "The path of the draft model's small vocab table."),
    (
        "--cpu-offload-gb",
        int,
        0,
        "How many GBs of RAM to reserve for CPU offloading: those weights leave each GPU's memory.",
    ),
    ("--disable-radix-cache", bool, False, "Disable RadixAttention for prefix caching."),
    ("--cuda-graph-max-bs-decode", int, None, "Set the maximum batch size for decode cuda graph."),
    ("--cuda-graph-max-bs-prefill", int, None, "Set the maximum number of tokens for prefill cuda graph."),
    ("--cuda-graph-backend-decode", str, "full", "CUDA graph backend for decode."),
    ("--cuda-graph-backend-prefill", str, "disabled", "CUDA graph backend for prefill."),
    ("--disable-cuda-graph", bool, False, "Disable cuda graph (deprecated: use --cuda-graph-backend-decode=disabled)."),
    ("--disable-cuda-graph-padding", bool, False, "Disable cuda graph when padding is needed."),
    ("--enable-torch-compile", bool, False, "Optimize the model with torch.compile."),
    ("--torch-compile-max-bs", int, 32, "Set the maximum batch size when using torch compile."),
    ("--disable-custom-all-reduce", bool, False, "Disable the custom all-reduce kernel and fall back to NCCL."),
    ("--enable-nccl-nvls", bool, False, "Enable NCCL NVLS for prefill heavy requests when available."),
    ("--enable-symm-mem", bool, False, "Enable NCCL symmetric memory for fast collectives."),
    ("--enable-dp-attention", bool, False, "Enable data parallelism for attention (deprecated: use --attn-dp-size)."),
    ("--enable-mixed-chunk", bool, False, "Enabling mixing prefill and decode in a batch when using chunked prefill."),
    ("--disable-overlap-schedule", bool, False, "Disable the overlap scheduler."),
    ("--enable-two-batch-overlap", bool, False, "Enabling two micro batches to overlap."),
    ("--moe-runner-backend", str, "auto", "Choose the runner backend for MoE."),
    ("--enable-hierarchical-cache", bool, False, "Enable hierarchical cache."),
    ("--enable-deterministic-inference", bool, False, "Enable deterministic inference mode."),
)

#: what a few of them add to their row
MORE: dict[str, dict[str, Any]] = {
    "--model-path": {"required": True},
    "--speculative-algorithm": {"sim_choices": SGLANG_SPEC_ALGORITHMS},
}


def sglang_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py")
    p.add_argument("--version", action="version", version=SGLANG_VERSION)
    table = release_flags("sglang")
    add_modeled(p, table, MODELED, MORE)
    accept_rest(p, table)
    add_sim_args(p, "sglang")
    return p
