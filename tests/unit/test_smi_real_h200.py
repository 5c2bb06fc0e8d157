"""The nvidia-smi parsers on output captured from a real H200 host (tests/data/nvidia-smi-h200-real.txt).

The capture has one section per command, each starting with ``== name``; the last section
was taken while a matmul kept the GPU busy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedeck.collectors import smi
from tunedeck.model import NA

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi-h200-real.txt"
UUID = "GPU-2a585dbc-e6f8-1f89-12fa-2f3d8069e05a"


def _sections() -> dict[str, str]:
    out: dict[str, list[str]] = {}
    name = None
    for line in DATA.read_text().splitlines()[1:]:
        if line.startswith("== "):
            name = line[3:].strip()
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return {k: "\n".join(v for v in lines if not v.startswith("rc=")) for k, lines in out.items()}


@pytest.fixture(scope="module")
def sec() -> dict[str, str]:
    return _sections()


def test_collector_query_noheader_nounits(sec: dict[str, str]) -> None:
    (g,) = smi.parse_query_gpu(sec["query noheader nounits"])
    assert (g.index, g.uuid, g.name) == (0, UUID, "NVIDIA H200")
    assert g.memory_total == 143771 and g.memory_used == 0 and g.utilization == 0
    assert g.power_limit == 700.0 and abs(g.power_draw - 118.22) < 1e-9
    assert g.clock_sm == 435 and g.clock_mem == 3201 and g.temperature == 36


def test_query_with_header_and_units_gives_the_same_values(sec: dict[str, str]) -> None:
    table = smi.parse_csv(sec["query header units"])
    (g,) = smi.gpus_from_rows(table.rows)
    assert (g.index, g.name, g.memory_total, g.power_limit, g.clock_mem) == (0, "NVIDIA H200", 143771, 700.0, 3201)
    assert g.utilization == 0 and g.memory_used == 0


def test_compute_cap_and_not_available_fan(sec: dict[str, str]) -> None:
    fields = ["index", "name", "compute_cap", "driver_version", "pci.bus_id", "memory.free", "fan.speed"]
    (row,) = smi.parse_csv(sec["extra"], fields).rows
    assert smi.parse_compute_cap(row["compute_cap"]) == (9, 0)
    assert row["fan.speed"] is NA  # an H200 has no fan reading: N/A, never 0
    assert row["memory.free"] == 143156


def test_idle_compute_apps_is_empty(sec: dict[str, str]) -> None:
    assert smi.parse_compute_apps(sec["apps"]) == () or list(smi.parse_compute_apps(sec["apps"])) == []


def test_list_and_table(sec: dict[str, str]) -> None:
    (listed,) = smi.parse_list(sec["L"])
    assert listed.index == 0 and listed.uuid == UUID and "H200" in listed.name
    t = smi.parse_table(sec["table"])
    assert t.driver_version == "580.159.04" and t.cuda_version == "13.0"
    assert len(t.gpus) == 1 and t.gpus[0].memory_total == 143771


def test_streamed_blocks_and_busy_process(sec: dict[str, str]) -> None:
    lines = [ln for ln in sec["lms"].splitlines() if ln.strip()]
    gpus = [smi.parse_gpu_line(ln) for ln in lines]
    assert len(gpus) == 4 and all(g is not None and g.uuid == UUID for g in gpus)
    busy = sec["load: query-compute-apps while a matmul ran, then -lms 500 stream"].strip().splitlines()
    procs = smi.parse_compute_apps(busy[0])
    (p,) = procs
    assert p.pid == 450 and p.gpu_uuid == UUID and p.used_memory == 1386 and p.name == "python3"
    (joined,) = smi.join_processes(procs, smi.parse_query_gpu(sec["query noheader nounits"]))
    assert joined.gpu_index == 0


def test_invalid_field_is_an_error_not_rows(sec: dict[str, str]) -> None:
    text = sec["bad field"]
    assert smi.parse_query_gpu(text) == ()
    assert smi.classify_failure(2, text) is not None
