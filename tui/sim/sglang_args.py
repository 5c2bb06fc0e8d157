"""SGLang 0.5.23's ``launch_server`` flags as the simulator declares them: the ones it models,
with their types, defaults and help; the rest of the release's flags are accepted by
:func:`tunedeck.sim.engine_args.accept_rest` (see :mod:`tunedeck.sim.engine_args`)."""

from __future__ import annotations

import argparse

from tunedeck.engines import SGLANG_SPEC_ALGORITHMS, SGLANG_VERSION, release_flags
from tunedeck.sim.engine_args import accept_rest, add_sim_args, modeled


def sglang_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch_server.py")
    p.add_argument("--version", action="version", version=SGLANG_VERSION)
    table = release_flags("sglang")
    a = modeled(p, table)
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
    accept_rest(p, table)
    add_sim_args(p, "sglang")
    return p
