"""Immutable snapshots shared by the core and the UI, and the NA sentinel.

Collectors build these; widgets only read them. A value the driver or the
server does not report is ``NA`` (prints ``N/A``), never 0. *Field not
reported* (NA) is different from *collector failed*, which is a state on
the snapshot that owns the field (for example ``GpuStatus.state``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Union


class NAType:
    """A value that is not available. Falsy, prints ``N/A``, arithmetic gives nan."""

    __slots__ = ()
    _instance: "NAType | None" = None

    def __new__(cls) -> "NAType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NA"

    def __str__(self) -> str:
        return "N/A"

    def __format__(self, spec: str) -> str:
        return format("N/A", spec if (spec and spec[-1] in "<>^") or not spec else "")

    def __bool__(self) -> bool:
        return False

    def __float__(self) -> float:
        return math.nan

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return hash("tunedeck.NA")

    def _nan(self, *_: Any) -> float:
        return math.nan

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _nan
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _nan

    def __reduce__(self) -> str:
        return "NA"


NA = NAType()

Num = Union[float, int, NAType]


def is_na(value: object) -> bool:
    return value is NA


def na_to_none(value: Any) -> Any:
    """For JSON output: NA becomes null."""
    return None if value is NA else value


def jsonable(obj: Any) -> Any:
    """Turn snapshots (dataclasses, tuples, NA) into JSON-ready values."""
    import dataclasses
    import enum

    if obj is NA:
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one instant (from ``nvidia-smi --query-gpu``)."""

    index: int
    uuid: str
    name: str
    utilization: Num = NA  # percent
    memory_used: Num = NA  # MiB
    memory_total: Num = NA  # MiB
    temperature: Num = NA  # degrees C
    power_draw: Num = NA  # W
    power_limit: Num = NA  # W
    clock_sm: Num = NA  # MHz
    clock_mem: Num = NA  # MHz


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU (``--query-compute-apps``), joined to its index via uuid."""

    pid: int
    name: str
    gpu_uuid: str
    gpu_index: int | None
    used_memory: Num = NA  # MiB


@dataclass(frozen=True)
class GpuStatus:
    """All GPUs of one host, or why they could not be read.

    ``state`` is ``ok`` or one of the error states (``driver-not-loaded``,
    ``nvml-not-found``, ``inforom-corrupt``, ``gpu-lost``, ``nvml-mismatch``,
    ``unresponsive``, ``no-nvidia-smi``, ``host-unreachable``, ``error``).
    """

    state: str
    gpus: tuple[GpuSnapshot, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    message: str = ""
    time: float = 0.0
    #: Wall-clock time of the next attempt after a failure (0.0: none scheduled);
    #: lets the UI show a retry countdown.
    retry_at: float = 0.0


@dataclass(frozen=True)
class GpuSummary:
    """The GPUs of one host in one line (the fleet view's host row, ``tunedeck status`` with
    several hosts). Sums are NA unless every GPU reports the field: a partial sum would
    read as the whole; the mean and the maximum use the GPUs that report."""

    state: str
    """The :class:`GpuStatus` state (``ok`` or why the GPUs could not be read)."""
    count: int = 0
    model: str = ""
    """The most common GPU name (``NVIDIA `` removed); ``""`` without GPUs."""
    models: int = 0
    """How many different GPU names the host has (> 1: a mixed host)."""
    util_mean: Num = NA  # percent
    mem_used: Num = NA  # MiB, all GPUs
    mem_total: Num = NA  # MiB, all GPUs
    power_draw: Num = NA  # W, all GPUs
    power_limit: Num = NA  # W, all GPUs
    temp_max: Num = NA  # degrees C, the hottest GPU


def _reported(values: "list[Any]") -> "list[float]":
    out = []
    for v in values:
        if v is NA or v is None or isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if not math.isnan(f):
            out.append(f)
    return out


def summarise_gpus(status: GpuStatus) -> GpuSummary:
    """One :class:`GpuSummary` for ``status`` (NA where the GPUs do not tell)."""
    gpus = status.gpus
    if not gpus:
        return GpuSummary(status.state)
    names: dict[str, int] = {}
    for g in gpus:
        name = g.name.removeprefix("NVIDIA ").strip() or "N/A"
        names[name] = names.get(name, 0) + 1
    model = max(names, key=lambda k: names[k])

    def total(field_name: str) -> Num:
        vals = _reported([getattr(g, field_name) for g in gpus])
        return sum(vals) if len(vals) == len(gpus) else NA

    util = _reported([g.utilization for g in gpus])
    temps = _reported([g.temperature for g in gpus])
    return GpuSummary(
        status.state,
        len(gpus),
        model,
        len(names),
        util_mean=sum(util) / len(util) if util else NA,
        mem_used=total("memory_used"),
        mem_total=total("memory_total"),
        power_draw=total("power_draw"),
        power_limit=total("power_limit"),
        temp_max=max(temps) if temps else NA,
    )


# --------------------------------------------------------------------------- host


@dataclass(frozen=True)
class HostStats:
    """CPU, memory, load and uptime of the target host."""

    hostname: str
    cpu_percent: Num = NA
    cpu_count: Num = NA
    mem_used: Num = NA  # bytes
    mem_total: Num = NA  # bytes
    load1: Num = NA
    load5: Num = NA
    load15: Num = NA
    uptime: Num = NA  # seconds
    time: float = 0.0


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class ServerStats:
    """One inference server as seen through its HTTP endpoints.

    ``state`` is ``starting`` | ``ready`` | ``unhealthy`` | ``down``.
    ``metrics_state`` is ``ok`` | ``disabled`` (SGLang without --enable-metrics)
    | ``error``.
    """

    name: str
    engine: str
    url: str
    state: str
    model: str = ""
    port: int | None = None
    running: Num = NA
    waiting: Num = NA
    kv_cache_usage: Num = NA  # 0..1
    gen_throughput: Num = NA  # tokens/s
    ttft_p50: Num = NA  # seconds
    ttft_mean: Num = NA  # seconds
    spec_accept_rate: Num = NA  # 0..1
    metrics_state: str = "ok"
    message: str = ""
    run_id: str | None = None
    time: float = 0.0


@dataclass(frozen=True)
class StatusSnapshot:
    """What ``tunedeck status`` prints and the status screen shows."""

    target: str
    gpus: GpuStatus
    host: HostStats | None
    servers: tuple[ServerStats, ...] = field(default_factory=tuple)
    host_error: str = ""


# --------------------------------------------------------------------------- startup


@dataclass(frozen=True)
class StartupProgress:
    """Where a server's startup stands (built by the startup tracker, shown by the
    startup-progress widget and ``tunedeck launch --wait``).

    ``state``: ``starting`` | ``ready`` | ``stalled`` (alive, not moving: never
    ``failed`` while the process lives) | ``failed`` | ``stopped`` (by the user) |
    ``exited`` | ``unknown``.
    ``fraction`` is the overall 0..1 estimate; ``phase_progress`` 0..1 inside the
    phase when the log shows a count (``phase_n``/``phase_total``). ``eta`` is in
    seconds (None when there is no basis yet). ``stalled`` is set after the
    configured time without log bytes, progress or GPU-memory change.
    ``diagnosis`` is a one-line cause and ``proof`` the log line that shows it.
    """

    run_id: str
    engine: str
    state: str
    phase: str | None = None
    phase_label: str = ""
    phase_progress: float | None = None
    phase_n: int | None = None
    phase_total: int | None = None
    fraction: float = 0.0
    elapsed: float = 0.0
    eta: float | None = None
    eta_source: str = ""  # "history" | "rate" | ""
    stalled: bool = False
    stalled_for: float = 0.0
    diagnosis: str | None = None
    proof: str | None = None
    health: str = "unknown"  # unknown | down | starting | ok
    gpu_memory: tuple[float, ...] = ()  # MiB per GPU
    message: str = ""
    time: float = 0.0


@dataclass(frozen=True)
class LinkState:
    """The connection state of one target host, as the banner and header show it."""

    target: str
    """The host as the user named it."""
    state: str
    """``connecting`` | ``connected`` | ``unreachable`` (retrying) | ``failed`` (not retried:
    auth or host-key errors) | ``error`` (a collector crashed; restarted)."""
    attempt: int = 0
    """Failed attempts in a row (0 while connected)."""
    retry_at: float | None = None
    """``time.monotonic()`` of the next attempt, or None when none is scheduled."""
    last_error: str = ""
    """The last error's message."""
    kind: str = ""
    """The :class:`tunedeck.hostops.hosts.HostError` kind of the last error, if any."""

    @property
    def ok(self) -> bool:
        return self.state == "connected"


@dataclass(frozen=True)
class DeploymentSummary:
    """One multi-node deployment as the fleet view lists it (from its local record)."""

    deploy_id: str
    profile: str
    engine: str
    mode: str
    nodes: tuple[str, ...]
    """Its nodes as the profile names them, the head first."""
    status: str
    """``launching`` | ``starting`` | ``ready`` | ``failed`` | ``stalled`` | ``partial`` | ``stopped``."""
    http_port: int
    diagnosis: str | None = None
    first_failed: str | None = None
    created: float = 0.0
    targets: tuple[str | None, ...] = ()
    """For each node, the watched host it is (its target as the fleet names it), or None."""


# --------------------------------------------------------------------------- benchmarks

#: goodput target keys in the order they are shown, with their names
SLO_NAMES: tuple[tuple[str, str], ...] = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))


def _finite(summary: Mapping[str, Any], key: str) -> float | None:
    v = summary.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class ClientHealth:
    """The benchmark client's verdict on one level (from its summary).

    ``client_bound``: the client itself was the limit (its numbers understate the server);
    ``machine_busy``: other load on the client's machine delayed it. Each with its reason.
    """

    client_bound: bool = False
    client_bound_reason: str = ""
    machine_busy: bool = False
    machine_busy_reason: str = ""

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> "ClientHealth":
        client = summary.get("client")
        cl: Mapping[str, Any] = client if isinstance(client, Mapping) else {}
        return cls(
            bool(summary.get("client_bound")),
            str(cl.get("client_bound_reason") or ""),
            bool(summary.get("machine_busy")),
            str(cl.get("machine_busy_reason") or ""),
        )

    @property
    def ok(self) -> bool:
        return not (self.client_bound or self.machine_busy)

    @property
    def mark(self) -> str:
        """``ok``, ``client-bound``, ``machine busy`` or both."""
        on = [m for m, flag in (("client-bound", self.client_bound), ("machine busy", self.machine_busy)) if flag]
        return ", ".join(on) or "ok"

    def reasons(self) -> list[str]:
        """One line per verdict that holds: what it is and why."""
        out = []
        if self.client_bound:
            out.append("client-bound: " + (self.client_bound_reason or "the client was the limit"))
        if self.machine_busy:
            out.append("machine busy: " + (self.machine_busy_reason or "other load on the client machine"))
        return out


@dataclass(frozen=True)
class GoodputView:
    """Goodput of one benchmark level: live (``final`` False, so far) or from its summary.

    ``targets``: (key, ms) pairs in :data:`SLO_NAMES` order, empty when the run has no
    goodput targets. ``good``: completed requests within every target (None: not known).
    ``elapsed``: seconds the level has run (its duration when final).
    """

    targets: tuple[tuple[str, float], ...] = ()
    level: str = ""
    completed: int = 0
    good: int | None = None
    elapsed: float = 0.0
    final: bool = False

    @staticmethod
    def order(targets: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
        known = [(k, float(targets[k])) for k, _ in SLO_NAMES if k in targets]
        return tuple(known + sorted((str(k), float(v)) for k, v in targets.items() if k not in dict(SLO_NAMES)))

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], targets: Mapping[str, float], level: str = "") -> "GoodputView":
        """A finished level: ``request_goodput`` × ``duration`` is its count of good requests."""
        rate, dur = _finite(summary, "request_goodput"), _finite(summary, "duration") or 0.0
        good = None if rate is None or not targets else round(rate * dur)
        return cls(cls.order(targets), level, int(_finite(summary, "completed") or 0), good, dur, True)

    @property
    def share(self) -> float | None:
        """Good / completed (0..1); None before a request completed."""
        return self.good / self.completed if self.good is not None and self.completed else None

    @property
    def req_s(self) -> float | None:
        """Good requests per second of the level."""
        return self.good / self.elapsed if self.good is not None and self.elapsed > 0 else None


@dataclass(frozen=True)
class SweepLevel:
    """One finished level of a benchmark, as ``vllm bench serve``'s end report shows it.

    Latencies are ms; a level in which no request completed has None (N/A), never 0.
    ``goodput`` is req/s, None without targets.
    """

    label: str
    completed: int
    failed: int
    request_throughput: float | None = None
    output_throughput: float | None = None
    mean_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    p99_itl_ms: float | None = None
    goodput: float | None = None
    partial: bool = False
    health: ClientHealth = field(default_factory=ClientHealth)
    #: the server's counters over the level: prefix cache hits (%), speculative acceptance length
    prefix_cache_hit_pct: float | None = None
    spec_accept_length: float | None = None
    #: how late scheduled requests were sent (open loop, trace replay); None for a closed loop
    dispatch_lag_p99_ms: float | None = None
    #: the level's warnings about its own load and figures (dispatch behind, lifetime gauges)
    notes: tuple[str, ...] = ()

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], label: str) -> "SweepLevel":
        done = int(_finite(summary, "completed") or 0)

        def lat(key: str) -> float | None:
            return _finite(summary, key) if done else None

        hit = _finite(summary, "prefix_cache_hit_rate")

        return cls(
            label,
            done,
            int(_finite(summary, "failed") or 0),
            _finite(summary, "request_throughput"),
            _finite(summary, "output_throughput"),
            lat("mean_ttft_ms"),
            lat("p99_ttft_ms"),
            lat("mean_tpot_ms"),
            lat("p99_itl_ms"),
            _finite(summary, "request_goodput"),
            bool(summary.get("partial")),
            ClientHealth.from_summary(summary),
            None if hit is None else hit * 100.0,
            _finite(summary, "spec_decode_acceptance_length"),
            _finite(summary, "dispatch_lag_p99_ms"),
            tuple(_level_notes(summary)),
        )


def _level_notes(summary: Mapping[str, Any]) -> list[str]:
    out = []
    if summary.get("dispatch_behind"):
        p99 = _finite(summary, "dispatch_lag_p99_ms") or 0.0
        mx = _finite(summary, "dispatch_lag_max_ms") or 0.0
        out.append(
            f"dispatch fell behind its schedule (p99 {p99:.1f} ms, max {mx:.1f} ms): the load was lighter than asked"
        )
    note = summary.get("server_counters_note")
    if isinstance(note, str) and note and "not read" not in note:
        out.append("server counters: " + note)
    return out


@dataclass(frozen=True)
class SweepReport:
    """The finished levels of a run (``planned``: how many it announced)."""

    levels: tuple[SweepLevel, ...] = ()
    planned: int = 0

    @property
    def has_goodput(self) -> bool:
        return any(lv.goodput is not None for lv in self.levels)

    def has(self, key: str) -> bool:
        """Some level has a value for the optional column ``key`` (a SweepLevel field)."""
        return any(getattr(lv, key) is not None for lv in self.levels)

    @property
    def done(self) -> bool:
        return bool(self.levels) and len(self.levels) >= self.planned
