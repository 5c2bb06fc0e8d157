"""vLLM's own startup lines: one :class:`~tunedeck.logparse.rules.Rule` per line format.

A new vLLM line is one entry in :data:`STARTUP` (a key, a regex, what it means)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tunedeck.logparse.events import StatEvent
from tunedeck.logparse.patterns import VL_KV_USAGE, VL_PREFIX_HIT, VL_STATS
from tunedeck.logparse.rules import Rule, fact, phase

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser
    from tunedeck.logparse.patterns import LogLine

VL_VERSION = re.compile(r"(?:Initializing a V1 LLM engine \(v([^)]+)\)|vLLM API server version ([\w.+-]+))")
VL_NCCL = re.compile(r"vLLM is using nccl==([\w.+-]+)")
VL_LOAD_BEGIN = re.compile(r"Loading model from scratch|Starting to load model")
VL_ATTN = re.compile(
    r"Using (\S+) attention backend out of potential backends|Using AttentionBackendEnum\.(\w+) backend|"
    r"Using (\w+) backend\.?$"
)
VL_WEIGHTS_DONE = re.compile(r"Loading weights took ([\d.]+) seconds")
VL_V0_WEIGHTS = re.compile(r"Loading model weights took ([\d.]+) GB")
VL_V0_BLOCKS = re.compile(r"# (\w+) blocks: (\d+), # CPU blocks: (\d+)")
VL_MODEL_LOADED = re.compile(r"Model loading took ([\d.]+) GiB (?:memory )?and ([\d.]+) seconds")
VL_COMPILE = re.compile(
    r"Starting torch\.compile|Dynamo bytecode transform time|torch\.compile t(?:ook|akes) ([\d.]+) s in total|"
    r"Directly load the compiled graph"
)
VL_KV_MEM = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
VL_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
VL_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
VL_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
VL_SERVER = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
#: the API server has come up (old versions print the routes, not the URL)
VL_ROUTES = re.compile(r"Available routes are:|^Route: /")
#: the port in the arguments: "non-default args: {… 'port': 8001 …}", "args: Namespace(… port=8000 …)"
VL_PORT = re.compile(r"'port': (\d+)|\bport=(\d+)")
VL_READY = "Application startup complete."


def _weights_loaded(p: LogParser) -> None:
    p.weights_loaded()


def _kv_phase(p: LogParser) -> None:
    p.kv_cache()


def _nccl(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.fact("nccl_version", m.group(1))
    p.phase("distributed-init")


def _server(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.server_url(m.group(1), announced=True)


def _args(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.declare_port(int(m.group(1) or m.group(2)))


def _routes(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    p.server_up()


def _compile(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.state.compile_seen = True
    p.phase("compile", 1.0 if m.group(1) else None, done=bool(m.group(1)))


def _kv_tokens(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    tokens = int(m.group(1).replace(",", ""))
    p.fact("kv_tokens", tokens)
    p.kv_cache(tokens)
    m2 = VL_MAX_CONC.search(msg)
    if m2:
        p.fact("max_concurrency", float(m2.group(2)))


def _ready(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    if p.state.engine == "vllm" and p.own_server_line(ln):
        p.ready(ln)


STARTUP: tuple[Rule, ...] = (
    Rule("vLLM API server version", VL_VERSION, fact("engine_version")),
    Rule("V1 LLM engine", VL_VERSION, fact("engine_version")),
    Rule("vLLM is using nccl", VL_NCCL, _nccl),
    Rule("Starting vLLM", VL_SERVER, _server),
    Rule("non-default args", VL_PORT, _args),
    Rule("args: Namespace(", VL_PORT, _args),
    Rule("load model", VL_LOAD_BEGIN, phase("weight-loading")),
    Rule("from scratch", VL_LOAD_BEGIN, phase("weight-loading")),
    Rule("attention backend", VL_ATTN, fact("attention_backend"), claim=True),
    Rule("AttentionBackendEnum", VL_ATTN, fact("attention_backend"), claim=True),
    Rule("Available routes", VL_ROUTES, _routes, start=True, claim=True),
    Rule("Route: ", VL_ROUTES, _routes, start=True, claim=True),
    Rule("Loading model weights took", VL_V0_WEIGHTS, fact("weights_mem_gb", float, then=_weights_loaded), claim=True),
    Rule("blocks: ", VL_V0_BLOCKS, fact("gpu_blocks", int, group=2, then=_kv_phase), claim=True),
    Rule("Loading weights took", VL_WEIGHTS_DONE, fact("weights_seconds", float, then=_weights_loaded), claim=True),
    Rule("Model loading took", VL_MODEL_LOADED, fact("weights_mem_gb", float, then=_weights_loaded), claim=True),
    Rule("torch.compile", VL_COMPILE, _compile, claim=True),
    Rule("Dynamo bytecode", VL_COMPILE, _compile, claim=True),
    Rule("compiled graph", VL_COMPILE, _compile, claim=True),
    Rule("KV cache", VL_KV_MEM, fact("kv_mem_gib", float, then=_kv_phase)),
    Rule("KV cache", VL_KV_TOKENS, _kv_tokens),
    Rule("Maximum concurrency for", VL_MAX_CONC, fact("max_concurrency", float, group=2), claim=True),
    Rule("init engine", VL_ENGINE_INIT, fact("engine_init_seconds", float), claim=True),
    Rule(VL_READY, None, _ready, start=True),
)


def is_stat(msg: str) -> bool:
    """Whether ``msg`` is vLLM's runtime stat line (its figures unread)."""
    return VL_STATS.search(msg) is not None


def stat_event(msg: str, ln: LogLine, no: int) -> StatEvent | None:
    """vLLM's runtime stat line (``Avg prompt throughput: …``); None when ``msg`` is not one."""
    m = VL_STATS.search(msg)
    if not m:
        return None
    kv = VL_KV_USAGE.search(msg)
    hit = VL_PREFIX_HIT.search(msg)
    return StatEvent(
        "vllm",
        msg.strip(),
        ln.time,
        no,
        "engine",
        running=int(m.group(3)),
        queued=int(m.group(4)),
        prompt_throughput=float(m.group(1)),
        gen_throughput=float(m.group(2)),
        token_usage=float(kv.group(1)) / 100 if kv else None,
        prefix_hit_rate=float(hit.group(1)) / 100 if hit else None,
    )
