"""What a built workload will send, before it is sent: the length histograms and how much of the
prompts a prefix cache could serve (the Bench setup screen's preview, ``tunedeck bench --preview``).

The prefix-sharing ratio is the hit rate of an unbounded prefix cache over the prompt set, in
send order: prompts are cut into blocks (16 token ids, or 64 bytes of text: about 16 tokens),
each block keyed by its content and everything before it, as vLLM's prefix cache keys its blocks;
a block seen before in any earlier prompt is shared. A conversation's turns are counted as the
engine sees them: every earlier prompt and answer of the session comes first, so all of it is
shared except the new message (answers taken at their ``output_len``). A server's real hit rate
is lower when its cache evicts, or when requests in flight have not yet filled it.

Standard library only, Python >= 3.9 (the package ships to the GPU host).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Set, Tuple

from tunedeck.bench.client import RequestSpec
from tunedeck.bench.workloads.base import Workload, distribution
from tunedeck.util.records import pick

#: block size of the sharing estimate: token ids per block, and bytes per block of a text prompt
BLOCK_TOKENS = 16
BLOCK_BYTES = 64
#: the most histogram bins
BINS = 24


@dataclass(frozen=True)
class Histogram:
    """Counts of values in ``len(counts)`` equal bins from ``lo`` to ``hi`` (one bin when all are equal)."""

    lo: float
    hi: float
    counts: Tuple[int, ...]

    @classmethod
    def of(cls, values: Sequence[float], bins: int = 0) -> "Histogram":
        """``bins`` equal bins (default: 2·√n, from 4 up to :data:`BINS`, so a few values do not
        scatter into single spikes)."""
        if not values:
            return cls(0, 0, ())
        bins = bins or min(BINS, max(4, int(2 * math.sqrt(len(values)))))
        lo, hi = min(values), max(values)
        if hi == lo:
            return cls(lo, hi, (len(values),))
        counts = [0] * bins
        width = (hi - lo) / bins
        for v in values:
            counts[min(bins - 1, int((v - lo) / width))] += 1
        return cls(lo, hi, tuple(counts))


@dataclass(frozen=True)
class WorkloadPreview:
    """One level's workload as it will be sent."""

    name: str
    requests: int
    sha256: str
    input: Dict[str, Any]
    output: Dict[str, Any]
    input_hist: Histogram
    output_hist: Histogram
    #: fraction of prompt tokens an unbounded prefix cache would serve (0..1)
    shared_ratio: float
    #: ``token-ids`` (exact), ``estimate`` (text: the server's tokenizer fits them at run time)
    lengths: str
    skipped: Dict[str, int] = field(default_factory=dict)
    #: conversation: sessions in the set; traces: seconds from the first send to the last
    sessions: int = 0
    span_s: float = 0.0
    params: Dict[str, Any] = field(default_factory=dict)


def _units(prompt: Any) -> Tuple[List[bytes], int]:
    """A prompt's blocks (each the bytes of its content) and its length in the blocks' units."""
    if isinstance(prompt, str):
        raw = prompt.encode("utf-8")
        return [raw[i : i + BLOCK_BYTES] for i in range(0, len(raw) - BLOCK_BYTES + 1, BLOCK_BYTES)], len(raw)
    ids = list(prompt)
    full = len(ids) - len(ids) % BLOCK_TOKENS
    blocks = [",".join(map(str, ids[i : i + BLOCK_TOKENS])).encode() for i in range(0, full, BLOCK_TOKENS)]
    return blocks, len(ids)


def _block_unit(prompt: Any) -> int:
    return BLOCK_BYTES if isinstance(prompt, str) else BLOCK_TOKENS


def shared_ratio(specs: Sequence[RequestSpec]) -> float:
    """The prefix-sharing ratio of ``specs`` in send order (see the module's doc)."""
    if any(s.session is not None for s in specs):
        return _conversation_ratio(specs)
    seen: Set[bytes] = set()
    shared = total = 0
    for s in specs:
        blocks, n = _units(s.prompt)
        total += n
        h = hashlib.sha256()
        hit = True  # a block is shared only when every block before it is (a prefix, not any block)
        for b in blocks:
            h.update(b)
            key = h.digest()
            if hit and key in seen:
                shared += _block_unit(s.prompt)
            else:
                hit = False
                seen.add(key)
    return shared / total if total else 0.0


def _conversation_ratio(specs: Sequence[RequestSpec]) -> float:
    """Each turn's context is the session's earlier prompts and answers, then the new message."""
    context: Dict[Any, int] = {}
    shared = total = 0
    for s in sorted(specs, key=lambda x: (x.session if x.session is not None else -1, x.turn)):
        before = context.get(s.session, 0)
        shared += before
        total += before + s.prompt_len
        context[s.session] = before + s.prompt_len + s.output_len
    return shared / total if total else 0.0


def preview(wl: Workload) -> WorkloadPreview:
    """What ``wl`` sends: lengths, histograms, sharing, and for traces the span of the schedule."""
    ins = [s.prompt_len for s in wl.specs]
    outs = [s.output_len for s in wl.specs]
    times = [s.at_s for s in wl.specs if s.at_s is not None]
    sessions = {s.session for s in wl.specs if s.session is not None}
    return WorkloadPreview(
        name=wl.name,
        requests=len(wl.specs),
        sha256=wl.sha256,
        input=distribution(ins),
        output=distribution(outs),
        input_hist=Histogram.of(ins),
        output_hist=Histogram.of(outs),
        shared_ratio=shared_ratio(wl.specs),
        lengths=wl.lengths,
        skipped=dict(wl.skipped),
        sessions=len(sessions),
        span_s=(max(times) - min(times)) if times else 0.0,
        params=dict(wl.params),
    )


def preview_json(p: WorkloadPreview) -> Dict[str, Any]:
    """The preview as JSON (``tunedeck bench --preview --json``)."""
    return {
        **pick(p, "name", "requests", "sha256", "params", "lengths", "input", "output"),
        "input_histogram": {"lo": p.input_hist.lo, "hi": p.input_hist.hi, "counts": list(p.input_hist.counts)},
        "output_histogram": {"lo": p.output_hist.lo, "hi": p.output_hist.hi, "counts": list(p.output_hist.counts)},
        "prefix_shared_ratio": round(p.shared_ratio, 4),
        "skipped": p.skipped,
        "sessions": p.sessions,
        "span_s": round(p.span_s, 3),
    }


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(h: Histogram) -> str:
    """The histogram as one line of block characters (an empty bin is a space)."""
    if not h.counts:
        return ""
    top = max(h.counts)
    return "".join(" " if c == 0 else SPARKS[min(7, math.ceil(c / top * 8) - 1)] for c in h.counts)


def preview_lines(p: WorkloadPreview) -> List[str]:
    """The preview as plain lines of at most ~60 characters (the CLI prints them; the Bench setup
    screen shows the same): a varying length gets its histogram on the line below it."""

    def dist(name: str, d: Dict[str, Any], h: Histogram) -> List[str]:
        if not d.get("count"):
            return [f"{name:<7}-"]
        fmt = "{:g}".format
        mean = fmt(round(d["mean"], 1))
        line = f"{name:<7}{fmt(d['min'])}–{fmt(d['max'])} tokens, p50 {fmt(d['p50'])}, mean {mean}"
        return [line] + ([" " * 7 + sparkline(h)] if len(h.counts) > 1 else [])

    head = f"{p.name}: {p.requests} requests"
    if p.sessions:
        head += f" in {p.sessions} sessions"
    if p.span_s:
        head += f" over {p.span_s:.1f} s"
    head += f", prompt set {p.sha256[:12]}"
    lines = [head, *dist("input", p.input, p.input_hist), *dist("output", p.output, p.output_hist)]
    lines.append(f"a prefix cache could serve {p.shared_ratio * 100:.1f}% of prompt tokens")
    if p.lengths == "estimate":
        lines.append("lengths estimated; the server's tokenizer fits them at the start")
    if p.skipped:
        lines.append("skipped: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(p.skipped.items())))
    return lines


def grouped(levels: Sequence[Tuple[str, WorkloadPreview]]) -> List[Tuple[List[str], WorkloadPreview]]:
    """Levels that send the same prompt set (one built set) under one entry: ``(["C=1", "C=32"], p)``."""
    out: List[Tuple[List[str], WorkloadPreview]] = []
    for label, p in levels:
        for labels, q in out:
            if q is p:
                labels.append(label)
                break
        else:
            out.append(([label], p))
    return out


__all__ = [
    "Histogram",
    "WorkloadPreview",
    "grouped",
    "preview",
    "preview_json",
    "preview_lines",
    "shared_ratio",
    "sparkline",
]
