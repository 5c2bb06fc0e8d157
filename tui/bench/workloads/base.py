"""What every workload source shares: the spec, the built workload, the one error, prompt material.

Standard library only, Python >= 3.9 (it ships to the GPU host in the runtime).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from tunedeck.bench.client import RequestSpec
from tunedeck.bench.prompts import TOKEN_ID_RANGE, WORDS

#: tokens in one block of a Mooncake trace's ``hash_ids``
MOONCAKE_BLOCK = 512


class WorkloadError(ValueError):
    """A workload that cannot be built; its text is one line naming the file and the line or record."""


@dataclass(frozen=True)
class WorkloadSpec:
    """Which workload to send: a source name, its file (for file sources) and its options."""

    name: str = "random"
    path: Optional[str] = None
    params: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "params": dict(self.params)}

    @classmethod
    def from_json(cls, raw: Any) -> "WorkloadSpec":
        """A spec from its JSON form (``to_json``); ValueError naming what is wrong."""
        if isinstance(raw, WorkloadSpec):
            return raw
        if not isinstance(raw, Mapping):
            raise WorkloadError(f"workload: expected an object, got {type(raw).__name__}")
        name = raw.get("name", "random")
        path = raw.get("path")
        params = raw.get("params") or {}
        if not isinstance(name, str) or not name:
            raise WorkloadError(f"workload.name {name!r}: expected a source name")
        if path is not None and not isinstance(path, str):
            raise WorkloadError(f"workload.path {path!r}: expected a file path")
        if not isinstance(params, Mapping):
            raise WorkloadError("workload.params: expected a table of options")
        return cls(name, path, dict(params))


@dataclass
class Workload:
    """A built workload: the requests to send, in order, and what it is."""

    name: str
    #: the options in effect (defaults filled in), as recorded with results
    params: Dict[str, Any]
    #: sha256 of the exact prompt set (prompts, lengths, schedule), see :func:`prompt_set_sha256`
    sha256: str
    specs: List[RequestSpec]
    #: records left out, by reason (e.g. ``{"over_context_limit": 3}``)
    skipped: Dict[str, int] = field(default_factory=dict)
    #: how prompt lengths are known: ``token-ids`` (exact), ``estimate`` or ``server-tokenizer``
    lengths: str = "token-ids"

    def record(self) -> Dict[str, Any]:
        """What a result carries: ``{"name", "params", "sha256"}``."""
        return {"name": self.name, "params": dict(self.params), "sha256": self.sha256}


def prompt_set_sha256(specs: Sequence[RequestSpec]) -> str:
    """sha256 over every request's prompt, lengths and schedule, in order."""
    h = hashlib.sha256()
    for s in specs:
        row = [s.prompt, s.prompt_len, s.output_len, s.at_s, s.session, s.turn, s.think_s]
        h.update(json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def estimate_tokens(text: str) -> int:
    """A text's token count without a tokenizer: one per 4 UTF-8 bytes (at least 1)."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


Prompt = Union[str, List[int]]


class Material:
    """Synthetic prompt pieces: token ids (exact lengths) or words (one word is about one token)."""

    def __init__(self, token_ids: bool) -> None:
        self.token_ids = token_ids

    def piece(self, n: int, rng: random.Random) -> Prompt:
        if n <= 0:
            return [] if self.token_ids else ""
        if self.token_ids:
            lo, hi = TOKEN_ID_RANGE
            return [rng.randrange(lo, hi) for _ in range(n)]
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def join(self, parts: Sequence[Prompt]) -> Prompt:
        """Pieces end to end; a shared first piece stays byte-identical at the start of every prompt."""
        if self.token_ids:
            out: List[int] = []
            for p in parts:
                out.extend(p)  # type: ignore[arg-type]
            return out
        return " ".join(p for p in parts if p)  # type: ignore[misc]


def check_int(params: Mapping[str, Any], key: str, default: Optional[int], *, lo: int = 1) -> Optional[int]:
    """``params[key]`` as a whole number >= ``lo`` (``default`` when absent); WorkloadError naming the option."""
    v = params.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise WorkloadError(f"workload option {key} = {v!r}: expected a whole number >= {lo}")
    return v


def check_float(
    params: Mapping[str, Any], key: str, default: float, *, lo: float, hi: float = math.inf, below: bool = False
) -> float:
    """``params[key]`` (else ``default``) as a number within ``lo..hi``; ``below``: ``hi`` itself excluded."""
    v = params.get(key, default)
    bad = isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)
    if bad or not lo <= v <= hi or (below and v == hi):
        bound = f">= {lo:g}"
        if math.isfinite(hi):
            bound = f"within {lo:g}..{hi:g}" + (f" ({hi:g} excluded)" if below else "")
        raise WorkloadError(f"workload option {key} = {v!r}: expected a number {bound}")
    return float(v)


def distribution(values: Sequence[float]) -> Dict[str, Any]:
    """min / mean / p50 / p90 / p99 / max of ``values`` (nearest rank; all None when empty)."""
    if not values:
        return {"count": 0, "min": None, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    v = sorted(values)

    def rank(p: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]

    return {
        "count": len(v),
        "min": v[0],
        "mean": round(sum(v) / len(v), 3),
        "p50": rank(50),
        "p90": rank(90),
        "p99": rank(99),
        "max": v[-1],
    }


def length_distributions(specs: Sequence[RequestSpec]) -> Dict[str, Any]:
    """The prompt and output lengths of the requests sent (``output``: the max_tokens asked for)."""
    return {
        "input": distribution([s.prompt_len for s in specs]),
        "output": distribution([s.output_len for s in specs]),
    }


def measured_lengths(samples: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The lengths the server measured, over the successful requests: ``input`` the prompt tokens
    it counted (``usage.prompt_tokens``; a conversation's turn counts its whole context), ``output``
    the tokens it generated. Not the plan: :func:`length_distributions` is what was asked for."""
    ok = [s for s in samples if s.get("success")]
    return {
        "input": distribution([s["prompt_len"] for s in ok if isinstance(s.get("prompt_len"), (int, float))]),
        "output": distribution([s["output_tokens"] for s in ok if isinstance(s.get("output_tokens"), (int, float))]),
        "usage_reported": sum(1 for s in ok if s.get("usage_present")),
    }


def finish(
    name: str,
    params: Dict[str, Any],
    specs: List[RequestSpec],
    skipped: Dict[str, int],
    where: str,
    *,
    lengths: str = "token-ids",
) -> Workload:
    """Number the requests, refuse an empty set, hash it."""
    if not specs:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(skipped.items()))
        raise WorkloadError(f"{where}: no request left to send" + (f" (skipped {why})" if why else ""))
    for i, s in enumerate(specs):
        s.index = i
    return Workload(name, params, prompt_set_sha256(specs), specs, dict(skipped), lengths)
