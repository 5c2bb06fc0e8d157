"""What a benchmark is asked to do (:class:`BenchConfig`), and the error for a server that never became ready."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tunedeck.bench import metrics
from tunedeck.bench.client import (
    DEFAULT_READ_TIMEOUT,
)
from tunedeck.bench.httpcore import InvalidURL, base_url, split_url
from tunedeck.bench.workloads import SIZED_SOURCES, SOURCES, WorkloadSpec, with_lengths

log = logging.getLogger(__name__)

_pc = time.perf_counter


class NotReady(Exception):
    """The server did not become ready within the bounded wait (error kind NOT_READY)."""

    kind = "NOT_READY"


def auth_headers(api_key_file: Optional[str]) -> Dict[str, str]:
    """The request headers for a server whose API key is in ``api_key_file`` (None: no key)."""
    if not api_key_file:
        return {}
    try:
        with open(api_key_file, encoding="utf-8") as f:
            key = f.read().strip()
    except OSError as e:
        raise ValueError(f"the server's API key file {api_key_file}: {e.strerror or e}") from None
    if not key or any(c.isspace() or ord(c) < 32 for c in key):
        raise ValueError(f"the server's API key file {api_key_file}: not one key on one line")
    return {"Authorization": f"Bearer {key}"}


@dataclass
class BenchConfig:
    url: str
    model: Optional[str] = None
    endpoint: str = "completions"
    num_prompts: Optional[int] = None  # None: max(5 × C, 10)
    input_len: int = 128
    output_len: int = 128
    concurrency: List[int] = field(default_factory=lambda: [1])
    request_rate: List[float] = field(default_factory=lambda: [math.inf])
    burstiness: float = 1.0
    warmup: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0
    seed: int = 0
    goodput: Dict[str, float] = field(default_factory=dict)
    percentiles: List[float] = field(default_factory=lambda: list(metrics.DEFAULT_PERCENTILES))
    read_timeout: float = DEFAULT_READ_TIMEOUT
    request_deadline: Optional[float] = None
    ready_timeout: float = 120.0
    workers: int = 1
    #: the HTTP client (one: tunedeck.bench.http); kept so older callers passing "lean" still work
    transport: str = "lean"
    label: Optional[str] = None
    progress_samples: bool = False
    #: open one connection per concurrent request before t0 (vLLM's warm pool)
    preconnect: bool = True
    #: completions prompts as token ids (exact length); False sends text like chat
    token_ids: bool = True
    #: which requests are sent (``--dataset-name`` and its options); random token ids by default
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    #: the server's API key as a file on the machine the client runs on (a run's 0600 ``api_key``,
    #: written at launch): sent as ``Authorization: Bearer``; the key itself is never in the config
    api_key_file: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.workload, WorkloadSpec):  # from a job's spec.json (dataclasses.asdict)
            self.workload = WorkloadSpec.from_json(self.workload)

    def auth_headers(self) -> Dict[str, str]:
        """``{"Authorization": "Bearer KEY"}`` from :attr:`api_key_file`, or nothing; ValueError
        naming the file when it cannot be read."""
        return auth_headers(self.api_key_file)

    def workload_spec(self) -> WorkloadSpec:
        """The workload with the length options filled in from ``input_len``/``output_len`` where it takes them."""
        return with_lengths(self.workload, self.input_len, self.output_len)

    #: read the server's /metrics before and after each level (prefix cache, speculative acceptance)
    server_counters: bool = True

    def validate(self) -> None:
        """ValueError naming the first bad setting (``BenchConfig.<field>: ...``)."""
        try:
            split_url(base_url(self.url))
        except InvalidURL as e:
            raise ValueError(f"BenchConfig.url: {e}") from None
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"BenchConfig.endpoint {self.endpoint!r}: expected 'completions' or 'chat'")
        if self.workload.name not in SOURCES:
            raise ValueError(f"BenchConfig.workload {self.workload.name!r}: expected one of {', '.join(SOURCES)}")
        for name in ("input_len", "output_len", "workers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"BenchConfig.{name} {v!r}: expected a whole number >= 1")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"BenchConfig.warmup {self.warmup!r}: expected a whole number >= 0")
        if self.num_prompts is not None and (not isinstance(self.num_prompts, int) or self.num_prompts < 1):
            raise ValueError(f"BenchConfig.num_prompts {self.num_prompts!r}: expected a whole number >= 1")
        for c in self.concurrency:
            if not isinstance(c, int) or isinstance(c, bool) or c < 1:
                raise ValueError(f"BenchConfig.concurrency {c!r}: every value must be a whole number >= 1")
        for r in self.request_rate:
            if not isinstance(r, (int, float)) or not r > 0:
                raise ValueError(f"BenchConfig.request_rate {r!r}: every value must be > 0 (math.inf: all at once)")
        for k, v in self.goodput.items():
            if k not in metrics.GOODPUT_KEYS:
                raise ValueError(f"BenchConfig.goodput {k!r}: key must be one of {', '.join(metrics.GOODPUT_KEYS)}")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0 or math.isinf(v):
                raise ValueError(f"BenchConfig.goodput {k}={v!r}: expected a finite number of ms >= 0")
        if not self.burstiness > 0 or math.isinf(self.burstiness):
            raise ValueError(f"BenchConfig.burstiness {self.burstiness!r}: expected a finite number > 0")
        for name in ("read_timeout", "ready_timeout"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"BenchConfig.{name} {v!r}: expected seconds > 0")
        self.levels()

    def levels(self) -> List[Tuple[Optional[int], float]]:
        """(max_concurrency, request_rate) per sweep level."""
        cs: List[Optional[int]] = list(self.concurrency) or [None]
        rs = list(self.request_rate) or [math.inf]
        if len(rs) > 1 and len(cs) > 1:
            raise ValueError("sweep over concurrency or over request rate, not both")
        if self.transport != "lean":
            raise ValueError(f"transport {self.transport!r}: the benchmark has one HTTP client ('lean')")
        return [(c, r) for c in cs for r in rs]

    def prompts_for(self, c: Optional[int]) -> int:
        """Requests asked of the workload per level: ``num_prompts``, else max(5 x C, 10); a source
        that sizes itself (shared_prefix, traces) is asked for as many as it has."""
        if self.num_prompts:
            return self.num_prompts
        if self.workload.name in SIZED_SOURCES:
            return SIZED_ALL
        return max(5 * (c or 1), 10)


#: "every request it has", asked of a source that sizes itself
SIZED_ALL = 1 << 40
