"""vLLM on Ray in the simulator: it asks the Ray cluster for its GPUs through the ``ray status``
command line, and fails with vLLM's texts when they fall short (the log parser names them).

A stand-in ``ray`` prints a real ``ray status -v`` (tests/data/ray) with the GPU total a test
chooses; tests/integration/test_deploy_netns.py runs the same against a real Ray cluster of two hosts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import REPO
from tests.simfix import SimProc, free_port
from tests.waits import poll
from tunedeck.logparse import parse_text
from tunedeck.sim.gpus import read_gpus
from tunedeck.sim.raycluster import cluster_address, parse_status

pytestmark = pytest.mark.timeout(90)
STATUS = (
    (Path(__file__).resolve().parents[1] / "data" / "ray" / "ray-2.60.0-status-v.txt").read_text().split("\n", 1)[1]
)


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


def two_node_ray(tmp_path: Path) -> Path:
    """A ``ray`` for a cluster of two 8-GPU nodes: ``status -v`` shows both; ``start`` runs until
    it is signalled (as ``ray start --block`` does)."""
    node = STATUS[STATUS.index("Node: ") :]
    text = STATUS.replace("0.0/8.0 GPU", "0.0/16.0 GPU", 1) + "\n" + node.replace("a8942ace", "b7731bdf")
    (tmp_path / "status.txt").write_text(text)
    p = tmp_path / "ray"
    p.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = status ] && exec cat {tmp_path / "status.txt"}\n'
        '[ "$1" = start ] && exec sleep 600\n'
        "exit 2\n"
    )
    p.chmod(0o755)
    return p


def ray_node(ray: Path, state: Path, address: str) -> subprocess.Popen[bytes]:
    """Node B's Ray node as a ``--sim`` deployment runs it: ``sim ray-node -- ray start …``."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from tunedeck.sim.entry import main; sys.exit(main())", "sim", "ray-node"]
        + ["--", str(ray), "start", f"--address={address}", "--num-gpus=8", "--node-ip-address=127.0.0.1", "--block"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TUNEDECK_SIM_STATE": str(state)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def holders(state: Path) -> dict[int, list[tuple[int, str, int]]]:
    return {g.index: g.procs for g in read_gpus(root=state)}


def node_b_held(b: Path, p: SimProc, node: subprocess.Popen[bytes]) -> None:
    """Node B's 8 GPUs come to be held by its workers (the driver tells the node what they hold over
    its channel: a loaded machine may show it a moment after the driver's ready line, as a sampled
    nvidia-smi would). Otherwise: what both sides said of their channel."""
    if wait_until(lambda: all(g.used_mib > 0 for g in read_gpus(root=b)), 45):
        return
    os.killpg(node.pid, signal.SIGKILL)
    said = node.communicate(timeout=20)[0].decode("utf-8", "replace")
    driver = [ln for ln in p.lines() if "simulator:" in ln or "RayWorkerWrapper" in ln]
    raise AssertionError(f"node B's GPUs: {holders(b)}\ndriver:\n" + "\n".join(driver) + f"\nnode B:\n{said[-3000:]}")


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    return bool(poll(cond, timeout, step=0.2))


def test_the_other_nodes_gpus_are_held_by_ray_workers_of_that_node_until_the_driver_dies(tmp_path: Path):
    ray = two_node_ray(tmp_path)
    gcs = free_port(span=2)  # the driver's channel to the other nodes listens on the next port
    a, b = tmp_path / "a", tmp_path / "b"
    node = ray_node(ray, b, f"127.0.0.1:{gcs}")
    try:
        env = {"RAY_ADDRESS": f"127.0.0.1:{gcs}", "TUNEDECK_SIM_RAY": str(ray), "TUNEDECK_SIM_STATE": str(a)}
        env["TUNEDECK_SIM_RAY_NODE_WAIT_S"] = "60"  # node B's wrapper may dial late on a loaded machine
        args = ["m", "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray", "--port", str(free_port())]
        with SimProc("vllm", *args, "--sim-load-seconds", "1", env=env) as p:
            p.wait_ready(60)
            # node B's 8 GPUs are held by 8 worker processes of node B's Ray node, as Ray's are
            node_b_held(b, p, node)
            procs = holders(b)
            assert len(procs) == 8 and all(len(v) == 1 and v[0][1] == "ray::RayWorkerWrapper" for v in procs.values())
            assert all(g.used_mib > 0 for g in read_gpus(root=b)), procs
            pids = {v[0][0] for v in procs.values()}
            assert len(pids) == 8 and all(os.getpgid(x) == node.pid for x in pids)  # in the Ray node's run
            # the driver's log shows them as Ray prefixes its actors' lines
            for pid in pids:
                assert f"(RayWorkerWrapper pid={pid}, ip=127.0.0.1) INFO" in p.raw, p.raw[-3000:]
            st, _ = parse_text(p.raw, "vllm")
            assert st.status == "ready", st.describe()
            os.killpg(p.proc.pid, signal.SIGKILL)  # the driver crashes
            assert wait_until(lambda: all(g.used_mib == 0 for g in read_gpus(root=b)), 15), holders(b)
            assert wait_until(lambda: not any(os.path.exists(f"/proc/{x}") for x in pids), 10)
        assert node.poll() is None  # node B's Ray node lives on
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGTERM)
        out, _ = node.communicate(timeout=20)
    assert b"released 8 worker(s)" in out, out


def test_stopping_the_ray_node_ends_its_workers_and_frees_its_gpus(tmp_path: Path):
    ray = two_node_ray(tmp_path)
    gcs = free_port(span=2)  # the driver's channel to the other nodes listens on the next port
    a, b = tmp_path / "a", tmp_path / "b"
    node = ray_node(ray, b, f"127.0.0.1:{gcs}")
    env = {"RAY_ADDRESS": f"127.0.0.1:{gcs}", "TUNEDECK_SIM_RAY": str(ray), "TUNEDECK_SIM_STATE": str(a)}
    env["TUNEDECK_SIM_RAY_NODE_WAIT_S"] = "60"  # node B's wrapper may dial late on a loaded machine
    args = ["m", "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray", "--port", str(free_port())]
    try:
        with SimProc("vllm", *args, "--sim-load-seconds", "1", env=env) as p:
            p.wait_ready(60)
            node_b_held(b, p, node)
            os.kill(node.pid, signal.SIGTERM)  # the wrapper alone: it passes the stop on to Ray
            assert node.wait(40) is not None
            assert all(g.used_mib == 0 for g in read_gpus(root=b)), holders(b)
            assert p.proc.poll() is None
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        node.communicate(timeout=20)
