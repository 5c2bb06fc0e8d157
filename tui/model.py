"""Immutable snapshots shared by the core and the UI, and the NA sentinel.

Collectors build these; widgets only read them. A value the driver or the
server does not report is ``NA`` (prints ``N/A``), never 0. *Field not
reported* (NA) is different from *collector failed*, which is a state on
the snapshot that owns the field (for example ``GpuStatus.state``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union


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
        return format("N/A", spec if spec and spec[-1] in "<>^" or not spec else "")

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
        status.state, len(gpus), model, len(names),
        util_mean=sum(util) / len(util) if util else NA,
        mem_used=total("memory_used"), mem_total=total("memory_total"),
        power_draw=total("power_draw"), power_limit=total("power_limit"),
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
