"""Typed records of a benchmark: per-request samples, level summaries, progress events.

The engine works on plain dicts (cheap on the hot path), typed by
:class:`SampleRecord` and :class:`LevelSummaryRecord` (``TypedDict``: what the
host-side writer puts in ``samples.jsonl`` and ``summary.json`` and the laptop
reads back). The immutable records are the typed view at the boundaries, each
with ``to_json()`` / ``from_json()``:

* :class:`Sample`: one ``samples.jsonl`` line (vLLM's per-request field names
  first, then tunedeck's);
* :class:`LevelSummary`: one level's ``summary.json`` (vLLM's summary keys
  plus tunedeck's), the common fields typed, everything in ``data``;
* :class:`BenchEvent`: one progress event as ``run_benchmark`` emits it and
  ``tunedeck bench --progress`` prints it (one JSON object per line).
  :meth:`BenchEvent.from_json` is the one parser of such a line.

Event types (``BenchEvent.type``) and their fields:

``waiting``      url, timeout
``start``        levels [{concurrency, request_rate}], model, sweep_id, goodput ({key: ms}, {} for none),
                 context_limit ({tokens, source}: "option", "server", or both None)
``level_start``  level, run_id, run_dir, concurrency, request_rate, num_prompts, warmup
``connected``    level, connections, connect_ms_mean, connect_ms_max (pool opened before t0)
``tick``         level, t, second, completed, failed, in_flight, total, tok_s, output_tokens,
                 good (completed requests within every goodput target so far; None without targets),
                 ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms (None until seen), cpu, lag_ms,
                 load1, steal
``sample``       level, index, success, error_type, ttft, latency, output_tokens
``level_done``   level, run_id, summary (a LevelSummary's data)
``timeline``     level, run_id, row (a host-side job only: the ``timeline.jsonl`` line of the tick before)
``done``         run_ids
``error``        kind, message
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Tuple, TypedDict, Union

EVENT_TYPES = (
    "waiting",
    "start",
    "level_start",
    "connected",
    "tick",
    "sample",
    "level_done",
    "timeline",
    "done",
    "error",
)

JsonIn = Union[str, bytes, bytearray, Mapping[str, Any]]


class RecordError(ValueError):
    """A line or object that is not a valid record; the message says what and where."""


def _load(obj: JsonIn, what: str) -> Dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    try:
        v = json.loads(obj)
    except json.JSONDecodeError as e:
        text = obj if isinstance(obj, str) else bytes(obj).decode("utf-8", "replace")
        raise RecordError(f"{what}: not JSON ({e.msg} at column {e.colno}): {text[:80]!r}") from None
    except ValueError as e:  # bytes that are not UTF-8
        raise RecordError(f"{what}: not JSON ({e})") from None
    if not isinstance(v, dict):
        raise RecordError(f"{what}: expected a JSON object, got {type(v).__name__}")
    return v


def _dumps(d: Mapping[str, Any]) -> str:
    return json.dumps(d, separators=(",", ":"), allow_nan=False, default=str)


# ---------------------------------------------------------------- the dicts the engine writes


class SampleRecord(TypedDict, total=False):
    """One request as the engine records it and ``samples.jsonl`` holds it (times in seconds,
    ``perf_counter`` clock; :class:`Sample` documents each field). Every key is written for a new
    request; one read back from an older file may lack the newer ones."""

    index: int
    success: bool
    error_type: str
    error: str
    ttft: float
    itl: List[float]
    latency: float
    prompt_len: int
    output_tokens: int
    start_time: float
    wall_start: float
    client_queue_time: float
    send_time: float
    elapsed: float
    tokens_per_event: float
    usage_present: bool
    bad_lines: int
    finish_reason: Optional[str]
    worker: Optional[int]
    prompt_len_sent: Optional[int]
    prompt_len_exact: bool
    session: Optional[int]
    turn: Optional[int]
    scheduled_at: Optional[float]
    sent_at: Optional[float]
    dispatch_lag: Optional[float]
    #: kept in memory only, never stored: the raw SSE events (``--save-stream``) and the answer's
    #: text (the next turn of a conversation)
    _events: List[Tuple[float, bytes]]
    _answer: str


class LevelSummaryRecord(TypedDict, total=False):
    """The keys of one level's ``summary.json`` that readers rely on (vLLM's names, then
    tunedeck's; :func:`tunedeck.bench.metrics.calculate_metrics` and
    :func:`tunedeck.bench.store.summarize` write them). The statistics of each metric (``mean_``,
    ``median_``, ``std_``, ``p<P>_`` + ``ttft_ms`` ...) and the server's counters are there too:
    their keys depend on the percentiles asked for, so they are read with ``.get``."""

    date: str
    endpoint_type: str
    backend: str
    label: Optional[str]
    model_id: Optional[str]
    num_prompts: Optional[int]
    request_rate: Union[float, str]
    burstiness: float
    max_concurrency: Optional[int]
    duration: float
    completed: int
    failed: int
    cancelled: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: Optional[float]
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    errors: List[str]
    error_counts: Dict[str, int]
    failure_rate: float
    per_user_output_throughput: float
    run_id: Optional[str]
    sweep_id: Optional[str]
    partial: bool
    live: bool
    params: Dict[str, Any]
    client: Dict[str, Any]
    workload: Dict[str, Any]
    client_bound: bool
    machine_busy: bool
    schema_version: int
    #: a host-side A/B level's validity findings (tunedeck.hostside.validity)
    validity: List[Dict[str, str]]


# ---------------------------------------------------------------- Sample


@dataclass(frozen=True)
class Sample:
    """One request, as stored in ``samples.jsonl`` (times in seconds, ``perf_counter`` clock)."""

    index: int = 0
    success: bool = False
    error_type: str = ""
    error: str = ""
    ttft: float = 0.0
    itl: Tuple[float, ...] = ()
    latency: float = 0.0
    #: server's usage.prompt_tokens when reported, else what was sent
    prompt_len: int = 0
    output_tokens: int = 0
    start_time: float = 0.0
    wall_start: float = 0.0
    client_queue_time: float = 0.0
    send_time: float = 0.0
    elapsed: float = 0.0
    tokens_per_event: float = 0.0
    usage_present: bool = False
    bad_lines: int = 0
    finish_reason: Optional[str] = None
    worker: Optional[int] = None
    #: the prompt length sent (token ids for completions; tokenizer-counted or estimated text for chat)
    prompt_len_sent: Optional[int] = None
    #: True when ``prompt_len_sent`` is an exact token count
    prompt_len_exact: bool = False
    #: conversation id and turn (None: a single-turn request)
    session: Optional[int] = None
    turn: Optional[int] = None
    #: seconds after the level's start: when the request was due, when it was sent (None: not recorded)
    scheduled_at: Optional[float] = None
    sent_at: Optional[float] = None
    #: seconds the dispatcher was late for its scheduled time (open loop and trace replay)
    dispatch_lag: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["itl"] = list(self.itl)
        return d

    def to_json(self) -> str:
        return _dumps(self.to_dict())

    @classmethod
    def from_json(cls, obj: JsonIn) -> "Sample":
        d = _load(obj, "sample")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        itl = kw.get("itl") or ()
        if not isinstance(itl, (list, tuple)):
            raise RecordError(f"sample {d.get('index')}: itl must be a list, got {type(itl).__name__}")
        kw["itl"] = tuple(float(x) for x in itl)
        return cls(**kw)


# ---------------------------------------------------------------- LevelSummary


@dataclass(frozen=True)
class LevelSummary:
    """One level's summary; ``data`` holds every key (vLLM's and tunedeck's)."""

    run_id: Optional[str]
    completed: int
    failed: int
    duration: float
    output_throughput: float
    max_concurrency: Optional[int]
    request_rate: Union[float, str, None]
    partial: bool
    client_bound: bool
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.data)

    def to_json(self) -> str:
        return _dumps(self.data)

    @classmethod
    def from_json(cls, obj: JsonIn) -> "LevelSummary":
        d = _load(obj, "summary")
        for k in ("completed", "failed", "duration"):
            if not isinstance(d.get(k), (int, float)) or isinstance(d.get(k), bool):
                raise RecordError(f"summary {d.get('run_id')}: {k!r} missing or not a number")
        return cls(
            run_id=d.get("run_id"),
            completed=int(d["completed"]),
            failed=int(d["failed"]),
            duration=float(d["duration"]),
            output_throughput=float(d.get("output_throughput") or 0.0),
            max_concurrency=d.get("max_concurrency"),
            request_rate=d.get("request_rate"),
            partial=bool(d.get("partial")),
            client_bound=bool(d.get("client_bound")),
            data=d,
        )


# ---------------------------------------------------------------- BenchEvent


@dataclass(frozen=True)
class BenchEvent:
    """One progress event. ``data`` is the whole JSON object (``type`` included)."""

    type: str
    level: Optional[int] = None
    run_id: Optional[str] = None
    summary: Optional[LevelSummary] = None
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.data)

    def to_json(self) -> str:
        """One line (no newline), as ``tunedeck bench --progress`` prints it."""
        return _dumps(self.data)

    @classmethod
    def make(cls, type: str, **fields_: Any) -> "BenchEvent":
        return cls.from_json({"type": type, **fields_})

    @classmethod
    def from_json(cls, obj: JsonIn) -> "BenchEvent":
        """Parse one progress line (or an already decoded object).

        Raises :class:`RecordError` (a ValueError) naming what is wrong. Unknown
        event types are accepted (newer engines may add some); known ones are
        checked for the fields consumers rely on.
        """
        d = _load(obj, "progress line")
        kind = d.get("type")
        if not isinstance(kind, str) or not kind:
            raise RecordError(f'progress line: no "type" field: {str(d)[:80]}')
        level = d.get("level")
        if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
            raise RecordError(f"{kind} event: level must be an integer, got {level!r}")
        if kind in ("level_start", "tick", "level_done", "sample", "connected") and level is None:
            raise RecordError(f"{kind} event: no level")
        summary = None
        if kind == "level_done":
            s = d.get("summary")
            if not isinstance(s, Mapping):
                raise RecordError("level_done event: no summary object")
            summary = LevelSummary.from_json(s)
        run_id = d.get("run_id")
        if run_id is None and summary is not None:
            run_id = summary.run_id
        return cls(type=kind, level=level, run_id=run_id, summary=summary, data=d)


def parse_progress(lines: Union[str, List[str]]) -> List[BenchEvent]:
    """Every valid event of a ``--progress`` output; lines that are not events are skipped."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    out = []
    for ln in lines:
        if ln.strip():
            try:
                out.append(BenchEvent.from_json(ln))
            except RecordError:
                continue
    return out
