"""vLLM on Ray in the simulator: it asks the Ray cluster for its GPUs through the ``ray status``
command line, and fails with vLLM's texts when they fall short (the log parser names them).

A stand-in ``ray`` prints a real ``ray status -v`` (tests/data/ray) with the GPU total a test
chooses; tests/test_deploy_netns.py runs the same against a real Ray cluster of two hosts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.simfix import SimProc, free_port
from tui.logparse import parse_text
from tui.sim.raycluster import cluster_address, parse_status

pytestmark = pytest.mark.timeout(90)
STATUS = (Path(__file__).parent / "data" / "ray" / "ray-2.60.0-status-v.txt").read_text().split("\n", 1)[1]


def fake_ray(tmp_path: Path, gpus: int) -> Path:
    """A ``ray`` whose ``status -v`` shows ``gpus`` GPUs (0: no GPU line at all, as Ray prints it)."""
    text = STATUS.replace("0.0/8.0 GPU", f"0.0/{gpus}.0 GPU")
    if gpus == 0:
        text = "\n".join(x for x in text.splitlines() if not x.endswith(" GPU"))
    (tmp_path / "status.txt").write_text(text)
    p = tmp_path / "ray"
    p.write_text(
        f'#!/bin/sh\n[ "$1" = status ] || exit 2\necho "$@" >> {tmp_path / "calls"}\ncat {tmp_path / "status.txt"}\n'
    )
    p.chmod(0o755)
    return p


def run_sim(tmp_path: Path, gpus: int, *, tp: int = 8, pp: int = 2, pg_timeout: float = 3) -> tuple[int, str]:
    env = {
        "RAY_ADDRESS": "10.0.0.5:6379",
        "TUNEDECK_SIM_RAY": str(fake_ray(tmp_path, gpus)),
        "TUNEDECK_SIM_RAY_PG_TIMEOUT_S": str(pg_timeout),
    }
    args = ["m", "-tp", str(tp), "-pp", str(pp), "--distributed-executor-backend", "ray"]
    with SimProc("vllm", *args, "--port", str(free_port()), "--sim-load-seconds", "1", env=env) as p:
        rc = p.wait_exit(60)
        return rc, p.raw


def test_ray_status_output_is_read_for_totals_and_the_first_node():
    view = parse_status(STATUS, "10.0.0.5:6379")
    assert view.gpus == 8.0 and view.resources["CPU"] == 2.0
    assert view.first_node == "a8942aced91e43854dbb3f10ed2fea362fda12e88b1927461807a8d4"
    assert view.first_node_resources["GPU"] == 8.0


def test_the_cluster_address_is_ray_address_else_the_one_ray_start_recorded(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert cluster_address() == "10.1.2.3:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert cluster_address() is None  # vLLM would start its own local Ray
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.9.9.9:6380\n")
    assert cluster_address() == "10.9.9.9:6380"


def test_too_few_gpus_in_the_cluster_fails_as_vllm_does_and_the_parser_names_it(tmp_path: Path):
    rc, raw = run_sim(tmp_path, 8)
    assert rc != 0
    assert "The number of required GPUs exceeds the total number of available GPUs in the placement group." in raw
    assert "Waiting for creating a placement group of specs for" in raw
    assert "ValueError: Cannot provide a placement group requiring 16.0 GPUs" in raw
    assert "--address=10.0.0.5:6379" in (tmp_path / "calls").read_text()  # it asked that cluster
    st, _ = parse_text(raw, "vllm")
    assert st.status == "failed" and st.failure is not None and st.failure.kind == "ray-gpus", st.failure
    assert "Cannot provide a placement group requiring 16.0 GPUs" in st.failure.line
    assert st.failure.cause == "the Ray cluster cannot provide the 16 GPUs (tp × pp) of the placement group"


def test_a_cluster_without_gpus_fails_with_current_node_has_no_gpu(tmp_path: Path):
    rc, raw = run_sim(tmp_path, 0)
    assert rc != 0
    assert "ValueError: Current node has no GPU available. current_node_resource={'CPU': 2.0" in raw
    st, _ = parse_text(raw, "vllm")
    assert st.failure is not None and st.failure.kind == "ray-gpus"
    assert st.failure.cause == "the engine's Ray node has no GPU"


def test_enough_gpus_in_the_cluster_serve_with_this_nodes_gpus(tmp_path: Path):
    env = {"RAY_ADDRESS": "10.0.0.5:6379", "TUNEDECK_SIM_RAY": str(fake_ray(tmp_path, 16))}
    args = ["m", "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray", "--port", str(free_port())]
    with SimProc("vllm", *args, "--sim-load-seconds", "1", env=env) as p:
        p.wait_ready(60)
        raw = p.raw
    assert "Connected to Ray cluster." in raw and "exceeds locally visible GPUs (8)" in raw
    assert "placement group." not in raw.split("No current placement group found.")[1].split("\n", 2)[1]
    st, _ = parse_text(raw, "vllm")
    assert st.status == "ready", st.describe()


def test_unreachable_cluster_fails_with_what_ray_said(tmp_path: Path):
    bad = tmp_path / "ray"
    bad.write_text("#!/bin/sh\necho 'ConnectionError: GCS at 10.0.0.5:6379 is not reachable' >&2\nexit 1\n")
    bad.chmod(0o755)
    env = {"RAY_ADDRESS": "10.0.0.5:6379", "TUNEDECK_SIM_RAY": str(bad)}
    with SimProc(
        "vllm", "m", "-tp", "2", "--distributed-executor-backend", "ray", "--port", str(free_port()), env=env
    ) as p:
        assert p.wait_exit(60) != 0
        raw = p.raw
    assert "] ConnectionError: GCS at 10.0.0.5:6379 is not reachable" in raw
    st, _ = parse_text(raw, "vllm")
    assert st.status == "failed" and st.failure is not None
