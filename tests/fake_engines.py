"""A tiny SGLang/vLLM look-alike HTTP server on loopback (aiohttp) for collector tests.

``async with FakeEngine("vllm") as e:`` serves ``/health``, ``/v1/models`` and
``/metrics`` on ``e.port``; change ``e.health``, ``e.metrics`` (None -> 404),
``e.health_delay`` between samples.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 12.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 0.42
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 1234.5
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 0.71
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0",moe_ep_rank="0"} 50000.0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="Qwen/Qwen3-8B",tp_rank="0"} {b1}
sglang:time_to_first_token_seconds_bucket{le="0.25",model_name="Qwen/Qwen3-8B",tp_rank="0"} {b2}
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="Qwen/Qwen3-8B",tp_rank="0"} {b3}
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="Qwen/Qwen3-8B",tp_rank="0"} {b3}
sglang:time_to_first_token_seconds_sum{model_name="Qwen/Qwen3-8B",tp_rank="0"} {s}
sglang:time_to_first_token_seconds_count{model_name="Qwen/Qwen3-8B",tp_rank="0"} {b3}
"""

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.25
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} {gen}
vllm:generation_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} {draft}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} {acc}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B"} {b1}
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B"} {b2}
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B"} {b3}
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B"} {b3}
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B"} {s}
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B"} {b3}
"""


def fill(template: str, **values: float) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", repr(float(v)))
    return out


class FakeEngine:
    def __init__(self, engine: str, model: str = "test-model") -> None:
        self.engine = engine
        self.model = model
        self.health = 200
        self.health_delay = 0.0
        self.metrics: str | None = ""
        self.port = 0
        self.hits: dict[str, int] = {}
        self._runner: web.AppRunner | None = None

    async def _health(self, request: web.Request) -> web.Response:
        self.hits["/health"] = self.hits.get("/health", 0) + 1
        if self.health_delay:
            await asyncio.sleep(self.health_delay)
        return web.Response(status=self.health, text="" if self.health == 200 else "starting")

    async def _models(self, request: web.Request) -> web.Response:
        self.hits["/v1/models"] = self.hits.get("/v1/models", 0) + 1
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "root": self.model}]}
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        self.hits["/metrics"] = self.hits.get("/metrics", 0) + 1
        if self.metrics is None:
            return web.Response(status=404, text='{"detail":"Not Found"}')
        return web.Response(text=self.metrics, content_type="text/plain")

    async def __aenter__(self) -> "FakeEngine":
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
