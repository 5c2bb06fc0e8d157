"""The SGLang / vLLM server log parser (incremental).

Feed it bytes as they arrive (``feed``), or whole text; it buffers partial
reads, decodes UTF-8 with ``errors="replace"``, splits on ``[\\r\\n]+`` (tqdm
redraws with ``\\r``), strips ANSI colour, Docker/compose prefixes and the
engines' own prefixes, and turns recognised lines into events:

* :class:`PhaseEvent`: startup phase changes and progress inside a phase
  (weight shards n/N, CUDA-graph capture n/N per capture phase);
* :class:`FactEvent`: facts such as KV-cache tokens, memory, HTTP URL,
  attention backend;
* :class:`ErrorEvent`: a fatal text with its ``kind`` (oom, nccl, port,
  argparse, watchdog, capture-failed, crash), the proving line and the
  lines before it;
* :class:`StatEvent`: runtime stat lines (SGLang ``Decode batch`` /
  ``Prefill batch``, vLLM ``Avg prompt throughput``).

:attr:`LogParser.state` is the running summary (:class:`ParseState`). The log
alone never proves readiness (the tracker confirms with ``/health`` and the
process); a fatal line after the ready line revokes it (``failure`` wins).
Reference: docs/serving-engines.md section 4.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Union

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


@dataclass(frozen=True)
class ErrorEvent:
    """A fatal text. ``cause`` is a one-line explanation, ``line`` the proving
    log line, ``context`` the lines before it (oldest first)."""

    kind: str
    cause: str
    line: str
    time: str | None = None
    line_no: int = 0
    context: tuple[str, ...] = ()
    event: str = "error"

    @property
    def message(self) -> str:
        return self.line


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
    ready_line: str | None = None
    #: every fatal line seen
    errors: list[ErrorEvent] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)
    last_stat: StatEvent | None = None
    lines: int = 0
    last_time: str | None = None

    @property
    def ready(self) -> bool:
        """The log says ready and no fatal line has been seen (at any point)."""
        return self.ready_line is not None and not self.errors

    @property
    def failure(self) -> ErrorEvent | None:
        """The diagnosis: the most specific error kind, its best proving line."""
        return pick_failure(self.errors)

    @property
    def status(self) -> str:
        if self.errors:
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


def pick_failure(errors: Iterable[ErrorEvent]) -> ErrorEvent | None:
    """The diagnosis among the fatal lines: a specific kind (oom, nccl, port, …)
    beats the generic ``crash``; the first specific kind seen wins; within it an
    exception line (``FooError: …``) beats a warning line, earliest first."""
    errs = list(errors)
    if not errs:
        return None
    specific = [e for e in errs if e.kind != "crash"]
    pool = specific or errs
    kind = pool[0].kind
    same = [e for e in pool if e.kind == kind]
    exc = [e for e in same if _EXC_LINE.search(e.line)]
    return (exc or same)[0]


# --------------------------------------------------------------------------- regexes

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
SPLIT_RE = re.compile(r"[\r\n]+")
#: a line longer than this is cut (the rest up to its line break is dropped)
MAX_LINE = 256 * 1024
#: distinct fatal lines kept; past it only an error of a kind not yet seen is added
MAX_ERRORS = 200
# tqdm frame glued to the next SGLang line: "...it/s][2026-02-27 14:33:48 TP0] msg"
GLUED_RE = re.compile(r"(?<=\])(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [A-Z_]+\d+)*\] )")
DOCKER_TS_RE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? (?=\S)")
COMPOSE_RE = re.compile(r"^[A-Za-z0-9][\w.-]*\s*\| ")
KUBE_RE = re.compile(r"^\[pod/[^\]]+\] ")

SG_PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: [A-Z_]+\d+)*)\] ?")
VL_PROC = re.compile(r"^\((\S+)(?: rank=(\d+))? pid=(\d+)\)\s*")
VL_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[?([^\]\s]+)\] ")
UVICORN = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")

TQDM = re.compile(r"(\d+)%\|[^|]*\| (\d+)/(\d+) \[")
SHARDS = re.compile(
    r"((?:Loading safetensors|Loading pt|Loading npcache|Loading gguf|Multi-thread loading)"
    r"[\w ]*? shards(?: \(eager\))?):\s+(\d+)% Completed \| (\d+)/(\d+)"
)
SG_INIT = re.compile(r"Init (?:parallel|torch distributed) (begin|ends)\.")
SG_WEIGHTS_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
SG_WEIGHTS_END = re.compile(r"Load weight end\. .*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")
SG_KV = re.compile(
    r"KV Cache is allocated\. (?:dtype: [\w.]+, )?(?:#tokens: (\d+), )?"
    r"(?:KV size: ([\d.]+) GB|K size: ([\d.]+) GB, V size: ([\d.]+) GB)"
)
SG_GRAPH_BEGIN = re.compile(r"Capture (?:(\w+) (\w+) CUDA|cuda) graph begin\.")
SG_GRAPH_PROG = re.compile(
    r"Capturing (batches|num tokens) \((?:bs|num_tokens)=(\d+) avail_mem=([\d.]+) GB\):\s+(\d+)%\|[^|]*\| (\d+)/(\d+)"
)
SG_GRAPH_END = re.compile(
    r"Capture (?:(\w+) (\w+) CUDA|cuda) graph end\.(?: bs=\[[^\]]*\],)? (?:elapsed=|Time elapsed: )([\d.]+) s"
    r"(?:[.,] (?:mem usage=([\d.]+) GB|avail mem=([\d.]+) GB))*"
)
SG_LIMITS = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)"
)
SG_HTTP = re.compile(r"Uvicorn running on (\S+)")
SG_READY = "The server is fired up and ready to roll!"
SG_ATTN = re.compile(r"attention_backend='(\w+)'")
SG_MODEL = re.compile(r"model_path='([^']+)'")

VL_VERSION = re.compile(r"(?:Initializing a V1 LLM engine \(v([^)]+)\)|vLLM API server version ([\w.+-]+))")
VL_NCCL = re.compile(r"vLLM is using nccl==([\w.+-]+)")
VL_LOAD_BEGIN = re.compile(r"Loading model from scratch|Starting to load model")
VL_ATTN = re.compile(
    r"Using (\S+) attention backend out of potential backends|Using AttentionBackendEnum\.(\w+) backend|"
    r"Using (\w+) backend\.?$"
)
VL_WEIGHTS_DONE = re.compile(r"Loading weights took ([\d.]+) seconds")
VL_MODEL_LOADED = re.compile(r"Model loading took ([\d.]+) GiB (?:memory )?and ([\d.]+) seconds")
VL_COMPILE = re.compile(r"Starting torch\.compile|Dynamo bytecode transform time|torch\.compile took ([\d.]+) s in total|Directly load the compiled graph")
VL_KV_MEM = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
VL_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
VL_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
VL_GRAPH_PROG = re.compile(r"Capturing CUDA graphs(?: \(([^)]*)\))?:\s+(\d+)%\|[^|]*\| (\d+)/(\d+)")
VL_GRAPH_DONE = re.compile(r"Graph capturing finished in (\d+) secs?, took ([\d.]+) GiB")
VL_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
VL_SERVER = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
VL_READY = "Application startup complete."

SG_STAT_FIELDS = {
    "running": re.compile(r"#running-req: (\d+)"),
    "queued": re.compile(r"#queue-req: (\d+)"),
    "token_usage": re.compile(r"(?<![\w ])token usage: ([\d.]+)|^.*?, (?:full )?token usage: ([\d.]+)"),
    "gen_throughput": re.compile(r"gen throughput \(token/s\): ([\d.]+)"),
    "input_throughput": re.compile(r"input throughput \(token/s\): ([\d.]+)"),
    "accept_len": re.compile(r"accept len: ([\d.]+)"),
}
VL_STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, (?:Swapped: \d+ reqs, )?(?:Pending|Waiting): (\d+) reqs"
)
VL_KV_USAGE = re.compile(r"GPU KV cache usage: ([\d.]+)%")
VL_PREFIX_HIT = re.compile(r"Prefix cache hit rate: ([\d.]+)%")

# Fatal texts (section 4.6) plus the cases the real logs show.
CLASSIFIER: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "capture-failed",
        re.compile(r"Capture cuda graph failed|CUDA graph capture failed"),
        "CUDA graph capture failed",
    ),
    (
        "oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
            r"Not enough memory\. Please try to increase --mem-fraction-static|"
            r"No available memory for the cache blocks|larger than the available KV cache memory|"
            r"less than desired GPU memory utilization|Failed to load model - not enough GPU memory"
        ),
        "CUDA out of memory",
    ),
    ("nccl", re.compile(r"NCCL error|NCCL WARN|DistBackendError"), "NCCL error"),
    (
        "port",
        re.compile(r"[Aa]ddress already in use|is not available in \d+ seconds|port \d+ is in use"),
        "port already in use",
    ),
    (
        "argparse",
        re.compile(
            r"\S: error: (?:unrecognized arguments|argument \S+: |the following arguments are required|"
            r"ambiguous option|invalid choice)"
        ),
        "unknown flag or invalid value",
    ),
    ("watchdog", re.compile(r"watchdog timeout|Health check failed\. Server couldn't get a response"), "watchdog timeout"),
    (
        "crash",
        re.compile(
            r"Scheduler hit an exception|TokenizerManager hit an exception|Received sigquit from a child process|"
            r"Engine core initialization failed|Initialization failed\. warmup error|EngineCore failed to start|"
            r"WorkerProc failed to start|EngineDeadError"
        ),
        "engine crashed",
    ),
)
#: one pass over a line decides whether the classifier needs to look at it
_FATAL_ANY = re.compile("|".join(f"(?:{rx.pattern})" for _, rx, _ in CLASSIFIER))


def classify(text: str) -> tuple[str, str] | None:
    """(kind, cause) for a fatal text, or None."""
    for kind, rx, cause in CLASSIFIER:
        m = rx.search(text)
        if m:
            return kind, _refine_cause(kind, cause, text)
    return None


def _refine_cause(kind: str, cause: str, text: str) -> str:
    if kind == "oom":
        if "larger than the available KV cache memory" in text:
            return "KV cache too small for max model length (lower --max-model-len or raise memory use)"
        if "No available memory for the cache blocks" in text:
            return "no GPU memory left for the KV cache (raise --gpu-memory-utilization or shrink the model)"
        if "mem-fraction-static" in text:
            return "not enough memory (adjust --mem-fraction-static)"
        if "less than desired GPU memory utilization" in text:
            return "GPU memory already in use (free memory below --gpu-memory-utilization)"
        return "CUDA out of memory"
    if kind == "argparse":
        m = re.search(r"error: (unrecognized arguments: \S+|argument \S+: invalid choice: '[^']*'|argument \S+|.*)", text)
        return f"unknown flag or invalid value ({m.group(1)[:80]})" if m else cause
    if kind == "port":
        m = re.search(r"\('[^']*', (\d+)\)|port (\d+)|at (\d+) is not", text)
        port = next((g for g in (m.groups() if m else ()) if g), None)
        return f"port {port} already in use" if port else cause
    if kind == "nccl":
        m = re.search(r"NCCL error:? (?:in: \S+ )?(.*)", text)
        return f"NCCL error: {m.group(1)[:80]}" if m and m.group(1) else cause
    if kind == "capture-failed":
        m = re.search(r"Capture cuda graph failed: (.*)", text)
        return f"CUDA graph capture failed: {m.group(1)[:80]}" if m else cause
    return cause


# --------------------------------------------------------------------------- line cleaning


@dataclass(frozen=True)
class LogLine:
    """A cleaned line: ``text`` without ANSI and outer prefixes; ``msg`` the message
    without the engine prefix; ``rank`` e.g. 'TP0' or 'Worker_TP0'; ``level``."""

    raw: str
    text: str
    msg: str
    time: str | None
    rank: str
    level: str
    engine_hint: str | None


def clean_line(raw: str) -> LogLine:
    s = ANSI_RE.sub("", raw) if "\x1b" in raw else raw
    s = s.rstrip()
    if s[:1].isdigit():
        s = DOCKER_TS_RE.sub("", s, count=1)
    elif "| " in s[:60]:
        m = COMPOSE_RE.match(s)
        if m and "%|" not in s[: m.end()]:
            s = s[m.end() :]
    if s.startswith("[pod/"):
        s = KUBE_RE.sub("", s, count=1)
    text = s
    msg = s
    ts: str | None = None
    rank = ""
    level = ""
    hint: str | None = None
    m = SG_PREFIX.match(s) if s.startswith("[") else None
    if m:
        ts, rank, msg = m.group(1), m.group(2).strip(), s[m.end() :]
        hint = "sglang"
    else:
        # vLLM: one or more "(Proc pid=N) " prefixes, then LEVEL date [file:line]
        while True:
            m2 = VL_PROC.match(msg)
            if not m2:
                break
            hint = "vllm"
            proc = m2.group(1)
            if not rank:
                rank = proc if m2.group(2) is None else f"{proc}{m2.group(2)}"
            msg = msg[m2.end() :]
        m3 = VL_LEVEL.match(msg)
        if m3:
            level, ts = m3.group(1), m3.group(2)
            msg = msg[m3.end() :]
            hint = "vllm"
    if msg.startswith(("INFO:", "WARNING:", "ERROR:", "DEBUG:", "CRITICAL:")):
        m4 = UVICORN.match(msg)
        if m4:
            level = level or m4.group(1)
            msg = msg[m4.end() :]
    if not level:
        if "ERROR" in text[:80] or "Traceback" in msg[:10]:
            level = "ERROR"
        elif "WARNING" in text[:80] or "WARN " in text:
            level = "WARNING"
    return LogLine(raw, text, msg, ts, rank, level, hint)


def severity(line: str) -> str:
    """'error' | 'warning' | 'info' for colouring a (raw or cleaned) line."""
    s = ANSI_RE.sub("", line) if "\x1b" in line else line
    head = s[:160]
    if (
        "ERROR" in head
        or "CRITICAL" in head
        or "Traceback (most recent call last)" in s
        or re.search(r"^\w*(?:Error|Exception)\b|\b\w+(?:Error|Exception): ", s)
        or "NCCL WARN" in s
        or "Killed" == s.strip()
    ):
        return "error"
    if "WARNING" in head or "WARN " in head or "Warning:" in head or "warnings.warn" in s:
        return "warning"
    return "info"


def _int(s: str) -> int:
    return int(s.replace(",", ""))


# --------------------------------------------------------------------------- parser


class LogParser:
    """Incremental parser. ``feed`` / ``feed_text`` / ``feed_line`` return the new events."""

    def __init__(self, engine: str | None = None, *, context_lines: int = 30) -> None:
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
        self.state = ParseState(engine=engine)
        self._engine_fixed = engine is not None
        self._votes = {"sglang": 0, "vllm": 0}
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._flushed_tail = ""  # partial line already parsed by flush()
        self._context: deque[str] = deque(maxlen=context_lines)
        self._errors_seen: set[tuple[str, str]] = set()
        self._last_progress: tuple[str, str, int, int] | None = None
        self._fact_rank: dict[str, str] = {}

    # ------------------------------------------------------------------ input
    def feed(self, data: bytes) -> list[LogEvent]:
        """Feed raw bytes (any chunking); complete lines are parsed now."""
        return self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> list[LogEvent]:
        if not text:
            return []
        self._buf += text
        parts = SPLIT_RE.split(self._buf)
        self._buf = parts.pop()  # partial tail ('' when the text ended on a separator)
        if len(self._buf) > MAX_LINE:
            self._buf = self._buf[:MAX_LINE]
        events: list[LogEvent] = []
        for i, p in enumerate(parts):
            if i == 0 and self._flushed_tail:
                done = self._flushed_tail
                self._flushed_tail = ""
                if p == done:
                    continue
            if p:
                events.extend(self.feed_line(p))
        return events

    def flush(self) -> list[LogEvent]:
        """Parse the unterminated tail now (call after ~1 s of silence, or at EOF).
        It is not parsed a second time when its line ends unchanged."""
        tail = self._buf + self._decoder.decode(b"", final=False)
        self._buf = tail
        if not tail or tail == self._flushed_tail:
            return []
        self._flushed_tail = tail
        return self.feed_line(tail)

    def finish(self) -> list[LogEvent]:
        """End of input: parse the tail and reset the buffer."""
        self._buf += self._decoder.decode(b"", final=True)
        ev = self.flush()
        self._buf = ""
        self._flushed_tail = ""
        return ev

    def feed_line(self, raw: str) -> list[LogEvent]:
        """Parse one physical line (no \\r or \\n inside)."""
        if "]" in raw and "[" in raw and GLUED_RE.search(raw):
            out: list[LogEvent] = []
            for piece in GLUED_RE.split(raw):
                if piece:
                    out.extend(self._line(piece))
            return out
        return self._line(raw)

    # ------------------------------------------------------------------ core
    def _line(self, raw: str) -> list[LogEvent]:
        st = self.state
        st.lines += 1
        no = st.lines
        if no == 1 and raw.startswith("# source: "):
            return []  # the provenance header of a stored reference log
        ln = clean_line(raw)
        msg = ln.msg
        if ln.time:
            st.last_time = ln.time
        events: list[LogEvent] = []
        self._vote(ln)
        t = ln.time

        def phase(p: str, progress: float | None = None, **kw: object) -> None:
            cur = st.phase
            if cur is not None and PHASE_INDEX[p] < PHASE_INDEX[cur]:
                return  # phases only move forward (other ranks lag behind)
            if cur == p and progress is None and not kw.get("done"):
                return
            st.phase = p
            events.append(PhaseEvent(p, progress, msg.strip() or ln.text, t, no, **kw))  # type: ignore[arg-type]

        def fact(name: str, value: object) -> None:
            # (all)-rank lines: keep the first value; an explicit rank 0 replaces one from another rank
            prev_rank = self._fact_rank.get(name)
            if name not in st.facts or name not in _RANKED_FACTS or (
                prev_rank is not None and not _rank_zero(prev_rank) and _rank_zero(ln.rank)
            ):
                st.facts[name] = value
                self._fact_rank[name] = ln.rank
            events.append(FactEvent(name, value, msg.strip(), t, no, ln.rank))

        if st.phase is None and msg.strip():
            phase("process-start")

        # --- fatal texts first (cheap pre-filter)
        if _FATAL_ANY.search(msg):
            c = classify(msg)
            if c is not None:
                kind, cause = c
                key = (kind, msg.strip())
                if key not in self._errors_seen and (
                    len(st.errors) < MAX_ERRORS or all(e.kind != kind for e in st.errors)
                ):
                    self._errors_seen.add(key)
                    err = ErrorEvent(kind, cause, ln.text.strip(), t, no, tuple(self._context))
                    st.errors.append(err)
                    events.append(err)

        # --- progress bars
        if "%|" in msg or "% Completed |" in msg:
            self._bar(msg, ln, no, phase, events)
        elif "Capture" in msg or "Capturing" in msg or "Graph capturing" in msg:
            self._graph_lines(msg, phase, fact)
        self._startup_lines(msg, ln, phase, fact)
        if "throughput" in msg:
            self._stats(msg, ln, no, events)

        self._context.append(ln.text)
        return events

    # ------------------------------------------------------------------ pieces
    def _vote(self, ln: LogLine) -> None:
        if self._engine_fixed:
            return
        m = ln.msg
        if ln.engine_hint:
            self._votes[ln.engine_hint] += 1
        if "sglang" in m or "server_args=" in m or SG_READY in m or "sgl_kernel" in m:
            self._votes["sglang"] += 3
        if "vllm" in m.lower() or "EngineCore" in ln.text:
            self._votes["vllm"] += 3
        sg, vl = self._votes["sglang"], self._votes["vllm"]
        if sg or vl:
            self.state.engine = "sglang" if sg >= vl else "vllm"

    def _bar(self, msg: str, ln: LogLine, no: int, phase: Callable[..., None], events: list[LogEvent]) -> None:
        st = self.state
        m = SHARDS.search(msg)
        if m:
            n, total = int(m.group(3)), int(m.group(4))
            prev = st.weights
            st.weights = (n, total)
            if n == total and prev != (n, total):
                st.weight_bars.append((n, total))
            self._progress("weight-loading", "weights", n, total, phase)
            return
        m = VL_GRAPH_PROG.search(msg)
        if m:
            self._graph_progress(m.group(1) or "", int(m.group(3)), int(m.group(4)), phase)
            return
        m = SG_GRAPH_PROG.search(msg)
        if m:
            label = st.graph_label if st.graph_label not in (None, "") else ("decode" if m.group(1) == "batches" else "prefill")
            self._graph_progress(label, int(m.group(5)), int(m.group(6)), phase)
            return
        m = TQDM.search(msg)
        if m and st.phase == "graph-capture":
            head = msg[: m.start()].strip()
            if not head or head.endswith(":") and "Capturing" in head:
                # a bare bar inside a capture phase (the first frame, or old SGLang)
                self._graph_progress(st.graph_label or "", int(m.group(2)), int(m.group(3)), phase)

    def _progress(self, p: str, label: str, n: int, total: int, phase: Callable[..., None]) -> None:
        key = (p, label, n, total)
        if key == self._last_progress:
            return  # the 100% frame appears twice; the last one wins silently
        self._last_progress = key
        phase(p, n / total if total else None, n=n, total=total, label=label)

    def _graph_progress(self, label: str, n: int, total: int, phase: Callable[..., None]) -> None:
        st = self.state
        st.graph_seen = True
        if label != st.graph_label or (st.graph is not None and (total != st.graph[1] or n < st.graph[0])):
            st.graph_done = False
        st.graph_label = label
        st.graph = (n, total)
        if n == total:
            bar = (label, n, total)
            if not st.graph_bars or st.graph_bars[-1] != bar:
                st.graph_bars.append(bar)
        else:
            st.graph_done = False
        self._progress("graph-capture", label, n, total, phase)

    def _graph_lines(self, msg: str, phase: Callable[..., None], fact: Callable[[str, object], None]) -> None:
        st = self.state
        m = SG_GRAPH_BEGIN.search(msg)
        if m:
            label = f"{m.group(1)} {m.group(2)}" if m.group(1) else ""
            if st.phase != "graph-capture" or st.graph_label != label or st.graph_done:
                st.graph_label = label
                st.graph = None
                st.graph_done = False
                st.graph_seen = True
                phase("graph-capture", 0.0, label=label)
            return
        m = SG_GRAPH_END.search(msg)
        if m:
            st.graph_seen = True
            if not st.graph_done or st.phase != "graph-capture":
                st.graph_done = True
                label = f"{m.group(1)} {m.group(2)}" if m.group(1) else (st.graph_label or "")
                phase("graph-capture", 1.0, label=label, done=True)
                fact("graph_seconds", float(m.group(3)))
            return
        m = VL_GRAPH_DONE.search(msg)
        if m:
            st.graph_seen = True
            if not st.graph_done:
                st.graph_done = True
                phase("graph-capture", 1.0, label=st.graph_label or "", done=True)
                fact("graph_seconds", float(m.group(1)))
                fact("graph_mem_gb", float(m.group(2)))

    def _startup_lines(
        self, msg: str, ln: LogLine, phase: Callable[..., None], fact: Callable[[str, object], None]
    ) -> None:
        st = self.state
        # SGLang
        if "server_args=" in msg:
            m = SG_ATTN.search(msg)
            if m:
                fact("attention_backend", m.group(1))
            m = SG_MODEL.search(msg)
            if m:
                fact("model", m.group(1))
            return
        if msg.startswith("Init ") or "Init torch distributed" in msg or "Init parallel" in msg:
            if SG_INIT.search(msg):
                phase("distributed-init")
                return
        if msg.startswith("Load weight"):
            m = SG_WEIGHTS_BEGIN.search(msg)
            if m:
                phase("weight-loading")
                return
            m = SG_WEIGHTS_END.search(msg)
            if m or msg.startswith("Load weight end"):
                if not st.weights_done:
                    st.weights_done = True
                    phase("weight-loading", 1.0, done=True, label="weights")
                if m:
                    fact("weights_mem_gb", float(m.group(2)))
                return
        if "KV Cache is allocated" in msg:
            m = SG_KV.search(msg)
            st.kv_seen = True
            phase("kv-cache")
            if m:
                if m.group(1):
                    tokens = int(m.group(1))
                    fact("kv_tokens", tokens)
                    st.kv_tokens = st.facts["kv_tokens"]  # type: ignore[assignment]
                size = float(m.group(2)) if m.group(2) else float(m.group(3)) + float(m.group(4))
                fact("kv_size_gb", size)
            return
        if "max_total_num_tokens=" in msg:
            m = SG_LIMITS.search(msg)
            if m:
                st.kv_seen = True
                fact("max_total_num_tokens", int(m.group(1)))
                fact("max_running_requests", int(m.group(4)))
                fact("context_len", int(m.group(5)))
                if st.kv_tokens is None:
                    st.kv_tokens = int(m.group(1))
            return
        if "Uvicorn running on" in msg:
            m = SG_HTTP.search(msg)
            if m:
                st.http_url = m.group(1)
                fact("http_url", m.group(1))
                phase("warmup")
            return
        if SG_READY in msg:
            st.ready_line = ln.text.strip()
            phase("ready", 1.0)
            return
        # vLLM
        if "vLLM" in msg or "V1 LLM engine" in msg:
            m = VL_VERSION.search(msg)
            if m:
                fact("engine_version", m.group(1) or m.group(2))
                return
            m = VL_NCCL.search(msg)
            if m:
                fact("nccl_version", m.group(1))
                phase("distributed-init")
                return
            m = VL_SERVER.search(msg)
            if m:
                st.http_url = m.group(1)
                fact("http_url", m.group(1))
                phase("warmup")
                return
        if VL_LOAD_BEGIN.search(msg) if ("load model" in msg or "from scratch" in msg) else False:
            phase("weight-loading")
            return
        if "attention backend" in msg or "AttentionBackendEnum" in msg:
            m = VL_ATTN.search(msg)
            if m:
                fact("attention_backend", m.group(1) or m.group(2) or m.group(3))
            return
        if "Loading weights took" in msg:
            m = VL_WEIGHTS_DONE.search(msg)
            if m:
                fact("weights_seconds", float(m.group(1)))
                if not st.weights_done:
                    st.weights_done = True
                    phase("weight-loading", 1.0, done=True, label="weights")
            return
        if "Model loading took" in msg:
            m = VL_MODEL_LOADED.search(msg)
            if m:
                fact("weights_mem_gb", float(m.group(1)))
                if not st.weights_done:
                    st.weights_done = True
                    phase("weight-loading", 1.0, done=True, label="weights")
            return
        if "torch.compile" in msg or "Dynamo bytecode" in msg or "compiled graph" in msg:
            m = VL_COMPILE.search(msg)
            if m:
                st.compile_seen = True
                phase("compile", 1.0 if m.group(1) else None, done=bool(m.group(1)))
            return
        if "KV cache" in msg:
            m = VL_KV_MEM.search(msg)
            if m:
                st.kv_seen = True
                fact("kv_mem_gib", float(m.group(1)))
                phase("kv-cache")
                return
            m = VL_KV_TOKENS.search(msg)
            if m:
                st.kv_seen = True
                tokens = _int(m.group(1))
                if st.kv_tokens is None:
                    st.kv_tokens = tokens
                fact("kv_tokens", tokens)
                phase("kv-cache")
                m2 = VL_MAX_CONC.search(msg)
                if m2:
                    fact("max_concurrency", float(m2.group(2)))
                return
        if "Maximum concurrency for" in msg:
            m = VL_MAX_CONC.search(msg)
            if m:
                fact("max_concurrency", float(m.group(2)))
            return
        if "init engine" in msg:
            m = VL_ENGINE_INIT.search(msg)
            if m:
                fact("engine_init_seconds", float(m.group(1)))
            return
        if VL_READY in msg and self.state.engine == "vllm":
            st.ready_line = ln.text.strip()
            phase("ready", 1.0)
            return

    def _stats(self, msg: str, ln: LogLine, no: int, events: list[LogEvent]) -> None:
        if "Decode batch" in msg or "Prefill batch" in msg:
            vals: dict[str, float | int | None] = {}
            for name, rx in SG_STAT_FIELDS.items():
                m = rx.search(msg)
                if m:
                    g = next(x for x in m.groups() if x is not None)
                    vals[name] = int(g) if name in ("running", "queued") else float(g)
            kind = "decode" if "Decode batch" in msg else "prefill"
            ev = StatEvent("sglang", msg.strip(), ln.time, no, kind, **vals)  # type: ignore[arg-type]
        else:
            m = VL_STATS.search(msg)
            if not m:
                return
            kv = VL_KV_USAGE.search(msg)
            hit = VL_PREFIX_HIT.search(msg)
            ev = StatEvent(
                "vllm",
                msg.strip(),
                ln.time,
                no,
                "engine",
                running=int(m.group(3)),
                queued=int(m.group(4)),
                prompt_throughput=float(m.group(1)),
                gen_throughput=float(m.group(2)),
                token_usage=float(kv.group(1)) / 100 if kv else None,
                prefix_hit_rate=float(hit.group(1)) / 100 if hit else None,
            )
        self.state.last_stat = ev
        events.append(ev)


_RANKED_FACTS = frozenset({"kv_tokens", "kv_size_gb", "weights_mem_gb", "kv_mem_gib", "graph_seconds", "graph_mem_gb"})


def _rank_zero(rank: str) -> bool:
    """True for the main process or rank 0 ('', 'TP0', 'Worker_TP0', 'EngineCore_DP0', 'VllmWorker0')."""
    return all(int(n) == 0 for n in re.findall(r"\d+", rank))


def parse_text(text: str, engine: str | None = None) -> tuple[ParseState, list[LogEvent]]:
    """Parse a whole log (a file's text) at once."""
    p = LogParser(engine)
    events = p.feed_text(text)
    events += p.finish()
    return p.state, events


def parse_file(path: str, engine: str | None = None, *, skip_source_header: bool = True) -> tuple[ParseState, list[LogEvent]]:
    p = LogParser(engine)
    events: list[LogEvent] = []
    with open(path, "rb") as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            events += p.feed(chunk)
    events += p.finish()
    return p.state, events


def iter_events(chunks: Iterable[bytes], engine: str | None = None) -> Iterator[LogEvent]:
    p = LogParser(engine)
    for c in chunks:
        yield from p.feed(c)
    yield from p.finish()


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
        if ev.total is not None:
            d["n"], d["total"] = ev.n, ev.total
        if ev.label:
            d["label"] = ev.label
        if ev.done:
            d["done"] = True
        return d
    if isinstance(ev, FactEvent):
        return {"event": "fact", "name": ev.name, "value": ev.value, "time": ev.time, "message": ev.message, "line": ev.line_no}
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
            "context": list(ev.context[-5:]),
        }
    d = {k: getattr(ev, k) for k in ev.__dataclass_fields__}  # type: ignore[union-attr]
    return d


__all__ = [
    "ENGINES",
    "ErrorEvent",
    "FactEvent",
    "LogEvent",
    "LogLine",
    "LogParser",
    "PHASES",
    "ParseState",
    "PhaseEvent",
    "StatEvent",
    "classify",
    "clean_line",
    "event_to_json",
    "parse_file",
    "parse_text",
    "pick_failure",
    "replace",
    "severity",
]
