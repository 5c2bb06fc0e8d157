"""Prompts of exact lengths (token ids, or text calibrated with the server's ``/tokenize``) and arrival times (Gamma / Poisson, seeded)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
from typing import Any, Dict, List, Optional, Tuple

from tunedeck.bench.client import (
    RequestSpec,
)
from tunedeck.bench.http import HttpClient
from tunedeck.bench.httpcore import HTTPError, base_url

log = logging.getLogger(__name__)

_pc = time.perf_counter


#: token ids drawn for synthetic prompts: above the special tokens, below 32000 (every common vocab is larger)
TOKEN_ID_RANGE = (1000, 30000)


WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "you",
    "that",
    "he",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "oil",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
    "over",
    "new",
    "sound",
    "take",
    "only",
    "little",
    "work",
    "know",
    "place",
    "year",
    "live",
    "me",
    "back",
    "give",
    "most",
    "very",
    "after",
    "thing",
    "our",
    "just",
    "name",
    "good",
    "sentence",
    "man",
    "think",
    "say",
    "great",
    "where",
    "help",
    "through",
    "much",
    "before",
    "line",
    "right",
    "too",
    "mean",
    "old",
    "any",
    "same",
    "tell",
    "boy",
    "follow",
    "came",
    "want",
    "show",
    "also",
    "around",
    "form",
    "three",
    "small",
    "set",
    "put",
    "end",
    "does",
    "another",
    "well",
    "large",
    "must",
    "big",
    "even",
    "such",
    "because",
    "turn",
    "here",
    "why",
    "ask",
    "went",
    "men",
    "read",
    "need",
    "land",
    "different",
    "home",
    "us",
    "move",
    "try",
    "kind",
    "hand",
    "picture",
    "again",
    "change",
    "off",
    "play",
    "spell",
    "air",
    "away",
    "animal",
    "house",
    "point",
    "page",
    "letter",
    "mother",
    "answer",
    "found",
    "study",
    "still",
    "learn",
    "should",
    "world",
    "high",
    "every",
    "near",
    "add",
    "food",
    "between",
    "own",
    "below",
    "country",
    "plant",
    "last",
    "school",
    "father",
    "keep",
    "tree",
    "never",
    "start",
    "city",
    "earth",
    "eye",
    "light",
    "thought",
    "head",
    "under",
    "story",
    "saw",
    "left",
    "few",
    "while",
    "along",
    "might",
    "close",
    "something",
    "seem",
    "next",
    "hard",
    "open",
    "example",
    "begin",
    "life",
    "always",
    "those",
    "both",
    "paper",
    "together",
]


def make_prompts(n: int, input_len: int, output_len: int, seed: int, *, token_ids: bool = False) -> List[RequestSpec]:
    """Seeded synthetic prompts: ``input_len`` token ids (exact) or words (an estimate)."""
    rng = random.Random(seed)
    out = []
    n_tok = max(1, input_len)
    if token_ids:
        lo, hi = TOKEN_ID_RANGE
        rr = rng.randrange
        for i in range(n):
            out.append(RequestSpec([rr(lo, hi) for _ in range(n_tok)], n_tok, output_len, i, True))
        return out
    choice = rng.choice
    for i in range(n):
        words = [choice(WORDS) for _ in range(n_tok)]
        out.append(RequestSpec(" ".join(words), len(words), output_len, i, False))
    return out


async def calibrate_prompts(
    client: HttpClient,
    base: str,
    model: str,
    specs: List[RequestSpec],
    seed: int,
    *,
    chat: bool = True,
    rounds: int = 8,
) -> str:
    """Adjust each text prompt's word count until the server's ``/tokenize`` counts its ``prompt_len``.

    Chat prompts are counted as the whole chat request (template included) like
    the engines do for usage.prompt_tokens; completions prompts as the text
    alone. Words are added or dropped at the end only. Returns how lengths are
    known: ``"server-tokenizer"`` (every prompt counted; ``exact`` set where the
    count matched) or ``"estimate"`` when the server has no usable ``/tokenize``.
    """
    url = base_url(base) + "/tokenize"
    rng = random.Random(seed + 104729)

    async def count(text: str) -> Optional[int]:
        body: Dict[str, Any] = {"model": model}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        r = await client.post_json(url, body, timeout=10.0)
        if r.status != 200:
            return None
        try:
            c = r.json().get("count")
        except (ValueError, AttributeError):
            return None
        return c if isinstance(c, int) and not isinstance(c, bool) else None

    short = [w for w in WORDS if len(w) <= 2]

    async def fit(words: List[str], target: int) -> Tuple[Optional[int], List[str]]:
        """Add or drop words until the count is ``target`` (or ``rounds`` tries); the closest wins."""
        c = await count(" ".join(words))
        best: Tuple[Optional[int], List[str]] = (c, list(words))
        for _ in range(rounds):
            if c is None or c == target:
                break
            diff = target - c
            step = diff // 2 if abs(diff) > 3 else diff
            if step > 0:
                pool = WORDS if abs(diff) > 3 else short
                words.extend(rng.choice(pool) for _ in range(step))
            else:
                del words[max(1, len(words) + step) :]
            c = await count(" ".join(words))
            if c is not None and (best[0] is None or abs(c - target) < abs(best[0] - target)):
                best = (c, list(words))
        return best

    def fitted(spec: RequestSpec, words: List[str], c: int) -> RequestSpec:
        return dataclasses.replace(spec, prompt=" ".join(words), prompt_len=c, exact=c == spec.prompt_len)

    if not specs:
        return "estimate"
    sp0 = specs[0]
    try:
        c0, words0 = await fit(str(sp0.prompt).split(), sp0.prompt_len)
    except HTTPError as e:
        log.info("no /tokenize at %s (%s): prompt lengths are estimates", url, e)
        return "estimate"
    if c0 is None:
        log.info("%s does not count prompts: their lengths are estimates", url)
        return "estimate"
    specs[0] = fitted(sp0, words0, c0)
    per_token = len(words0) / max(1, c0)  # a good start for every other prompt
    sem = asyncio.Semaphore(32)

    async def fit_one(i: int) -> None:
        spec = specs[i]
        words = str(spec.prompt).split()
        n_words = max(1, round(spec.prompt_len * per_token))
        while len(words) < n_words:
            words.append(rng.choice(WORDS))
        del words[n_words:]
        async with sem:
            try:
                c, words = await fit(words, spec.prompt_len)
            except HTTPError as e:
                log.warning("prompt %d: /tokenize failed (%s); its length is an estimate", spec.index, e)
                return
        if c is not None:
            specs[i] = fitted(spec, words, c)

    await asyncio.gather(*(fit_one(i) for i in range(1, len(specs))))
    return "server-tokenizer"


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> List[float]:
    """Seconds after t0 at which each request is due (first at 0, then Gamma gaps)."""
    if not math.isfinite(rate):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError("request rate and burstiness must be > 0")
    rng = random.Random(seed + 1_000_003)
    theta = 1.0 / (rate * burstiness)
    t = 0.0
    out = []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out
