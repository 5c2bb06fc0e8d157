"""Parsers for ``nvidia-smi`` output (pure functions, no I/O).

Covers the CSV query modes (``--query-gpu``/``--query-compute-apps`` with or
without header and units), ``-L``, ``topo -m``, the default table view, and
the failure modes (exit codes and their messages). A value the driver does
not report (``[N/A]``, ``[Not Supported]``, ``N/A``, empty) becomes
:data:`tunedeck.model.NA`, never 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from tunedeck.hostside.smiloop import APPS_FIELDS, GPU_FIELDS
from tunedeck.model import NA, GpuProcess, GpuSnapshot, Num
from tunedeck.util.safety import safe_line

#: The fields the GPU collector queries, in order: the host sampler's (one list for both).
QUERY_GPU_FIELDS: tuple[str, ...] = GPU_FIELDS
QUERY_APPS_FIELDS: tuple[str, ...] = APPS_FIELDS

#: nvidia-smi field name -> GpuSnapshot attribute.
_GPU_ATTR = {
    "index": "index",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "name": "name",
    "gpu_name": "name",
    "utilization.gpu": "utilization",
    "memory.used": "memory_used",
    "memory.total": "memory_total",
    "temperature.gpu": "temperature",
    "power.draw": "power_draw",
    "power.draw.instant": "power_draw",
    "power.limit": "power_limit",
    "enforced.power.limit": "power_limit",
    "clocks.sm": "clock_sm",
    "clocks.current.sm": "clock_sm",
    "clocks.mem": "clock_mem",
    "clocks.current.memory": "clock_mem",
}

#: Fields whose values are text, never converted to numbers.
TEXT_FIELDS = frozenset(
    {
        "uuid",
        "gpu_uuid",
        "name",
        "gpu_name",
        "process_name",
        "driver_version",
        "vbios_version",
        "compute_cap",
        "pci.bus_id",
        "gpu_bus_id",
        "serial",
        "persistence_mode",
        "pstate",
        "display_mode",
        "compute_mode",
        "mig.mode.current",
        "mig.mode.pending",
        "timestamp",
        "inforom.img",
    }
)

_NA_TEXTS = frozenset(
    {
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "Not Supported",
        "[Unknown Error]",
        "[GPU is lost]",
        "[Requested functionality has been deprecated]",
        "[Insufficient Permissions]",
        "",
    }
)
_UNIT_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:%|MiB|GiB|KiB|W|MHz|C|°C|s|ms|mW)?$")
_HEADER_CELL_RE = re.compile(r"^[a-z][a-z0-9_.]*(?: \[[^\]]*\])?$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# ------------------------------------------------------------------ failure states

#: Every GpuStatus.state the collectors produce, with a short human label.
STATE_LABELS: dict[str, str] = {
    "ok": "ok",
    "starting": "connecting",
    "driver-not-loaded": "NVIDIA driver not loaded",
    "nvml-not-found": "NVML library not found",
    "inforom-corrupt": "infoROM corrupted",
    "gpu-lost": "GPU fell off the bus",
    "nvml-mismatch": "driver/library version mismatch",
    "unresponsive": "nvidia-smi unresponsive",
    "no-nvidia-smi": "nvidia-smi not found",
    "no-devices": "no NVIDIA GPUs found",
    "insufficient-permissions": "insufficient permissions",
    "host-unreachable": "host unreachable",
    "error": "nvidia-smi failed",
}

#: nvidia-smi exit status -> state (documented codes; 124 is from ``timeout``,
#: 127 from the shell/``timeout`` when nvidia-smi is not on PATH).
EXIT_STATES: dict[int, str] = {
    4: "insufficient-permissions",
    6: "no-devices",
    9: "driver-not-loaded",
    12: "nvml-not-found",
    14: "inforom-corrupt",
    15: "gpu-lost",
    18: "nvml-mismatch",
    124: "unresponsive",
    137: "unresponsive",  # timeout -k sent KILL
    127: "no-nvidia-smi",
}

#: Message fragments (lower case) -> state, checked in order.
_MESSAGE_STATES: tuple[tuple[str, str], ...] = (
    ("driver/library version mismatch", "nvml-mismatch"),
    ("couldn't communicate with the nvidia driver", "driver-not-loaded"),
    ("could not communicate with the nvidia driver", "driver-not-loaded"),
    ("nvml shared library not found", "nvml-not-found"),
    ("libnvidia-ml.so", "nvml-not-found"),
    ("inforom is corrupted", "inforom-corrupt"),
    ("gpu is lost", "gpu-lost"),
    ("fallen off the bus", "gpu-lost"),
    ("no devices were found", "no-devices"),
    ("insufficient permissions", "insufficient-permissions"),
    ("nvidia-smi: not found", "no-nvidia-smi"),
    ("nvidia-smi: command not found", "no-nvidia-smi"),
    ("no such file or directory", "no-nvidia-smi"),
)


def classify_failure(exit_status: int | None, output: str = "") -> tuple[str, str] | None:
    """Return ``(state, message)`` for a failed nvidia-smi run, or None when it looks fine.

    ``output`` is stdout and stderr together (nvidia-smi prints its failure
    messages on stdout). A recognised message wins over an unknown exit code;
    a known exit code wins over the message.
    """
    text = strip_ansi(output or "")
    low = text.lower()
    msg = _first_message(text)
    if exit_status in EXIT_STATES:
        state = EXIT_STATES[exit_status]
        if exit_status == 127 and "nvidia-smi" not in low and low.strip():
            # the wrapper (timeout, sh) itself is missing
            return "error", msg or f"command not found (exit {exit_status})"
        return state, msg or f"{STATE_LABELS[state]} (exit {exit_status})"
    for needle, state in _MESSAGE_STATES:
        if needle in low:
            return state, msg
    if exit_status not in (0, None):
        return "error", msg or f"nvidia-smi exited with status {exit_status}"
    return None


def _first_message(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("# source:")]
    return " ".join(lines[:2])[:300]


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def strip_source_line(text: str) -> str:
    """Drop the ``# source:`` provenance line of the reference fixtures."""
    if text.startswith("# source:"):
        nl = text.find("\n")
        return "" if nl < 0 else text[nl + 1 :]
    return text


# ------------------------------------------------------------------ values


def parse_value(cell: str, field_name: str = "") -> Any:
    """One CSV cell: NA for not-available, number for numeric fields (units stripped), else
    the text made safe to show (:func:`safe_line`: it came from the host)."""
    cell = safe_line(cell.strip())
    if cell in _NA_TEXTS or (cell.startswith("[") and cell.endswith("]")):
        return NA
    if field_name in TEXT_FIELDS:
        return cell
    m = _UNIT_RE.match(cell)
    if not m:
        return cell
    num = m.group(1)
    return float(num) if "." in num else int(num)


def _split_row(line: str) -> list[str]:
    # nvidia-smi separates with ", "; GPU names contain spaces but no commas.
    return [c.strip() for c in line.split(",")]


def _header_name(cell: str) -> str:
    return cell.split(" [", 1)[0].strip()


def _looks_like_header(cells: Sequence[str]) -> bool:
    return bool(cells) and all(_HEADER_CELL_RE.match(c) for c in cells) and not all(c.isdigit() for c in cells)


@dataclass(frozen=True, slots=True)
class CsvTable:
    fields: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]


def parse_csv(text: str, fields: Sequence[str] | None = None) -> CsvTable:
    """Parse ``--format=csv[,noheader][,nounits]`` output.

    With a header row its names (units in brackets dropped) are used;
    otherwise ``fields`` names the columns (``col0``… when not given).
    Blank lines and a leading ``# source:`` line are skipped.
    """
    lines = [ln for ln in strip_ansi(strip_source_line(text)).splitlines() if ln.strip()]
    names: tuple[str, ...] = tuple(fields) if fields else ()
    if lines:
        first = _split_row(lines[0])
        if _looks_like_header(first):
            names = tuple(_header_name(c) for c in first)
            lines = lines[1:]
    rows = []
    for line in lines:
        cells = _split_row(line)
        if not names:
            names = tuple(f"col{i}" for i in range(len(cells)))
        if len(cells) > len(names) and "name" in names:
            # a GPU name with a comma: glue the surplus back into the name column
            i = names.index("name")
            extra = len(cells) - len(names)
            cells = cells[:i] + [", ".join(cells[i : i + extra + 1])] + cells[i + extra + 1 :]
        if len(cells) != len(names):
            continue  # an error message or a truncated line, not a row
        row = {n: parse_value(c, n) for n, c in zip(names, cells)}
        if "index" in row and not isinstance(row["index"], int):
            continue
        rows.append(row)
    return CsvTable(names, tuple(rows))


def _int_or(value: Any, default: int) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _num(value: Any) -> Num:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return NA


def gpus_from_rows(rows: Iterable[dict[str, Any]]) -> tuple[GpuSnapshot, ...]:
    """GpuSnapshots from parsed query rows; a missing index column means row order."""
    out = []
    for i, row in enumerate(rows):
        kw: dict[str, Any] = {}
        for fname, value in row.items():
            attr = _GPU_ATTR.get(fname)
            if attr is None or attr in kw:
                continue
            if attr in ("uuid", "name"):
                kw[attr] = "" if value is NA else str(value)
            elif attr == "index":
                kw[attr] = _int_or(value, i)
            else:
                kw[attr] = _num(value)
        kw.setdefault("index", i)
        kw.setdefault("uuid", "")
        kw.setdefault("name", "")
        out.append(GpuSnapshot(**kw))
    return tuple(out)


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> tuple[GpuSnapshot, ...]:
    """``--query-gpu`` output (any csv variant) -> GpuSnapshots."""
    return gpus_from_rows(parse_csv(text, fields).rows)


def parse_gpu_line(line: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> GpuSnapshot | None:
    """One noheader line of the collector's query; None for a line that is not a GPU row."""
    cells = _split_row(line)
    if len(cells) < len(fields) or not cells[0].strip().isdigit():
        return None
    table = parse_csv(line, fields)
    if not table.rows:
        return None
    return gpus_from_rows(table.rows)[0]


def parse_compute_apps(
    text: str,
    uuid_to_index: dict[str, int] | None = None,
    fields: Sequence[str] = QUERY_APPS_FIELDS,
) -> tuple[GpuProcess, ...]:
    """``--query-compute-apps=pid,gpu_uuid,used_memory,process_name`` (empty when idle)."""
    uuid_to_index = uuid_to_index or {}
    procs = []
    for row in parse_csv(text, fields).rows:
        pid = row.get("pid")
        if not isinstance(pid, int):
            continue
        uuid = row.get("gpu_uuid")
        uuid = "" if uuid is NA or uuid is None else str(uuid)
        name = row.get("process_name")
        procs.append(
            GpuProcess(
                pid=pid,
                name="" if name is NA or name is None else str(name),
                gpu_uuid=uuid,
                gpu_index=uuid_to_index.get(uuid),
                used_memory=_num(row.get("used_memory", NA)),
            )
        )
    return tuple(procs)


def join_processes(procs: Iterable[GpuProcess], gpus: Iterable[GpuSnapshot]) -> tuple[GpuProcess, ...]:
    """Fill ``gpu_index`` from the GPUs' uuids."""
    idx = {g.uuid: g.index for g in gpus if g.uuid}
    out = []
    for p in procs:
        gi = idx.get(p.gpu_uuid, p.gpu_index)
        out.append(p if gi == p.gpu_index else GpuProcess(p.pid, p.name, p.gpu_uuid, gi, p.used_memory))
    return tuple(out)


def parse_compute_cap(value: Any) -> tuple[int, int] | None:
    """``compute_cap`` cell (``12.0``, ``9.0``) -> (major, minor)."""
    if value is NA or value is None:
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(value))
    return (int(m.group(1)), int(m.group(2))) if m else None


# ------------------------------------------------------------------ -L

_L_RE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_MIG_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)")


@dataclass(frozen=True, slots=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig: tuple[tuple[str, int, str], ...] = ()  # (profile, device, uuid)


def parse_list(text: str) -> tuple[ListedGpu, ...]:
    """``nvidia-smi -L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)`` plus MIG lines."""
    gpus: list[ListedGpu] = []
    for line in strip_ansi(strip_source_line(text)).splitlines():
        m = _L_RE.match(line)
        if m:
            gpus.append(ListedGpu(int(m.group(1)), m.group(2).strip(), m.group(3) or ""))
            continue
        m = _MIG_RE.match(line)
        if m and gpus:
            g = gpus[-1]
            gpus[-1] = ListedGpu(g.index, g.name, g.uuid, g.mig + ((m.group(1), int(m.group(2)), m.group(3)),))
    return tuple(gpus)


# ------------------------------------------------------------------ topo -m


@dataclass(frozen=True, slots=True)
class Topology:
    """``nvidia-smi topo -m``. ``link(a, b)`` gives ``NV18``, ``PIX``, ``SYS``… or ``X``."""

    devices: tuple[str, ...]
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu_affinity: dict[str, Any] = field(default_factory=dict)
    numa_affinity: dict[str, Any] = field(default_factory=dict)
    gpu_numa_id: dict[str, Any] = field(default_factory=dict)
    nics: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    def link(self, a: str | int, b: str | int) -> str:
        a = f"GPU{a}" if isinstance(a, int) else a
        b = f"GPU{b}" if isinstance(b, int) else b
        return self.links.get((a, b), "")

    def nvlinks(self, a: int, b: int) -> int:
        """Number of bonded NVLinks between two GPUs (0 when not NVLink)."""
        m = re.match(r"^NV(\d+)$", self.link(a, b))
        return int(m.group(1)) if m else 0


_AFFINITY_NAMES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_topo(text: str) -> Topology:
    lines = strip_ansi(strip_source_line(text)).splitlines()
    header_i = next((i for i, ln in enumerate(lines) if "\t" in ln and "GPU0" in ln), None)
    if header_i is None:
        return Topology(())
    head = [c.strip() for c in lines[header_i].split("\t")]
    if head and head[0] == "":
        head = head[1:]
    devices = tuple(c for c in head if re.match(r"^(GPU|NIC)\d+$", c))
    extra = [c for c in head[len(devices) :] if c]
    links: dict[tuple[str, str], str] = {}
    aff: dict[str, dict[str, Any]] = {n: {} for n in _AFFINITY_NAMES}
    nics: dict[str, str] = {}
    for line in lines[header_i + 1 :]:
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("\t")]
        row = cells[0]
        if row in devices:
            for dev, val in zip(devices, cells[1 : 1 + len(devices)]):
                links[(row, dev)] = val
            tail = cells[1 + len(devices) :]
            if len(tail) > len(extra):
                # real output has an empty cell before "GPU NUMA ID"
                tail = [c for c in tail if c] if any(tail) else tail[: len(extra)]
            for name, val in zip(extra, tail):
                if name in aff:
                    aff[name][row] = parse_value(val, "text") if val else NA
            continue
        m = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if m:
            nics[m.group(1)] = m.group(2)
    return Topology(
        devices,
        links,
        aff["CPU Affinity"],
        aff["NUMA Affinity"],
        aff["GPU NUMA ID"],
        nics,
    )


# ------------------------------------------------------------------ default table view

_TABLE_GPU1 = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+(\S+)\s+(\S+)\s+\|")
_TABLE_GPU2 = re.compile(
    r"^\|\s*(\S+)\s+(\S+?)C?\s+(P\d+|\S+)\s+(\S+?)W?\s*/\s*(\S+?)W?\s+\|"
    r"\s+(\S+?)MiB\s*/\s*(\S+?)MiB\s+\|\s+(\S+?)%?\s+"
)
_TABLE_PROC = re.compile(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.+?)\s+(\S+?)(?:MiB)?\s*\|$")
_TABLE_VERS = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)")


@dataclass(frozen=True, slots=True)
class SmiTable:
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuSnapshot, ...]
    processes: tuple[GpuProcess, ...]


def parse_table(text: str) -> SmiTable:
    """The default ``nvidia-smi`` table (for pasted output and diagnostics)."""
    lines = strip_ansi(strip_source_line(text)).splitlines()
    driver = cuda = ""
    gpus: list[GpuSnapshot] = []
    procs: list[GpuProcess] = []
    in_procs = False
    pending: tuple[int, str] | None = None
    for line in lines:
        m = _TABLE_VERS.search(line)
        if m:
            driver, cuda = m.group(2), m.group(3)
            continue
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            m = _TABLE_PROC.match(line.rstrip())
            if m:
                gi = int(m.group(1))
                procs.append(
                    GpuProcess(
                        pid=int(m.group(4)),
                        name=safe_line(m.group(6).strip()),
                        gpu_uuid="",
                        gpu_index=gi,
                        used_memory=_num(parse_value(m.group(7))),
                    )
                )
            continue
        m = _TABLE_GPU1.match(line)
        if m:
            pending = (int(m.group(1)), safe_line(m.group(2).strip()))
            continue
        m = _TABLE_GPU2.match(line)
        if m and pending is not None:
            idx, name = pending
            pending = None
            gpus.append(
                GpuSnapshot(
                    index=idx,
                    uuid="",
                    name=name,
                    temperature=_num(parse_value(m.group(2))),
                    power_draw=_num(parse_value(m.group(4))),
                    power_limit=_num(parse_value(m.group(5))),
                    memory_used=_num(parse_value(m.group(6))),
                    memory_total=_num(parse_value(m.group(7))),
                    utilization=_num(parse_value(m.group(8))),
                )
            )
    return SmiTable(driver, cuda, tuple(gpus), tuple(procs))
