"""The simulated nvidia-smi answers in the real formats (compared with real outputs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.sim import gpus as simgpus
from tunedeck.sim.demo import demo_host, write_shims
from tunedeck.sim.gpus import ServerRecord

H200_REAL = REPO / "tests" / "data" / "nvidia-smi-h200-real.txt"

QUERY = "index,uuid,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem"


def smi(*args: str, env: dict[str, str] | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [*tunedeck_cmd(), "sim", "smi", *args], capture_output=True, text=True, cwd=REPO, env=e, timeout=timeout
    )


def test_query_header_units_like_a_real_h200():
    r = smi(f"--query-gpu={QUERY}", "--format=csv")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == (
        "index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], temperature.gpu, "
        "power.draw [W], power.limit [W], clocks.current.sm [MHz], clocks.current.memory [MHz]"
    )
    assert len(lines) == 9
    row = re.compile(
        r"^(\d+), (GPU-[0-9a-f-]{36}), NVIDIA H200, (\d+) %, (\d+) MiB, 143771 MiB, (\d+), (\d+\.\d\d) W, "
        r"700\.00 W, (\d+) MHz, (\d+) MHz$"
    )
    for i, line in enumerate(lines[1:]):
        m = row.match(line)
        assert m, line
        assert int(m.group(1)) == i
        assert m.group(4) == "0"  # idle


def test_query_noheader_nounits_8_rows_and_uuids_stable():
    a = smi(f"--query-gpu={QUERY}", "--format=csv,noheader,nounits")
    b = smi("--query-gpu=index,uuid", "--format=csv,noheader,nounits")
    rows = a.stdout.splitlines()
    assert len(rows) == 8
    cells = rows[0].split(", ")
    assert len(cells) == 11 and cells[2] == "NVIDIA H200" and cells[5] == "143771" and cells[8] == "700.00"
    assert [r.split(", ")[1] for r in rows] == [r.split(", ")[1] for r in b.stdout.splitlines()]


def test_matches_real_h200_capture_shape():
    """Same column count and unit placement as the recorded real H200 output."""
    text = H200_REAL.read_text()
    real_hdr = text.split("== query header units\n", 1)[1].splitlines()[0]
    ours = smi(f"--query-gpu={QUERY}", "--format=csv").stdout.splitlines()[0]
    assert ours == real_hdr


def test_extra_fields_and_na():
    r = smi(
        "--query-gpu=index,name,compute_cap,driver_version,pci.bus_id,memory.free,fan.speed",
        "--format=csv,noheader,nounits",
    )
    first = r.stdout.splitlines()[0].split(", ")
    assert first[:3] == ["0", "NVIDIA H200", "9.0"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", first[3])
    assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", first[4])
    assert int(first[5]) == 143771 - 615
    assert first[6] == "[N/A]"
    na = smi(
        "--query-gpu=index,utilization.gpu,power.draw,memory.used",
        "--format=csv,noheader",
        env={"TUNEDECK_SIM_SMI_FAULT": "na"},
    )
    assert na.stdout.splitlines()[0] == "0, [N/A], [N/A], 0 MiB"


def test_bad_field_exit_2():
    r = smi("--query-gpu=bogus", "--format=csv")
    assert r.returncode == 2
    assert r.stdout == 'Field "bogus" is not a valid field to query.\n\n'


@pytest.mark.parametrize(
    "fault,code,text",
    [
        ("nodriver", 9, "couldn't communicate with the NVIDIA driver"),
        ("nvml-missing", 12, "libnvidia-ml.so"),
        ("gpu-lost", 15, "GPU is lost"),
        ("mismatch", 18, "Driver/library version mismatch"),
    ],
)
def test_faults(fault, code, text):
    r = smi("--query-gpu=index", "--format=csv", env={"TUNEDECK_SIM_SMI_FAULT": fault})
    assert r.returncode == code
    assert text in r.stdout


def test_hang_fault_never_returns():
    with pytest.raises(subprocess.TimeoutExpired):
        smi("-L", env={"TUNEDECK_SIM_SMI_FAULT": "hang"}, timeout=2)


def test_list_topo_table():
    lst = smi("-L").stdout.splitlines()
    assert len(lst) == 8
    assert re.fullmatch(r"GPU 0: NVIDIA H200 \(UUID: GPU-[0-9a-f-]{36}\)", lst[0])
    topo = smi("topo", "-m").stdout
    head, row0 = topo.splitlines()[:2]
    assert head.startswith("\tGPU0\tGPU1") and head.endswith("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    cells = row0.split("\t")
    assert cells[0] == "GPU0" and cells[1] == " X " and cells[2:9] == ["NV18"] * 7
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in topo
    table = smi().stdout.splitlines()
    assert table[2].startswith("| NVIDIA-SMI ") and len(table[2]) == 91
    assert "|   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |" in table
    assert "No running processes found" in "\n".join(table)
    assert all(len(x) == 91 for x in table[1:] if x.startswith(("|", "+")))


def test_config_env_and_file(tmp_path, monkeypatch):
    r = smi(
        "--query-gpu=index,name,memory.total",
        "--format=csv,noheader",
        env={"TUNEDECK_SIM_GPUS": "2", "TUNEDECK_SIM_GPU_NAME": "NVIDIA H100 80GB HBM3"},
    )
    assert r.stdout.splitlines() == ["0, NVIDIA H100 80GB HBM3, 81559 MiB", "1, NVIDIA H100 80GB HBM3, 81559 MiB"]
    state = Path(os.environ["TUNEDECK_SIM_STATE"])
    state.mkdir(parents=True, exist_ok=True)
    (state / "gpus.json").write_text(json.dumps({"count": 4, "name": "NVIDIA B200"}))
    r = smi("--query-gpu=index,memory.total,compute_cap", "--format=csv,noheader,nounits")
    assert r.stdout.splitlines()[-1] == "3, 183359, 10.0"
    bad = smi("-L", env={"TUNEDECK_SIM_GPUS": "many"})
    assert bad.returncode != 0 and "TUNEDECK_SIM_GPUS" in bad.stderr and "Traceback" not in bad.stderr


def test_server_records_show_up_and_dead_pids_are_ignored():
    rec = ServerRecord("sglang", [0, 1])
    rec.publish(
        {
            0: {"used_mib": 120000, "util": 90, "procs": [{"name": "sglang::scheduler_TP0", "used_mib": 120000}]},
            1: {"used_mib": 1000, "util": 0, "procs": [{"name": "sglang::scheduler_TP1", "used_mib": 1000}]},
        }
    )
    # a record of a dead process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    p = simgpus.servers_dir() / f"{dead.pid}.json"
    p.write_text(
        json.dumps({"pid": dead.pid, "create_time": 0, "gpus": {"2": {"used_mib": 5000, "util": 50, "procs": []}}})
    )
    try:
        rows = smi("--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits").stdout.splitlines()
        assert rows[0] == "0, 120000, 90"
        assert rows[1] == "1, 1000, 0"
        assert rows[2] == "2, 0, 0"
        apps = smi(
            "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"
        ).stdout.splitlines()
        assert len(apps) == 2
        assert apps[0].startswith(f"{os.getpid()}, GPU-") and apps[0].endswith(", 120000, sglang::scheduler_TP0")
        table = smi().stdout
        assert re.search(r"\|    0   N/A  N/A +\d+      C   sglang::scheduler_TP0 +120000MiB \|", table)
    finally:
        rec.remove()
    assert smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader").stdout == ""


def test_loop_prints_blocks_and_flushes():
    proc = subprocess.Popen(
        [
            *tunedeck_cmd(),
            "sim",
            "smi",
            "--query-gpu=index,memory.used",
            "--format=csv,noheader,nounits",
            "-lms",
            "200",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(16)]
        assert lines[0] == "0, 0\n" and lines[8] == "0, 0\n"
    finally:
        proc.terminate()
        proc.wait(5)


async def test_demo_host_runs_the_shims(tmp_path):
    host = demo_host()
    assert host.is_local
    r = await host.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout=30)
    assert r.ok, r.stderr
    assert len(r.stdout.splitlines()) == 8
    r = await host.run(["tunedeck", "--version"], timeout=30)
    assert r.ok and r.stdout.startswith("tunedeck ")
    assert host.env_overlay["TUNEDECK_SIM_STATE"] == os.environ["TUNEDECK_SIM_STATE"]


def test_write_shims_quotes_paths(tmp_path):
    d = tmp_path / "dir with 'quote"
    write_shims(d, python=sys.executable)
    text = (d / "nvidia-smi").read_text()
    assert text.startswith("#!/bin/sh\n") and '"$@"' in text
    assert " -m tunedeck.sim.smi " in text  # the module alone: pollers start it every second
    assert os.access(d / "nvidia-smi", os.X_OK)
    r = subprocess.run([str(d / "nvidia-smi"), "-L"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("GPU 0: NVIDIA H200")


async def test_demo_host_runs_python_m_tunedeck_from_any_directory(tmp_path):
    host = demo_host()
    r = await host.run(["/bin/sh", "-c", f"cd {tmp_path} && {sys.executable} -m tunedeck sim smi -L"], timeout=30)
    assert r.ok, r.stderr
    assert r.stdout.startswith("GPU 0: NVIDIA H200")
