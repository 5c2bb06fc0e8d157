"""nvidia-smi parsers against every real nvidia-smi output in the reference logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedeck.collectors import smi
from tunedeck.model import NA

_CHECKED = {
    "nvidia-smi-query-1.txt",
    "nvidia-smi-query-2.txt",
    "nvidia-smi-query-na-1.txt",
    "nvidia-smi-query-noheader-1.txt",
    "nvidia-smi-query-rtxpro6000-1.txt",
    "nvidia-smi-table-1.txt",
    "nvidia-smi-topo-1.txt",
    "nvidia-smi-fail-nodriver-1.txt",
    "nvidia-smi-fail-nvml-mismatch-1.txt",
}


def _read(real_logs: Path, name: str) -> str:
    return (real_logs / name).read_text(encoding="utf-8")


def test_every_reference_file_is_covered(real_logs: Path) -> None:
    present = {p.name for p in real_logs.glob("nvidia-smi-*.txt")}
    assert present == _CHECKED, f"new or missing reference files: {present ^ _CHECKED}"


def test_query_header_units_no_index(real_logs: Path) -> None:
    gpus = smi.parse_query_gpu(_read(real_logs, "nvidia-smi-query-1.txt"))
    assert len(gpus) == 8
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g.memory_total == 81559 for g in gpus)
    assert all(g.utilization is NA and g.memory_used is NA for g in gpus)


def test_query_two_memory_columns(real_logs: Path) -> None:
    table = smi.parse_csv(_read(real_logs, "nvidia-smi-query-2.txt"))
    assert table.fields == ("memory.used", "memory.free")
    assert len(table.rows) == 8
    assert all(r == {"memory.used": 1718, "memory.free": 79364} for r in table.rows)
    gpus = smi.gpus_from_rows(table.rows)
    assert [g.memory_used for g in gpus] == [1718] * 8
    assert all(g.memory_total is NA for g in gpus)


def test_query_na_and_units_in_cells(real_logs: Path) -> None:
    table = smi.parse_csv(_read(real_logs, "nvidia-smi-query-na-1.txt"))
    assert table.fields == ("power.draw", "utilization.gpu", "fan.speed", "temperature.gpu")
    assert all(r["fan.speed"] is NA for r in table.rows)
    gpus = smi.gpus_from_rows(table.rows)
    assert gpus[0].power_draw == pytest.approx(67.97)
    assert gpus[0].utilization == 0  # a real 0 %, the hung rank: not NA
    assert [g.utilization for g in gpus[1:]] == [100] * 7
    assert [g.temperature for g in gpus] == [28, 30, 28, 32, 30, 31, 30, 32]


def test_query_noheader_bare_values(real_logs: Path) -> None:
    gpus = smi.parse_query_gpu(_read(real_logs, "nvidia-smi-query-noheader-1.txt"), ["temperature.gpu"])
    assert [g.temperature for g in gpus] == [28, 30, 28, 31, 29, 31, 29, 32]
    assert [g.index for g in gpus] == list(range(8))


def test_compute_cap_row(real_logs: Path) -> None:
    table = smi.parse_csv(
        _read(real_logs, "nvidia-smi-query-rtxpro6000-1.txt"), ["name", "driver_version", "compute_cap"]
    )
    (row,) = table.rows
    assert row["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert row["driver_version"] == "580.126.09"
    assert smi.parse_compute_cap(row["compute_cap"]) == (12, 0)


def test_default_table(real_logs: Path) -> None:
    t = smi.parse_table(_read(real_logs, "nvidia-smi-table-1.txt"))
    assert (t.driver_version, t.cuda_version) == ("590.48.01", "13.1")
    assert len(t.gpus) == 8
    assert all(g.utilization == 100 and g.memory_used == 65792 and g.memory_total == 81559 for g in t.gpus)
    assert [g.power_draw for g in t.gpus][:2] == [139, 131]
    assert t.gpus[0].temperature == 33 and t.gpus[0].power_limit == 700
    assert [p.name for p in t.processes] == [f"sglang::scheduler_TP{i}" for i in range(8)]
    assert [p.gpu_index for p in t.processes] == list(range(8))
    assert t.processes[0].pid == 558210 and t.processes[0].used_memory == 65782


def test_topology(real_logs: Path) -> None:
    topo = smi.parse_topo(_read(real_logs, "nvidia-smi-topo-1.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert len(topo.devices) == 20
    for a in range(8):
        for b in range(8):
            assert topo.link(a, b) == ("X" if a == b else "NV18")
    assert topo.nvlinks(0, 7) == 18
    assert topo.link("GPU0", "NIC0") == "PIX" and topo.link("GPU0", "NIC1") == "NODE"
    assert topo.link("GPU3", "NIC5") == "PIX"
    assert topo.cpu_affinity["GPU0"] == "0-191"
    assert topo.numa_affinity["GPU7"] == 0
    assert topo.gpu_numa_id["GPU0"] is NA
    assert topo.nics["NIC11"] == "mlx5_11"


def test_failure_no_driver(real_logs: Path) -> None:
    text = smi.strip_source_line(_read(real_logs, "nvidia-smi-fail-nodriver-1.txt"))
    state, msg = smi.classify_failure(9, text)
    assert state == "driver-not-loaded" and "couldn't communicate" in msg
    # the message alone (exit status unknown) gives the same state
    assert smi.classify_failure(None, text)[0] == "driver-not-loaded"
    assert smi.parse_query_gpu(text) == ()  # no rows from an error message


def test_failure_nvml_mismatch(real_logs: Path) -> None:
    text = smi.strip_source_line(_read(real_logs, "nvidia-smi-fail-nvml-mismatch-1.txt"))
    state, msg = smi.classify_failure(18, text)
    assert state == "nvml-mismatch" and "version mismatch" in msg
    assert smi.classify_failure(None, text)[0] == "nvml-mismatch"
    assert smi.classify_failure(255, text)[0] == "nvml-mismatch"
    assert smi.parse_query_gpu(text) == ()


@pytest.mark.parametrize(
    "code,state",
    [
        (9, "driver-not-loaded"),
        (12, "nvml-not-found"),
        (14, "inforom-corrupt"),
        (15, "gpu-lost"),
        (18, "nvml-mismatch"),
        (124, "unresponsive"),
        (127, "no-nvidia-smi"),
    ],
)
def test_exit_codes(code: int, state: str) -> None:
    got, msg = smi.classify_failure(code, "")
    assert got == state and msg
    assert got in smi.STATE_LABELS


def test_success_is_not_a_failure() -> None:
    assert smi.classify_failure(0, "0, GPU-x, NVIDIA H200, 1, 2, 3, 4, 5, 6, 7, 8\n") is None


def test_collector_query_line_with_na() -> None:
    line = "3, GPU-5d1c, NVIDIA H200, [N/A], 131862, 143771, 58, [Not Supported], 700.00, 1980, N/A"
    g = smi.parse_gpu_line(line)
    assert g is not None
    assert (g.index, g.uuid, g.name) == (3, "GPU-5d1c", "NVIDIA H200")
    assert g.utilization is NA and g.power_draw is NA and g.clock_mem is NA
    assert g.memory_used == 131862 and g.power_limit == 700.0 and g.clock_sm == 1980
    assert smi.parse_gpu_line("Failed to initialize NVML: Unknown Error") is None


def test_compute_apps_join_and_idle() -> None:
    assert smi.parse_compute_apps("") == ()
    text = "4242, GPU-b, 65782, sglang::scheduler_TP1\n4243, GPU-zz, [N/A], python3\n"
    procs = smi.parse_compute_apps(text)
    gpus = smi.parse_query_gpu("0, GPU-a, X, 1, 2, 3, 4, 5, 6, 7, 8\n1, GPU-b, X, 1, 2, 3, 4, 5, 6, 7, 8\n")
    joined = smi.join_processes(procs, gpus)
    assert joined[0].gpu_index == 1 and joined[0].used_memory == 65782
    assert joined[1].gpu_index is None and joined[1].used_memory is NA


def test_list_lines() -> None:
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d1c0e8a-1111-2222-3333-444455556666)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-abc)\n"
        "  MIG 1g.5gb      Device  0: (UUID: MIG-aaa)\n"
    )
    gpus = smi.parse_list(text)
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100-SXM4-40GB")]
    assert gpus[0].uuid.startswith("GPU-5d1c")
    assert gpus[1].mig == (("1g.5gb", 0, "MIG-aaa"),)
