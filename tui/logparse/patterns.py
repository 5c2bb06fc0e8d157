"""The engines' log line formats: prefixes, the startup and stat lines, and the fatal texts by class."""

from __future__ import annotations

import re
from typing import NamedTuple

from tunedeck.util.safety import redact_text, safe_line

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
VL_PROC = re.compile(r"^\(([^\s,()]+)(?: rank=(\d+))? pid=(\d+)(?:, ip=[\w.:-]+)?\)\s*")
VL_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[?([^\]\s]+)\] ")
UVICORN = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")

TQDM = re.compile(r"(\d+)%\|[^|]*\| (\d+)/(\d+) \[")
SHARDS = re.compile(
    r"((?:Loading safetensors|Loading pt|Loading npcache|Loading gguf|Multi-thread loading)"
    r"[\w ]*? shards(?: \(eager\))?):\s+(\d+)% Completed \| (\d+)/(\d+)"
)
SG_GRAPH_BEGIN = re.compile(r"Capture (?:([\w -]+?) CUDA|cuda) graph begin\.")
SG_GRAPH_PROG = re.compile(
    r"Capturing (batches|num tokens) \((?:bs|num_tokens)=(\d+) avail_mem=([\d.]+) GB\):\s+(\d+)%\|[^|]*\| (\d+)/(\d+)"
)
SG_GRAPH_END = re.compile(r"Capture (?:([\w -]+?) CUDA|cuda) graph end\.(?:.*?(?:elapsed=|Time elapsed: )([\d.]+) ?s)?")
UVICORN_RUNNING = re.compile(r"Uvicorn running on (?:(?:unix )?socket \('([^']*)', (\d+)\)|(\S+))")
UVICORN_STARTED = re.compile(r"Started server process \[(\d+)\]")

#: V0's capture start (no progress bar in the older versions)
VL_GRAPH_BEGIN = re.compile(r"Capturing the model for CUDA graphs|Capturing cudagraphs for decoding")
VL_GRAPH_PROG = re.compile(r"Capturing CUDA graph(?:s| shapes)(?: \(([^)]*)\))?:\s+(\d+)%\|[^|]*\| (\d+)/(\d+)")
VL_GRAPH_DONE = re.compile(r"Graph capturing finished in (\d+) secs?(?:, took ([\d.]+) GiB)?")
#: lines that open a new server start: a restart in the same log begins a new attempt
VL_ATTEMPT = re.compile(r"vLLM API server version |non-default args: |^args: Namespace\(")

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

#: the engines' lines that report a crash of one of their parts (a scheduler, a worker, the engine
#: core) whose cause is logged elsewhere: each one is a crash (CLASSIFIER) and a wrapper of the
#: cause above it (WRAPPER_RE)
_CRASH_REPORTS = (
    r"Scheduler hit an exception|\w*Manager hit an exception|Received sigquit from a child process|"
    r"Engine core initialization failed|Initialization failed\. warmup error|EngineCore failed to start|"
    r"WorkerProc failed to start|EngineDeadError|EngineCore encountered a fatal error|"
    r"scheduler is dead|Child process unexpectedly failed|died unexpectedly|"
    r"(?:[Mm]ain|[Pp]arent) process (?:has )?(?:disappeared|died)"
)

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
    (
        "rendezvous",
        re.compile(
            r"Timed out after \d+ seconds waiting for clients|"
            r"client socket has timed out after \d+ms while trying to connect to"
        ),
        "distributed rendezvous timed out",
    ),
    (
        "nccl-timeout",
        re.compile(
            r"Watchdog caught collective operation timeout|[Cc]ollective operation timeout|"
            r"due to collective timeout|NCCL communicator was aborted on rank"
        ),
        "NCCL collective operation timed out (watchdog)",
    ),
    (
        "cuda-driver",
        re.compile(
            r"forward compatibility was attempted on non supported HW|Error 804\b|"
            r"driver version is insufficient for CUDA runtime version|NVIDIA driver on your system is too old|"
            r"cudaErrorInsufficientDriver|cudaErrorCompatNotSupportedOnDevice|Found no NVIDIA driver on your system"
        ),
        "the CUDA driver does not fit the CUDA runtime",
    ),
    (
        "hf-auth",
        re.compile(
            r"GatedRepoError|RepositoryNotFoundError|\b40[134] Client Error|access to it and be authenticated|"
            r"trying to access a gated repo|Cannot access gated repo|Invalid user token|"
            r"is not a valid model identifier listed on"
        ),
        "Hugging Face refused the model download (auth, gated or not found)",
    ),
    (
        "remote-code",
        re.compile(
            r"contains custom code which must be executed|requires you to execute the \w+ file in that repo|"
            r"trust_remote_code=True` to (?:allow|remove)"
        ),
        "the model needs its own code (--trust-remote-code)",
    ),
    (
        "disk-full",
        re.compile(r"No space left on device|\[Errno 28\]|os error 28\b|Disk quota exceeded"),
        "disk full",
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
    (
        "watchdog",
        re.compile(r"watchdog timeout|Health check failed\. Server couldn't get a response"),
        "watchdog timeout",
    ),
    (
        "terminated",
        re.compile(
            r"^(?:Killed|Terminated)\s*$|KeyboardInterrupt: terminated|[Rr]eceived (?:signal )?SIG(?:TERM|INT|KILL|HUP)\b|"
            r"\bSIG(?:TERM|INT) received|[Rr]eceived signal (?:15|2|9)\b|[Ss]ignal (?:15|9) received"
        ),
        "terminated by a signal",
    ),
    (
        "ray-gpus",
        re.compile(
            r"Cannot provide a placement group requiring|Cannot provide a placement group of|"
            r"Current node has no GPU available|"
            r"number of required GPUs exceeds the total number of available GPUs in the placement group\. Required"
        ),
        "the Ray cluster has too few GPUs for the placement group",
    ),
    (
        "crash",
        re.compile(
            _CRASH_REPORTS + r"|Segmentation fault|core dumped|Fatal Python error|"
            r"terminate called (?:after throwing|without an active exception)"
        ),
        "engine crashed",
    ),
)
#: lines that only report a failure found elsewhere (the cause sits above them): the engines'
#: crash reports, and the frames and pointers of a traceback that wraps another
WRAPPER_RE = re.compile(
    _CRASH_REPORTS + r"|Worker proc \S+ died unexpectedly|Process \S+:$|child process|See root cause above|"
    r"terminate called |Exception in worker \S+ while processing method|^(?:Base)?ExceptionGroup: |"
    r"[Ss]ee (?:the )?stack trace (?:above )?for (?:the )?root cause|check the stack trace above"
)
#: a Python exception line: "ValueError: …", "torch.AcceleratorError: …", "KeyboardInterrupt: terminated", "AssertionError"
EXC_LINE_RE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)|Exception|KeyboardInterrupt|SystemExit))"
    r"(?:\([\w.]+\))?(?::\s?(.*))?$"
)
#: the exception line that ends a traceback's frames, in the forms EXC_LINE_RE misses: a dotted
#: name ("torch._dynamo.exc.Unsupported: …", "triton.runtime.errors.OutOfResources: …") or a
#: CamelCase name with a message ("OutOfResources: out of resource: shared memory")
TB_EXC_LINE_RE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?:\([\w.]+\))?(?::\s(.*)|$)"
)
TB_START = "Traceback (most recent call last)"
TB_CHAIN = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)"
)
#: a Ray placement group that could not get its GPUs (context for a later termination)
RAY_PG_WAIT = re.compile(r"placement group|resource request cannot be scheduled|Current node has no GPU available")
#: one pass over a line decides whether the classifier needs to look at it
_FATAL_ANY = re.compile("|".join(f"(?:{rx.pattern})" for _, rx, _ in CLASSIFIER))
#: every fatal text above holds one of these; plain substring tests are much cheaper than the
#: regex alternation, so most lines never reach it (tests check each classifier example)
_FATAL_KEYS = (
    "ailed",
    "emory",
    "NCCL",
    "DistBackend",
    "in use",
    "not available",
    "error: ",
    "watchdog",
    "Killed",
    "Terminated",
    "KeyboardInterrupt",
    "SIG",
    "ignal",
    "exception",
    "sigquit",
    "EngineDead",
    "fatal",
    "Fatal",
    "Segmentation",
    "core dumped",
    "is dead",
    "unexpectedly",
    "waiting for clients",
    "has timed out after",
    "placement group",
    "no GPU available",
    "ollective",
    "Error 804",
    "driver",
    "Driver",
    "forward compat",
    "CompatNotSupported",
    "GatedRepo",
    "RepositoryNotFound",
    "Client Error",
    "gated repo",
    "authenticated",
    "Invalid user token",
    "model identifier",
    "custom code",
    "requires you to execute",
    "trust_remote_code",
    "No space left",
    "Errno 28",
    "os error 28",
    "Disk quota",
    "disappeared",
    "process died",
    "process has",
    "terminate called",
)


def might_be_fatal(msg: str) -> bool:
    """Cheap pre-filter: False means no classifier pattern can match ``msg``."""
    for k in _FATAL_KEYS:
        if k in msg:
            return _FATAL_ANY.search(msg) is not None
    return False


def classify(text: str) -> tuple[str, str] | None:
    """(kind, cause) for a fatal text, or None."""
    for kind, rx, cause in CLASSIFIER:
        m = rx.search(text)
        if m:
            return kind, refine_cause(kind, cause, text)
    return None


def refine_cause(kind: str, cause: str, text: str) -> str:
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
        m = re.search(
            r"error: (unrecognized arguments: \S+|argument \S+: invalid choice: '[^']*'|argument \S+|.*)", text
        )
        return f"unknown flag or invalid value ({m.group(1)[:80]})" if m else cause
    if kind == "port":
        m = re.search(r"\('[^']*', (\d+)\)|port (\d+)|at (\d+) is not", text)
        port = next((g for g in (m.groups() if m else ()) if g), None)
        return f"port {port} already in use" if port else cause
    if kind == "rendezvous":
        m = re.search(r"Timed out after (\d+) seconds waiting for clients\. (\d+/\d+) clients joined", text)
        if m:
            return f"distributed rendezvous timed out after {m.group(1)} s: {m.group(2)} ranks joined"
        m = re.search(r"timed out after (\d+)ms while trying to connect to \(([^)]*)\)", text)
        if m:
            return f"could not reach the rendezvous at {m.group(2)} for {int(m.group(1)) // 1000} s"
        return cause
    if kind == "nccl":
        m = re.search(r"NCCL error:? (?:in: \S+ )?(.*)", text)
        return f"NCCL error: {m.group(1)[:80]}" if m and m.group(1) else cause
    if kind == "capture-failed":
        m = re.search(r"Capture cuda graph failed: (.*)", text)
        return f"CUDA graph capture failed: {m.group(1)[:80]}" if m else cause
    if kind == "ray-gpus":
        m = re.search(r"placement group requiring ([\d.]+) GPUs", text)
        if m:
            return f"the Ray cluster cannot provide the {float(m.group(1)):g} GPUs (tp × pp) of the placement group"
        if "Current node has no GPU" in text:
            return "the engine's Ray node has no GPU"
        return cause
    if kind == "hf-auth":
        m = re.search(r"\b(40[134]) Client Error", text)
        code = m.group(1) if m else ""
        if code == "404" or "NotFound" in text or "Not Found" in text or "not a valid model identifier" in text:
            return "Hugging Face: model not found (check the model id, or log in for a private repo)"
        if "gated" in text.lower() or code == "403":
            return "Hugging Face: gated model (accept its licence and log in: HF_TOKEN)"
        return "Hugging Face: not authenticated (set HF_TOKEN or huggingface-cli login)"
    if kind == "cuda-driver":
        if "804" in text or "forward compatibility" in text or "CompatNotSupported" in text:
            return "CUDA forward compatibility is not supported on this GPU (error 804: drop the compat libraries)"
        if "Found no NVIDIA driver" in text:
            return "no NVIDIA driver found"
        return "the NVIDIA driver is older than the CUDA runtime (update the driver or use an older image)"
    if kind == "terminated":
        m = re.search(r"SIG[A-Z]+|signal \d+", text)
        if m:
            return f"terminated by {m.group(0)}"
        if text.strip() == "Killed":
            return "killed (SIGKILL: the OOM killer or a kill -9)"
        return cause
    return cause


def exc_cause(exc: str) -> str:
    """The cause of a generic crash: the exception line itself, shortened."""
    exc = exc.strip()
    return exc if len(exc) <= 160 else exc[:157] + "..."


# --------------------------------------------------------------------------- line cleaning


class LogLine(NamedTuple):
    """A cleaned line: ``text`` without ANSI and outer prefixes; ``msg`` the message
    without the engine prefix; ``rank`` e.g. 'TP0' or 'Worker_TP0'; ``level``.
    (A named tuple: one is made per line, and a tuple is much cheaper to make than a frozen
    dataclass.)"""

    raw: str
    text: str
    msg: str
    time: str | None
    rank: str
    level: str
    engine_hint: str | None
    #: the compose service or pod that wrote the line ('' without such a prefix)
    source: str = ""
    #: the pid of a vLLM "(Proc pid=N)" prefix (None without one)
    pid: int | None = None


def clean_line(raw: str) -> LogLine:
    """One segment of a log line (no ``\\r`` or ``\\n``) as :class:`LogLine`."""
    # host text: an echoed secret is redacted and escape sequences go before anything is kept
    return clean_safe_line(safe_line(redact_text(raw)))


def clean_safe_line(raw: str) -> LogLine:
    """:func:`clean_line` of a segment already redacted and made safe (``safe_line(redact_text(…))``,
    as the run view's line splitter cuts them): its prefixes read, nothing scanned again."""
    s = raw
    s = s.rstrip()
    source = ""
    pid: int | None = None
    if s[:1].isdigit():
        s = DOCKER_TS_RE.sub("", s, count=1)
    elif "| " in s[:60]:
        m = COMPOSE_RE.match(s)
        if m and "%|" not in s[: m.end()]:
            source = s[: m.end()].split("|", 1)[0].strip()
            s = s[m.end() :]
    if s.startswith("[pod/"):
        m = KUBE_RE.match(s)
        if m:
            source = s[1 : m.end() - 2]
            s = s[m.end() :]
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
        while msg[:1] == "(":
            m2 = VL_PROC.match(msg)
            if not m2:
                break
            hint = "vllm"
            proc = m2.group(1)
            if not rank:
                rank = proc if m2.group(2) is None else f"{proc}{m2.group(2)}"
                pid = int(m2.group(3))
            msg = msg[m2.end() :]
        m3 = VL_LEVEL.match(msg) if msg[:1] in "DIWEC" else None
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
    return LogLine(raw, text, msg, ts, rank, level, hint, source, pid)


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
        or s.strip() == "Killed"
    ):
        return "error"
    if "WARNING" in head or "WARN " in head or "Warning:" in head or "warnings.warn" in s:
        return "warning"
    return "info"


def to_int(s: str) -> int:
    return int(s.replace(",", ""))
