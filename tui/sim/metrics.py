"""Prometheus text exposition with the engines' real metric names, types and labels.

SGLang runs prometheus_client in multiprocess mode (no ``_created`` samples);
vLLM does not (counters and histograms also carry ``_created``). Labels are
printed sorted, as the engines' output shows (``{engine="0",le="0.5",model_name="m"}``).
"""

from __future__ import annotations

import bisect
import time
from typing import Iterable, Sequence

# The engines' histogram buckets (upper bounds), as their metrics code declares them: one table each.
SG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SG_ITL = [
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
]  # fmt: skip
SG_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800]
SG_QUEUE = [
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100,
    200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
]  # fmt: skip
VL_TTFT = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
#: vLLM gives its inter-token latency and time per output token histograms the same buckets
VL_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
VL_TPOT = VL_ITL
VL_LAT = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip
VL_ITER = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def _labels(d: dict[str, str]) -> str:
    if not d:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


def _num(v: float) -> str:
    return repr(float(v))


class Histogram:
    __slots__ = ("buckets", "count", "counts", "created", "sum")

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = list(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.count = 0
        self.created = time.time()

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, v)] += 1
        self.sum += v
        self.count += 1

    def lines(self, name: str, labels: dict[str, str], created: bool) -> Iterable[str]:
        acc = 0
        for b, c in zip(self.buckets, self.counts):
            acc += c
            yield f"{name}_bucket{_labels({**labels, 'le': _num(b)})} {_num(acc)}"
        yield f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {_num(self.count)}"
        yield f"{name}_count{_labels(labels)} {_num(self.count)}"
        yield f"{name}_sum{_labels(labels)} {_num(self.sum)}"
        if created:
            yield f"{name}_created{_labels(labels)} {_num(self.created)}"


class _Exposition:
    """One /metrics text: ``prefix:``-named families, the ``base`` labels on every sample; with
    ``created`` (a time) counters and histograms also carry ``_created`` samples (vLLM's)."""

    def __init__(self, prefix: str, base: dict[str, str], created: float | None) -> None:
        self.prefix = prefix
        self.base = base
        self.created = created
        self.out: list[str] = []

    def head(self, name: str, help_: str, kind: str) -> None:
        self.out.append(f"# HELP {self.prefix}:{name} {help_}")
        self.out.append(f"# TYPE {self.prefix}:{name} {kind}")

    def sample(self, name: str, value: float, extra: dict[str, str] | None = None) -> None:
        self.out.append(f"{self.prefix}:{name}{_labels({**self.base, **(extra or {})})} {_num(value)}")

    def gauge(self, name: str, help_: str, value: float, extra: dict[str, str] | None = None) -> None:
        self.head(name, help_, "gauge")
        self.sample(name, value, extra)

    def counter(self, name: str, help_: str, values: float | list[tuple[dict[str, str], float]]) -> None:
        """One counter family: a value, or (extra labels, value) pairs."""
        pairs = values if isinstance(values, list) else [({}, values)]
        self.head(f"{name}_total", help_, "counter")
        for extra, v in pairs:
            self.sample(f"{name}_total", v, extra)
        if self.created is not None:
            for extra, _v in pairs:
                self.sample(f"{name}_created", self.created, extra)

    def hist(self, name: str, help_: str, h: Histogram) -> None:
        self.head(name, help_, "histogram")
        self.out.extend(h.lines(f"{self.prefix}:{name}", self.base, created=self.created is not None))

    def text(self) -> str:
        return "\n".join(self.out) + "\n"


class Metrics:
    """Counters the engine updates while serving; ``render()`` gives the /metrics text."""

    def __init__(self, engine: str, model: str, *, tp: int = 1, spec_positions: int = 0) -> None:
        self.engine = engine
        self.model = model
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests = 0
        self.aborted = 0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.preemptions = 0
        #: prefix cache: prompt tokens looked up and found (vLLM's queries/hits, SGLang's cached tokens)
        self.prefix_queries = 0
        self.prefix_hits = 0
        #: SGLang's gauge: cached / (cached + new) tokens of the latest prefill batch
        self.cache_hit_rate = 0.0
        self.prefix_caching = True
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.spec_per_pos = [0] * spec_positions
        #: SGLang: verify steps of finished requests (``sglang:spec_verify_calls_total``)
        self.spec_verify_calls = 0
        sg = engine == "sglang"
        self.ttft = Histogram(SG_TTFT if sg else VL_TTFT)
        self.itl = Histogram(SG_ITL if sg else VL_ITL)
        self.tpot = Histogram(SG_ITL if sg else VL_TPOT)
        self.e2e = Histogram(SG_E2E if sg else VL_LAT)
        self.queue = Histogram(SG_QUEUE if sg else VL_LAT)
        self.prefill = Histogram(VL_LAT)
        self.decode = Histogram(VL_LAT)
        self.iteration = Histogram(VL_ITER)
        # gauges (set by the engine)
        self.running = 0
        self.waiting = 0
        self.token_usage = 0.0
        self.used_tokens = 0
        self.max_total_tokens = 0
        self.gen_throughput = 0.0
        self.spec_accept_length = 0.0
        self.spec_accept_rate = 0.0
        self.spec_num_steps = 0
        self.spec_num_draft_tokens = 0
        self.kv_cache_gb = 0.0
        self.startup: dict[str, float] = {}
        self.block_size = 16
        self.gpu_memory_utilization = 0.92

    # ------------------------------------------------------------ render
    def render(self) -> str:
        return self._render_sglang() if self.engine == "sglang" else self._render_vllm()

    def _render_sglang(self) -> str:
        base = {"model_name": self.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        x = _Exposition("sglang", base, None)
        x.gauge("num_running_reqs", "The number of running requests.", self.running)
        x.gauge("num_used_tokens", "The number of used tokens.", self.used_tokens)
        x.gauge("token_usage", "The token usage.", self.token_usage)
        x.gauge("gen_throughput", "The generation throughput (token/s).", self.gen_throughput)
        x.gauge("num_queue_reqs", "The number of requests in the waiting queue.", self.waiting)
        x.gauge("cache_hit_rate", "The prefix cache hit rate.", self.cache_hit_rate)
        x.gauge("spec_accept_length", "The average acceptance length of speculative decoding.", self.spec_accept_length)
        x.gauge("spec_accept_rate", "The average acceptance rate of speculative decoding.", self.spec_accept_rate)
        x.gauge("spec_num_steps", "Currently active speculative_num_steps.", self.spec_num_steps)
        x.gauge("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens.", self.spec_num_draft_tokens)
        x.gauge("num_retracted_reqs", "The number of retracted requests.", 0)
        x.gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", self.max_total_tokens)
        x.gauge("kv_cache_memory_usage_gb", "The KV cache memory usage in GB.", self.kv_cache_gb)
        x.head("startup_time_seconds", "Startup time of each phase in seconds.", "gauge")
        for phase, v in self.startup.items():
            x.sample("startup_time_seconds", v, {"phase": phase})
        x.counter("prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens)
        x.counter("generation_tokens", "Number of generation tokens processed.", self.generation_tokens)
        x.counter("cached_tokens", "Number of cached prompt tokens.", self.prefix_hits)
        x.counter("num_requests", "Number of requests processed.", self.requests)
        x.counter("num_aborted_requests", "Number of requests aborted.", self.aborted)
        if self.spec_verify_calls:  # a labelled counter: exported from its first increment on
            x.counter("spec_verify_calls", "Number of speculative decoding verification calls.", self.spec_verify_calls)
        x.hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
        x.hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
        x.hist("request_time_per_output_token_seconds", "Histogram of time per output token in seconds.", self.tpot)
        x.hist("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", self.e2e)
        x.hist("queue_time_seconds", "Histogram of queueing time in seconds.", self.queue)
        return x.text()

    def _render_vllm(self) -> str:
        x = _Exposition("vllm", {"model_name": self.model, "engine": "0"}, self.created)
        x.gauge("num_requests_running", "Number of requests in model execution batches.", self.running)
        x.gauge("num_requests_waiting", "Number of requests waiting to be processed.", self.waiting)
        x.gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.token_usage)
        info = {
            "block_size": str(self.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(self.prefix_caching),
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "num_gpu_blocks": str(self.max_total_tokens // self.block_size),
        }
        x.gauge("cache_config_info", "Information of the LLMEngine CacheConfig", 1, info)
        x.counter("num_preemptions", "Cumulative number of preemption from the engine.", self.preemptions)
        x.counter("prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens)
        x.counter("generation_tokens", "Number of generation tokens processed.", self.generation_tokens)
        x.counter(
            "request_success",
            "Count of successfully processed requests.",
            [({"finished_reason": r}, float(self.finished.get(r, 0))) for r in ("stop", "length", "abort")],
        )
        x.counter(
            "prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", self.prefix_queries
        )
        x.counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", self.prefix_hits)
        if self.spec_per_pos:
            x.counter("spec_decode_num_drafts", "Number of spec decoding drafts.", self.spec_drafts)
            x.counter("spec_decode_num_draft_tokens", "Number of draft tokens.", self.spec_draft_tokens)
            x.counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", self.spec_accepted)
            x.counter(
                "spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [({"position": str(i)}, float(v)) for i, v in enumerate(self.spec_per_pos)],
            )
        x.hist("iteration_tokens_total", "Histogram of number of tokens per engine_step.", self.iteration)
        x.hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
        x.hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl)
        x.hist(
            "request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            self.tpot,
        )
        x.hist("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e)
        x.hist("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", self.queue)
        x.hist("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", self.prefill)
        x.hist("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", self.decode)
        return x.text()
