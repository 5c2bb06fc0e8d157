"""The server's own counters over one benchmark level: prefix cache hits and speculative acceptance.

The server's ``/metrics`` is read just before a level's timed phase and just
after it; the figures are the differences of the counters (lifetime values mix
in earlier traffic). The engines' names (docs/workloads.md, serving-engines.md):

* vLLM: ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``
  (tokens; hit rate = Δhits / Δqueries); ``vllm:spec_decode_num_drafts_total``,
  ``…_num_draft_tokens_total``, ``…_num_accepted_tokens_total``,
  ``…_num_accepted_tokens_per_pos_total{position}`` (acceptance rate =
  Δaccepted / Δdraft tokens × 100 in %, acceptance length = 1 + Δaccepted / Δdrafts,
  per position = Δaccepted at that position / Δdrafts, 0-1), like ``vllm bench serve``.
  ``prefix_cache_hit_rate`` is a 0-1 fraction.
* SGLang: ``sglang:cached_tokens_total`` / ``sglang:prompt_tokens_total``; speculative
  acceptance from ``sglang:spec_verify_calls_total`` (verify steps),
  ``sglang:generation_tokens_total`` and ``sglang:num_requests_total``. SGLang adds a request's
  ``spec_verify_ct`` and ``completion_tokens`` to the first two, and one to the third, when the
  request finishes (``srt/observability/metrics_collector.py``, ``observe_one_finished_request``),
  so over a level they sum the per-request ``meta_info`` figures of the requests that finished in
  it. Each request's first token comes from its prefill, each verify step adds one token of the
  target's own, so accepted drafts = Δgenerated − Δrequests − Δverify; acceptance length =
  1 + accepted / Δverify (the definition of SGLang's ``accept len`` and of vLLM); acceptance rate
  = accepted / (Δverify × (``sglang:spec_num_draft_tokens`` − 1)), as SGLang's decode log computes
  it, where that gauge is exported. The verify counter appears with the first verify step, so a
  level that starts on a fresh server reads it as 0 before.
  Where a server has no such counter (SGLang before it was added), the gauges are used as read
  after the level and ``server_counters_note`` says what they are: ``sglang:spec_accept_length`` /
  ``spec_accept_rate`` are the last decode-log interval's, ``sglang:cache_hit_rate`` the latest
  prefill batch's.

A figure the server does not give is None. Standard library only, Python >= 3.9
(it runs on the GPU host with the benchmark).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from tunedeck.bench.http import HttpClient
from tunedeck.bench.httpcore import HTTPError, base_url

log = logging.getLogger(__name__)

#: the level summary's keys (None where the server does not say)
FIGURE_KEYS = (
    "prefix_cache_hit_rate",
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
)

#: counters and gauges read (a snapshot keeps only these; labels other than ``position`` are summed over)
WANTED = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "sglang:cached_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:spec_verify_calls_total",
    "sglang:spec_num_draft_tokens",
    "sglang:cache_hit_rate",
    "sglang:spec_accept_length",
    "sglang:spec_accept_rate",
)
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_SG_VERIFY = "sglang:spec_verify_calls_total"
#: the counters speculative acceptance is measured from per level (a server without them has gauges)
COUNTED_SPEC = ("vllm:spec_decode_num_drafts_total", _SG_VERIFY)

#: what each gauge used as a fallback is (SGLang: the scheduler sets them from its latest log)
_GAUGE_SPAN = {
    "sglang:cache_hit_rate": "the latest prefill batch's",
    "vllm:gpu_prefix_cache_hit_rate": "the server's lifetime",
    "sglang:spec_accept_length": "the last decode-log interval's",
}

#: a snapshot: series name -> summed value; the per-position counter as "name{position}" keys too
Snapshot = Dict[str, float]


def _position(labels: str) -> Optional[str]:
    """The ``position`` label's value in a ``{...}`` label text, else None."""
    i = labels.find('position="')
    if i < 0:
        return None
    j = labels.find('"', i + 10)
    return labels[i + 10 : j] if j > 0 else None


def iter_series(text: str) -> Iterator[Tuple[str, str, float]]:
    """(name, label text without braces, value) per sample line of a Prometheus text page;
    comments, NaN values and malformed lines are skipped."""
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            close = line.rfind("}")
            if close < brace:
                continue
            name, labels, rest = line[:brace], line[brace + 1 : close], line[close + 1 :]
        elif space > 0:
            name, labels, rest = line[:space], "", line[space + 1 :]
        else:
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            v = float(fields[0])
        except ValueError:
            continue
        if v == v:
            yield name.strip(), labels, v


def parse_counters(text: str) -> Snapshot:
    """The :data:`WANTED` series of a Prometheus text page, summed over label sets (NaN skipped);
    the per-position acceptance counter also as ``name{N}`` per position. Bad lines are skipped."""
    out: Snapshot = {}
    for name, labels, v in iter_series(text):
        if name not in WANTED:
            continue
        out[name] = out.get(name, 0.0) + v
        if name == _PER_POS:
            pos = _position(labels)
            if pos is not None and pos.isdigit():
                key = f"{name}{{{pos}}}"
                out[key] = out.get(key, 0.0) + v
    return out


async def read_counters(client: HttpClient, url: str, *, timeout: float = 5.0) -> Optional[Snapshot]:
    """One snapshot of the server's ``/metrics``; None (logged) when it cannot be read."""
    target = base_url(url) + "/metrics"
    try:
        r = await client.get(target, timeout=timeout)
    except HTTPError as e:
        log.warning("%s: server counters not read: %s", target, e or type(e).__name__)
        return None
    if r.status != 200:
        log.warning("%s: server counters not read: HTTP %s", target, r.status)
        return None
    return parse_counters(r.content.decode("utf-8", "replace"))


def _delta(before: Snapshot, after: Snapshot, name: str) -> Optional[float]:
    if name not in before or name not in after:
        return None
    d = after[name] - before[name]
    return d if d >= 0 else None  # a counter went back: the server restarted during the level


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def level_figures(before: Optional[Snapshot], after: Optional[Snapshot]) -> Dict[str, Any]:
    """The contract keys (:data:`FIGURE_KEYS`) for one level, plus ``server_counters_note``
    (None, or what the figures are when they are not per-level counters)."""
    out: Dict[str, Any] = {k: None for k in FIGURE_KEYS}
    out["server_counters_note"] = None
    if before is None or after is None:
        out["server_counters_note"] = "server /metrics not read"
        return out
    notes: List[str] = []
    reset = any(k in before and k in after and after[k] < before[k] for k in after if k.endswith("_total"))
    if reset:
        notes.append("a counter went back during the level (server restarted?)")
    # prefix cache: counters first, then the lifetime gauges
    if "vllm:prefix_cache_queries_total" in after:
        out["prefix_cache_hit_rate"] = _ratio(
            _delta(before, after, "vllm:prefix_cache_hits_total"),
            _delta(before, after, "vllm:prefix_cache_queries_total"),
        )
    elif "sglang:prompt_tokens_total" in after and "sglang:cached_tokens_total" in after:
        out["prefix_cache_hit_rate"] = _ratio(
            _delta(before, after, "sglang:cached_tokens_total"),
            _delta(before, after, "sglang:prompt_tokens_total"),
        )
    else:
        for gauge in ("sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate"):
            if gauge in after:
                out["prefix_cache_hit_rate"] = after[gauge]
                notes.append(f"prefix cache hit rate is the gauge {gauge} ({_GAUGE_SPAN[gauge]}), not this level's")
                break
    # speculative decoding
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    if drafts is not None:
        draft_tok = _delta(before, after, "vllm:spec_decode_num_draft_tokens_total")
        acc = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
        out["spec_decode_num_drafts"] = int(drafts)
        out["spec_decode_draft_tokens"] = None if draft_tok is None else int(draft_tok)
        out["spec_decode_accepted_tokens"] = None if acc is None else int(acc)
        rate = _ratio(acc, draft_tok)
        out["spec_decode_acceptance_rate"] = None if rate is None else rate * 100.0
        per_acc = _ratio(acc, drafts)
        out["spec_decode_acceptance_length"] = None if per_acc is None else 1.0 + per_acc
        pos: List[Tuple[int, Optional[float]]] = []
        for key in after:
            if key.startswith(_PER_POS + "{"):
                pos.append((int(key[len(_PER_POS) + 1 : -1]), _ratio(_delta(before, after, key), drafts)))
        if pos and drafts > 0:
            out["spec_decode_per_position_acceptance_rates"] = [r for _, r in sorted(pos)]
    elif _SG_VERIFY in after:
        note = sglang_spec_figures(before, after, out)
        if note:
            notes.append(note)
    else:
        length = after.get("sglang:spec_accept_length")
        if length is not None and length > 0:
            out["spec_decode_acceptance_length"] = length
            rate = after.get("sglang:spec_accept_rate")
            out["spec_decode_acceptance_rate"] = rate * 100.0 if rate is not None and rate > 0 else None
            span = _GAUGE_SPAN["sglang:spec_accept_length"]
            notes.append(
                f"speculative acceptance is SGLang's gauge sglang:spec_accept_length ({span}), not this level's"
            )
    for k in ("prefix_cache_hit_rate", "spec_decode_acceptance_rate", "spec_decode_acceptance_length"):
        v = out[k]
        if isinstance(v, float) and not math.isfinite(v):
            out[k] = None
    out["server_counters_note"] = "; ".join(notes) or None
    return out


def sglang_spec_figures(before: Snapshot, after: Snapshot, out: Dict[str, Any]) -> Optional[str]:
    """SGLang's acceptance over the level from its verify, generated-token and request counters
    (module docstring) into ``out``; a note when the counters do not add up, else None."""
    verify = after[_SG_VERIFY] - before.get(_SG_VERIFY, 0.0)  # absent before its first verify step
    gen = _delta(before, after, "sglang:generation_tokens_total")
    reqs = _delta(before, after, "sglang:num_requests_total")
    if verify < 0 or gen is None or reqs is None:
        return None  # a restart (noted by the caller) or counters not exported
    if verify == 0:
        return None  # no request of this level reached a verify step
    accepted = gen - reqs - verify
    if accepted < 0:
        return f"SGLang's counters do not add up ({gen:.0f} tokens, {reqs:.0f} requests, {verify:.0f} verify steps)"
    out["spec_decode_num_drafts"] = int(verify)
    out["spec_decode_accepted_tokens"] = int(accepted)
    out["spec_decode_acceptance_length"] = 1.0 + accepted / verify
    width = after.get("sglang:spec_num_draft_tokens")
    if width is not None and width > 1:
        draft_tokens = verify * (width - 1)
        out["spec_decode_draft_tokens"] = int(draft_tokens)
        out["spec_decode_acceptance_rate"] = accepted / draft_tokens * 100.0
    return None


def format_server_counters(summary: Mapping[str, Any]) -> List[str]:
    """The level's server-counter lines for the text output (none when the server said nothing)."""
    parts = []
    hit = summary.get("prefix_cache_hit_rate")
    if isinstance(hit, (int, float)):
        parts.append(f"prefix cache hit rate {hit * 100:.1f} %")
    acc = summary.get("spec_decode_acceptance_rate")
    ln = summary.get("spec_decode_acceptance_length")
    if isinstance(ln, (int, float)):
        txt = f"acceptance length {ln:.2f}"
        if isinstance(acc, (int, float)):
            txt += f", rate {acc:.1f} %"
        nd = summary.get("spec_decode_num_drafts")
        dt = summary.get("spec_decode_draft_tokens")
        if isinstance(nd, int) and isinstance(dt, int):
            txt += f" ({nd} drafts, {summary.get('spec_decode_accepted_tokens')} of {dt} draft tokens accepted)"
        elif isinstance(nd, int):
            txt += f" ({nd} drafts, {summary.get('spec_decode_accepted_tokens')} draft tokens accepted)"
        parts.append(txt)
    per = summary.get("spec_decode_per_position_acceptance_rates")
    lines = []
    if parts:
        lines.append("Server counters this level: " + "; ".join(parts))
    if isinstance(per, list) and per:
        lines.append("Acceptance by position: " + ", ".join("-" if r is None else f"{r * 100:.0f} %" for r in per))
    note = summary.get("server_counters_note")
    if note and (parts or "not read" in str(note)):
        lines.append(f"Server counters: {note}")
    return lines
