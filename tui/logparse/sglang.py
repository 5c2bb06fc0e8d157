"""SGLang's own startup lines: one :class:`~tunedeck.logparse.rules.Rule` per line format.

A new SGLang line is one entry in :data:`STARTUP` (a key, a regex, what it means)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tunedeck.logparse.events import StatEvent
from tunedeck.logparse.patterns import SG_STAT_FIELDS
from tunedeck.logparse.rules import Rule, facts_found, phase

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser
    from tunedeck.logparse.patterns import LogLine

SG_INIT = re.compile(r"Init (?:parallel|torch distributed) (begin|ends)\.")
SG_WEIGHTS_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
SG_WEIGHTS_END = re.compile(r"Load weight end\.(?: .*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB)?")
SG_KV = re.compile(
    r"KV Cache is allocated\. (?:dtype: [\w.]+, )?(?:#tokens: (\d+), )?"
    r"(?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)"
)
SG_MEM_POOL_END = re.compile(r"^Memory pool end\.(?: avail mem=([\d.]+) GB)?")
#: old and new forms: the fields come and go between versions, so each is read alone
SG_LIMITS = re.compile(r"max_total_num_tokens=(\d+)")
SG_MAX_RUNNING = re.compile(r"max_running_requests=(\d+)")
SG_CONTEXT_LEN = re.compile(r"context_len=(\d+)")
SG_READY = "The server is fired up and ready to roll!"
SG_ATTN = re.compile(r"attention_backend='(\w+)'")
SG_MODEL = re.compile(r"model_path='([^']+)'")
SG_PORT = re.compile(r"\bport=(\d+)")


def _server_args(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    facts_found(p, msg, str, ("attention_backend", SG_ATTN), ("model", SG_MODEL))
    m2 = SG_PORT.search(msg)
    if m2:
        p.declare_port(int(m2.group(1)))


def _weights_end(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    p.weights_loaded()
    if m is not None and m.group(2):
        p.fact("weights_mem_gb", float(m.group(2)))


def _kv(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    p.kv_cache()
    if m is None:
        return
    st = p.state
    if m.group(1):
        p.fact("kv_tokens", int(m.group(1)))
        st.kv_tokens = st.facts["kv_tokens"]  # type: ignore[assignment]
    size = float(m.group(2)) if m.group(2) else float(m.group(3)) + float(m.group(4))
    p.fact("kv_size_gb", size)


def _kv_claim(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    _kv(p, None, msg, ln)


def _limits(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.fact("max_total_num_tokens", int(m.group(1)))
    facts_found(p, msg, int, ("max_running_requests", SG_MAX_RUNNING), ("context_len", SG_CONTEXT_LEN))
    p.kv_cache(int(m.group(1)))


def _mem_pool_end(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    assert m is not None
    p.kv_cache()
    if m.group(1):
        p.fact("avail_mem_gb", float(m.group(1)))


def _ready(p: LogParser, m: re.Match[str] | None, msg: str, ln: LogLine) -> None:
    p.ready(ln)


STARTUP: tuple[Rule, ...] = (
    Rule("server_args=", None, _server_args),
    Rule("Init ", SG_INIT, phase("distributed-init")),
    Rule("Load weight begin", SG_WEIGHTS_BEGIN, phase("weight-loading"), start=True, claim=True),
    Rule("Load weight end", SG_WEIGHTS_END, _weights_end, start=True, claim=True),
    Rule("KV Cache is allocated", SG_KV, _kv),
    Rule("KV Cache is allocated", None, _kv_claim),
    Rule("max_total_num_tokens=", SG_LIMITS, _limits, claim=True),
    Rule("Memory pool end", SG_MEM_POOL_END, _mem_pool_end, start=True, claim=True),
    Rule(SG_READY, None, _ready, start=True),
)


def stat_event(msg: str, ln: LogLine, no: int) -> StatEvent:
    """SGLang's runtime stat line (``Decode batch`` / ``Prefill batch``, the caller has seen which)."""
    vals: dict[str, float | int | None] = {}
    for name, rx in SG_STAT_FIELDS.items():
        m = rx.search(msg)
        if m:
            g = next(x for x in m.groups() if x is not None)
            vals[name] = int(g) if name in ("running", "queued") else float(g)
    kind = "decode" if "Decode batch" in msg else "prefill"
    return StatEvent("sglang", msg.strip(), ln.time, no, kind, **vals)  # type: ignore[arg-type]
