"""Generated workloads: ``random``, ``prefix_repetition``, ``shared_prefix``, ``text`` and ``conversation``.

Every one is seeded: the same options and seed give the same prompt set (and sha256).
Shared prefixes are built once and put unchanged at the start of each prompt that shares
them, so they are byte-identical between requests and a server's prefix cache can hit.
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tunedeck.bench.client import RequestSpec
from tunedeck.bench.prompts import make_prompts
from tunedeck.bench.workloads.base import (
    Material,
    Workload,
    WorkloadError,
    check_float,
    check_int,
    finish,
)


def _length_table(params: Mapping[str, Any], key: str) -> Optional[Tuple[List[int], List[float]]]:
    """A length distribution from a plan: ``[L, ...]`` (equally likely) or ``[[L, weight], ...]``."""
    raw = params.get(key)
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)) or not raw:
        raise WorkloadError(f"workload option {key}: expected a list of lengths or of [length, weight] pairs")
    lens: List[int] = []
    weights: List[float] = []
    for i, item in enumerate(raw):
        ln, w = (item, 1.0) if not isinstance(item, (list, tuple)) else (tuple(item) + (None,))[:2]
        if isinstance(ln, bool) or not isinstance(ln, int) or ln < 1:
            raise WorkloadError(f"workload option {key}[{i}]: length {ln!r} is not a whole number >= 1")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0 or math.isinf(w):
            raise WorkloadError(f"workload option {key}[{i}]: weight {w!r} is not a number > 0")
        lens.append(ln)
        weights.append(float(w))
    return lens, weights


def _uniform_lengths(rng: random.Random, n: int, base: int, ratio: float) -> List[int]:
    """vLLM's ``--random-range-ratio``: uniform whole numbers in ``[base·(1−r), base·(1+r)]``."""
    lo = max(1, math.floor(base * (1 - ratio)))
    hi = max(lo, math.ceil(base * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def random_source(params: Mapping[str, Any], n: int, seed: int, token_ids: bool) -> Workload:
    inp = check_int(params, "input_len", 128)
    out = check_int(params, "output_len", 128)
    assert inp is not None and out is not None
    ratio = check_float(params, "range_ratio", 0.0, lo=0.0, hi=1.0, below=True)
    prefix = check_int(params, "prefix_len", 0, lo=0) or 0
    in_table = _length_table(params, "input_lens")
    out_table = _length_table(params, "output_lens")
    eff: Dict[str, Any] = {"input_len": inp, "output_len": out, "range_ratio": ratio, "prefix_len": prefix}
    lengths = "token-ids" if token_ids else "estimate"
    if not (ratio or prefix or in_table or out_table):
        # today's prompts, unchanged: the same seed gives the same token ids as before workloads existed
        return finish(
            "random", eff, make_prompts(n, inp, out, seed, token_ids=token_ids), {}, "random", lengths=lengths
        )
    if in_table:
        eff["input_lens"] = [[ln, w] for ln, w in zip(*in_table)]
    if out_table:
        eff["output_lens"] = [[ln, w] for ln, w in zip(*out_table)]
    rng = random.Random(seed)
    mat = Material(token_ids)
    ins = rng.choices(in_table[0], in_table[1], k=n) if in_table else _uniform_lengths(rng, n, inp, ratio)
    outs = rng.choices(out_table[0], out_table[1], k=n) if out_table else _uniform_lengths(rng, n, out, ratio)
    shared = mat.piece(prefix, random.Random(seed + 17))
    specs = []
    for i in range(n):
        prompt = mat.join([shared, mat.piece(ins[i], rng)]) if prefix else mat.piece(ins[i], rng)
        specs.append(RequestSpec(prompt, prefix + ins[i], outs[i], i, token_ids))
    return finish("random", eff, specs, {}, "random", lengths=lengths)


def prefix_repetition(params: Mapping[str, Any], n: int, seed: int, token_ids: bool) -> Workload:
    """vLLM's ``prefix_repetition``: N prefixes of P tokens, each request one of them plus a fresh S-token suffix."""
    p = check_int(params, "prefix_len", 256)
    s = check_int(params, "suffix_len", 256)
    k = check_int(params, "num_prefixes", 10)
    out = check_int(params, "output_len", 128)
    assert p is not None and s is not None and k is not None and out is not None
    eff = {"prefix_len": p, "suffix_len": s, "num_prefixes": k, "output_len": out}
    rng = random.Random(seed)
    mat = Material(token_ids)
    prefixes = [mat.piece(p, rng) for _ in range(k)]
    specs = [RequestSpec(mat.join([prefixes[i % k], mat.piece(s, rng)]), p + s, out, i, token_ids) for i in range(n)]
    rng.shuffle(specs)
    return finish("prefix_repetition", eff, specs, {}, "prefix_repetition", lengths=_lengths(token_ids))


def shared_prefix(params: Mapping[str, Any], n: int, seed: int, token_ids: bool) -> Workload:
    """SGLang's generated-shared-prefix: G groups x P prompts, an S-token system prompt per group, a Q-token question.

    The request count is G x P (``n`` does not apply), shuffled by the seed as SGLang's
    ``bench_serving`` shuffles them: in group order every group's prompts would follow each other,
    the easiest order for a prefix cache, and a cache too small for every group's system prompt
    would look better than under SGLang's own benchmark."""
    g = check_int(params, "num_groups", 64)
    per = check_int(params, "prompts_per_group", 16)
    sys_len = check_int(params, "system_prompt_len", 2048)
    q = check_int(params, "question_len", 128)
    out = check_int(params, "output_len", 256)
    assert g is not None and per is not None and sys_len is not None and q is not None and out is not None
    eff = {
        "num_groups": g,
        "prompts_per_group": per,
        "system_prompt_len": sys_len,
        "question_len": q,
        "output_len": out,
    }
    rng = random.Random(seed)
    mat = Material(token_ids)
    specs = []
    for _ in range(g):
        system = mat.piece(sys_len, rng)
        for _ in range(per):
            specs.append(RequestSpec(mat.join([system, mat.piece(q, rng)]), sys_len + q, out, 0, token_ids))
    rng.shuffle(specs)
    return finish("shared_prefix", eff, specs, {}, "shared_prefix", lengths=_lengths(token_ids))


def _lengths(token_ids: bool) -> str:
    return "token-ids" if token_ids else "estimate"


_corpus: Optional[Tuple[List[str], str]] = None


def corpus() -> Tuple[List[str], str]:
    """Natural English from the standard library (``pydoc_data.topics``: the language reference's
    topics), and what names it: the Python it came from and the sha256 of its words. The topics
    change between Python releases, so the same seed gives another prompt set under another Python."""
    global _corpus
    if _corpus is None:
        from pydoc_data.topics import topics

        words: List[str] = []
        for key in sorted(topics):
            # words only: the topics' tables and rules (``|``, ``+-----+``, ``====``) are left out
            words.extend(w for w in topics[key].split() if any(c.isalpha() for c in w))
        digest = hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest()[:12]
        _corpus = words, f"pydoc_data.topics of Python {'.'.join(map(str, sys.version_info[:3]))} ({digest})"
    return _corpus


def text_source(params: Mapping[str, Any], n: int, seed: int, token_ids: bool) -> Workload:
    """Natural text: a seeded window of the corpus per prompt, ``input_len`` words (fitted later with ``/tokenize``)."""
    inp = check_int(params, "input_len", 128)
    out = check_int(params, "output_len", 128)
    assert inp is not None and out is not None
    words, corpus_id = corpus()
    if inp >= len(words):
        raise WorkloadError(f"text: input_len {inp} is longer than the text corpus ({len(words)} words)")
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        off = rng.randrange(0, len(words) - inp)
        specs.append(RequestSpec(" ".join(words[off : off + inp]), inp, out, i, False))
    params = {"input_len": inp, "output_len": out, "corpus": corpus_id}
    return finish("text", params, specs, {}, "text", lengths="estimate")


def conversation(params: Mapping[str, Any], n: int, seed: int, token_ids: bool) -> Workload:
    """N sessions x T turns; each turn's ``prompt`` is only its new user message (the executor adds the context).

    ``sessions`` defaults to enough sessions for ``n`` requests; ``think_s`` is the pause after
    the previous turn's answer (0 for a session's first turn)."""
    turns = check_int(params, "turns", 4)
    assert turns is not None
    sessions = check_int(params, "sessions", max(1, math.ceil(n / turns)))
    inp = check_int(params, "input_len", 64)
    out = check_int(params, "output_len", 128)
    think = check_float(params, "think_s", 1.0, lo=0.0, hi=3600.0)
    assert sessions is not None and inp is not None and out is not None
    eff = {"sessions": sessions, "turns": turns, "input_len": inp, "output_len": out, "think_s": think}
    rng = random.Random(seed)
    mat = Material(False)  # answers come back as text, so the context is text
    specs: List[RequestSpec] = []
    for s in range(sessions):
        for t in range(turns):
            spec = RequestSpec(mat.piece(inp, rng), inp, out, 0, False)
            spec.session, spec.turn, spec.think_s = s, t, think if t else 0.0
            specs.append(spec)
    return finish("conversation", eff, specs, {}, "conversation", lengths="estimate")
