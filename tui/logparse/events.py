"""What the log parser reports: startup phases, facts, errors and stats, and the running summary."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Union

# --------------------------------------------------------------------------- phases

PHASES: tuple[str, ...] = (
    "process-start",
    "distributed-init",
    "weight-loading",
    "compile",
    "kv-cache",
    "graph-capture",
    "warmup",
    "ready",
)
PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}

ENGINES = ("sglang", "vllm")
#: the port each engine serves on when its arguments name none
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}
_URL_PORT = re.compile(r":(\d+)(?:/|$)")


# --------------------------------------------------------------------------- advice

#: one line of advice per failure kind (docs/log-diagnosis.md lists them; a test keeps both in step)
ADVICE: dict[str, str] = {
    "oom": "lower --mem-fraction-static (SGLang) or --gpu-memory-utilization / --max-model-len (vLLM), "
    "or spread the model over more GPUs",
    "capture-failed": "read the lines above the proof (a kernel build or link error, or memory); "
    "--disable-cuda-graph (SGLang) or --enforce-eager (vLLM) confirms it is the capture",
    "rendezvous": "check that every node started and reaches the head's rendezvous address and port",
    "nccl": "if another rank or node failed first its error is the cause; else check the interconnect "
    "(NCCL_DEBUG=INFO names the failing link)",
    "nccl-timeout": "a collective hung: look for a rank that died or stalled first, then the interconnect; "
    "a longer timeout only hides it",
    "port": "another process holds the port: stop it or choose another --port",
    "argparse": "fix the flag: the engine's --help lists what this version accepts",
    "watchdog": "the engine stopped making progress: look for a hung rank or kernel",
    "terminated": "something stopped the process: 'Killed' is usually the OOM killer (dmesg), "
    "otherwise find who sent the signal",
    "ray-gpus": "the Ray cluster has fewer GPUs than tp x pp: add nodes or lower the parallelism",
    "cuda-driver": "match the driver and the CUDA runtime: update the host driver or use an image built "
    "for its CUDA (error 804: take the forward-compatibility libraries off the library path)",
    "hf-auth": "check the model id; for a gated or private model accept its licence on huggingface.co "
    "and give the server a token (HF_TOKEN)",
    "remote-code": "the model ships its own code: review it, then add --trust-remote-code",
    "disk-full": "free space where weights and caches go (HF_HOME, the compile cache) or point them at a larger disk",
    "crash": "read the proving line and the lines above it: the root exception names the failing part",
}


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class PhaseEvent:
    """The startup moved to ``phase`` or made progress inside it.

    ``progress`` is 0..1 inside the phase when known (None otherwise);
    ``n``/``total`` the tqdm counts; ``label`` the capture phase or bar name
    (``weights``, ``target decode``, ``PIECEWISE``, ``FULL``, ``""`` for a bare
    bar); ``done`` marks the end of a sub-step (e.g. "Graph capturing finished"
    with no n/m count).
    """

    phase: str
    progress: float | None
    message: str
    time: str | None = None
    line_no: int = 0
    n: int | None = None
    total: int | None = None
    label: str = ""
    done: bool = False
    event: str = "phase"
    segment: int | None = None


@dataclass(frozen=True)
class FactEvent:
    """A fact the log states: ``name`` is one of kv_tokens, kv_size_gb,
    kv_mem_gib, weights_mem_gb, weights_seconds, avail_mem_gb, graph_mem_gb,
    max_total_num_tokens, max_concurrency, context_len, http_url,
    attention_backend, engine_version, nccl_version, model."""

    name: str
    value: object
    message: str
    time: str | None = None
    line_no: int = 0
    rank: str = ""
    event: str = "fact"
    segment: int | None = None


@dataclass(frozen=True)
class ErrorEvent:
    """A fatal text. ``cause`` is a one-line explanation, ``line`` the proving
    log line, ``context`` the lines before it (oldest first).

    ``line_no`` is the physical line in the file (1-based, ``less +N`` lands on
    it) and ``segment`` the ``\\r``-separated piece within it (1-based) when the
    line holds several. ``origin`` ranks the proof: ``exception`` (the root
    exception line of a traceback, or a bare exception line), ``message`` (a
    fatal log message), ``terminated`` (a termination signal), ``wrapper`` (a
    line that only reports a failure elsewhere: "See root cause above", "Received
    sigquit", "Scheduler hit an exception"). ``wrapper`` holds the wrapper line
    or outer exception seen with a root exception.
    """

    kind: str
    cause: str
    line: str
    time: str | None = None
    line_no: int = 0
    context: tuple[str, ...] = ()
    event: str = "error"
    segment: int | None = None
    origin: str = "message"
    wrapper: str | None = None
    rank: str = ""
    attempt: int = 1
    #: a generic traceback after the ready line (a request that failed): it counts only
    #: once a wrapper or a termination follows; serving on clears it
    provisional: bool = False

    @property
    def message(self) -> str:
        return self.line

    @property
    def advice(self) -> str:
        """What to do about this kind of failure, in one line."""
        return ADVICE.get(self.kind, ADVICE["crash"])


@dataclass(frozen=True)
class StatEvent:
    """One runtime stat line. Fields a line does not carry are None."""

    engine: str
    message: str
    time: str | None = None
    line_no: int = 0
    kind: str = ""  # decode | prefill | engine
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None  # 0..1
    gen_throughput: float | None = None  # tokens/s
    prompt_throughput: float | None = None  # tokens/s
    input_throughput: float | None = None  # tokens/s (SGLang prefill)
    accept_len: float | None = None
    prefix_hit_rate: float | None = None  # 0..1
    event: str = "stat"
    segment: int | None = None


LogEvent = Union[PhaseEvent, FactEvent, ErrorEvent, StatEvent]


# --------------------------------------------------------------------------- state


@dataclass
class ParseState:
    """Running summary of what the log has shown so far."""

    engine: str | None = None
    phase: str | None = None
    #: (n, total) of the current/last weight bar, and every completed bar.
    weights: tuple[int, int] | None = None
    weight_bars: list[tuple[int, int]] = field(default_factory=list)
    weights_done: bool = False
    kv_tokens: int | None = None
    kv_seen: bool = False
    #: current capture bar: label, n, total
    graph_label: str | None = None
    graph: tuple[int, int] | None = None
    graph_bars: list[tuple[str, int, int]] = field(default_factory=list)
    graph_seen: bool = False
    graph_done: bool = False
    compile_seen: bool = False
    http_url: str | None = None
    #: the port the engine's arguments ask for (None: not in the log)
    declared_port: int | None = None
    ready_line: str | None = None
    #: every fatal line seen
    errors: list[ErrorEvent] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)
    last_stat: StatEvent | None = None
    #: physical lines read (the whole file, every attempt)
    lines: int = 0
    last_time: str | None = None
    #: 1 for the first start in the log; a new server start in the same log adds one
    #: and resets everything above (the latest attempt decides)
    attempt: int = 1
    #: physical line where the current attempt began
    attempt_line: int = 1
    #: why the input is not a log at all (binary, undecodable); None for text
    unreadable: str | None = None

    @property
    def port(self) -> int | None:
        """The engine's HTTP port: from the URL it serves on, else its arguments, else its default."""
        if self.http_url:
            m = _URL_PORT.search(self.http_url)
            if m:
                return int(m.group(1))
        if self.declared_port is not None:
            return self.declared_port
        return DEFAULT_PORTS.get(self.engine or "")

    @property
    def ready(self) -> bool:
        """The log says ready and no fatal line has been seen (in this attempt)."""
        return self.ready_line is not None and self.failure is None

    @property
    def failure(self) -> ErrorEvent | None:
        """The diagnosis: the root exception line, else the best fatal line (:func:`pick_failure`)."""
        if not self.errors:
            return None
        return pick_failure(e for e in self.errors if not e.provisional)

    @property
    def status(self) -> str:
        if self.unreadable is not None:
            return "unreadable"
        if self.failure is not None:
            return "failed"
        if self.ready_line is not None:
            return "ready"
        return "starting" if self.phase else "unknown"

    def phase_progress(self) -> float | None:
        if self.phase == "weight-loading" and self.weights and self.weights[1]:
            return self.weights[0] / self.weights[1]
        if self.phase == "graph-capture":
            if self.graph_done:
                return 1.0
            if self.graph and self.graph[1]:
                return self.graph[0] / self.graph[1]
        return None

    def describe(self) -> str:
        """One line: 'capturing 0/1 (bs=1)', 'loading weights 14/163', 'ready' …"""
        if self.unreadable is not None:
            return f"unreadable: {self.unreadable}"
        f = self.failure
        if f is not None:
            return f"failed: {f.cause}"
        if self.ready_line is not None:
            return "ready"
        p = self.phase
        if p == "weight-loading":
            if self.weights:
                return f"loading weights {self.weights[0]}/{self.weights[1]}"
            return "loading weights"
        if p == "graph-capture":
            if self.graph and not self.graph_done:
                lab = f" ({self.graph_label})" if self.graph_label else ""
                return f"capturing {self.graph[0]}/{self.graph[1]}{lab}"
            return "capturing CUDA graphs" + (" (done)" if self.graph_done else "")
        return p or "no startup lines yet"


_EXC_LINE = re.compile(r"\b\w*(?:Error|Exception)\b: ")
#: proof ranking: a root exception line, then a fatal message, then a signal, then a wrapper
_ORIGIN_RANK = {"exception": 0, "message": 1, "terminated": 2, "wrapper": 3}


def pick_failure(errors: Iterable[ErrorEvent]) -> ErrorEvent | None:
    """The diagnosis among the fatal lines: the earliest root exception line (the
    innermost exception of the first process that failed); without one, the first
    fatal message of a specific kind (oom, nccl, port, …), then a termination
    signal, and only then a wrapper line ("See root cause above", "Received
    sigquit …"), which never hides the cause it wraps."""
    best: ErrorEvent | None = None
    best_key: tuple[int, int] | None = None
    for i, e in enumerate(errors):
        r = _ORIGIN_RANK.get(e.origin, 1)
        if r == 1 and e.kind == "crash":
            r = 2  # a generic message ranks with the signals
        key = (r, i)
        if best_key is None or key < best_key:
            best, best_key = e, key
    return best


def event_to_json(ev: LogEvent) -> dict[str, object]:
    """The ``parse-log --json`` shape: event, phase, progress (0..1 or null), time, message, kind …"""
    if isinstance(ev, PhaseEvent):
        d: dict[str, object] = {
            "event": "phase",
            "phase": ev.phase,
            "progress": None if ev.progress is None else round(ev.progress, 4),
            "time": ev.time,
            "message": ev.message,
            "line": ev.line_no,
        }
        if ev.segment:
            d["segment"] = ev.segment
        if ev.total is not None:
            d["n"], d["total"] = ev.n, ev.total
        if ev.label:
            d["label"] = ev.label
        if ev.done:
            d["done"] = True
        return d
    if isinstance(ev, FactEvent):
        return {
            "event": "fact",
            "name": ev.name,
            "value": ev.value,
            "time": ev.time,
            "message": ev.message,
            "line": ev.line_no,
        }
    if isinstance(ev, ErrorEvent):
        return {
            "event": "error",
            "kind": ev.kind,
            "cause": ev.cause,
            "phase": None,
            "progress": None,
            "time": ev.time,
            "message": ev.line,
            "line": ev.line_no,
            "segment": ev.segment,
            "origin": ev.origin,
            "wrapper": ev.wrapper,
            "attempt": ev.attempt,
            "context": list(ev.context[-5:]),
        }
    d = {k: getattr(ev, k) for k in ev.__dataclass_fields__}
    return d
