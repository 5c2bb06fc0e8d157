"""Mooncake-format traces the tests and ``benchmarks/`` write: the FAST'25 release's JSONL rows
``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``
(``../shared/docs/workloads.md``), with the shape its traces record."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Dict, List

from tunedeck.bench.workloads import MOONCAKE_BLOCK


def mooncake_rows(
    n: int,
    span_s: float,
    seed: int,
    *,
    input_median: int = 1000,
    input_max: int = 8192,
    output_median: int = 40,
    output_max: int = 512,
    systems: int = 8,
) -> List[Dict[str, Any]]:
    """``n`` rows: ms timestamps from a bursty (Gamma, shape 0.3) process over about ``span_s``
    seconds, 1-8 rows per timestamp, log-normal input and output lengths (medians and caps given).

    ``hash_ids`` name the prompt's 512-token blocks, one per started block: each row begins with
    one of ``systems`` shared "system prompts" of 1-3 blocks (as far as its length reaches), the
    rest are blocks of its own, so equal leading ids are equal prefixes. The ids are drawn from a
    random stream of their own: the timestamps and lengths are those of the same seed without ids.
    """
    rng = random.Random(seed)
    ids_rng = random.Random(f"mooncake-ids-{seed}")
    shared = [[1_000_000 + 10 * s + b for b in range(1 + s % 3)] for s in range(systems)]
    fresh = 0
    rows: List[Dict[str, Any]] = []
    t = 0.0
    groups_mean = 2.5
    rate = n / span_s / groups_mean
    while len(rows) < n:
        for _ in range(min(n - len(rows), 1 + int(rng.expovariate(1 / (groups_mean - 1))))):
            inp = max(16, min(input_max, int(rng.lognormvariate(math.log(input_median), 0.8))))
            out = max(1, min(output_max, int(rng.lognormvariate(math.log(output_median), 0.7))))
            blocks = math.ceil(inp / MOONCAKE_BLOCK)
            ids = list(ids_rng.choice(shared)[:blocks])
            while len(ids) < blocks:
                ids.append(fresh)
                fresh += 1
            rows.append({"timestamp": int(t * 1000), "input_length": inp, "output_length": out, "hash_ids": ids})
        t += rng.gammavariate(0.3, 1 / (rate * 0.3))
    return rows


def write_jsonl(path: Path, rows: List[Dict[str, Any]]) -> Path:
    """One JSON object a line, as the Mooncake release ships its traces."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
