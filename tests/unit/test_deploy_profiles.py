"""Multi-node profiles: `nodes` and `[deploy]` parsing with file/line/key errors, each node's command
for SGLang, vLLM on Ray and vLLM data parallel, the stop order, and `profiles command --json`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tunedeck.hostops.hosts import Command, RunResult
from tunedeck.hostops.localhost import LocalHost
from tunedeck.profiles.deploy import RAY_WAIT, build_deployment, check_deployment
from tunedeck.profiles.model import ProfileError
from tunedeck.profiles.profileread import load_profile_file, load_profile_text
from tunedeck.services.deploy import MemberState, merge_logs, triage

SGL = """\
schema_version = 1
engine = "sglang"
model = "deepseek-ai/DeepSeek-R1"
tp = 16
nodes = ["gpu-a", "gpuop@gpu-b:2222"]

[flags]
enable-metrics = true
"""

VLLM = """\
schema_version = 1
engine = "vllm"
model = "m"
tp = 8
nodes = ["gpu-a", "gpu-b"]
"""


def prof(text: str, tmp_path: Path | None = None, name: str = "multi"):
    if tmp_path is None:
        return load_profile_text(text, name=name)
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return load_profile_file(p)


def test_sglang_each_node_gets_its_rank_and_the_head_address():
    plan = build_deployment(prof(SGL))
    assert plan.mode == "tp" and plan.nodes == ("gpu-a", "gpuop@gpu-b:2222") and plan.rendezvous == "gpu-a:5000"
    head, worker = plan.steps
    for rank, step in enumerate(plan.steps):
        args = step.command.args
        assert "--tp-size=16" in args and "--nnodes=2" in args and f"--node-rank={rank}" in args
        assert "--dist-init-addr=gpu-a:5000" in args and "--enable-metrics" in args
        assert step.gpus == 8
    assert head.serves and head.port == 30000 and not worker.serves and worker.port is None
    assert plan.gpus_needed == 16
    assert [s.node for s in plan.stop_order()] == ["gpu-a", "gpuop@gpu-b:2222"]
    # the address the workers dial can be given (an alias resolved, or [deploy] head_address)
    assert build_deployment(prof(SGL), head_address="10.0.0.1").rendezvous == "10.0.0.1:5000"
    plan = build_deployment(prof(SGL + '\n[deploy]\nhead_address = "10.1.1.1"\nport = 29500\n'))
    assert "--dist-init-addr=10.1.1.1:29500" in plan.steps[1].command.args


def test_vllm_on_ray_head_workers_wait_then_serve():
    plan = build_deployment(prof(VLLM))
    kinds = [(s.node, s.kind) for s in plan.steps]
    assert kinds == [("gpu-a", "ray-head"), ("gpu-b", "ray-worker"), ("gpu-a", "ray-wait"), ("gpu-a", "server")]
    assert list(plan.steps[0].command.argv) == ["ray", "start", "--head", "--port=6379", "--num-gpus=8", "--block"]
    assert list(plan.steps[1].command.argv) == ["ray", "start", "--address=gpu-a:6379", "--num-gpus=8", "--block"]
    wait = plan.steps[2]
    assert wait.kind == RAY_WAIT and wait.check == ("ray", "status", "--address=gpu-a:6379") and wait.gpus == 16
    serve = plan.steps[3].command
    assert serve.argv[:3] == ("vllm", "serve", "m")
    assert {"--tensor-parallel-size=8", "--pipeline-parallel-size=2", "--distributed-executor-backend=ray"} <= set(
        serve.args
    )
    # the API first, then the Ray workers, then the Ray head
    assert [(s.node, s.kind) for s in plan.stop_order()] == [
        ("gpu-a", "server"),
        ("gpu-b", "ray-worker"),
        ("gpu-a", "ray-head"),
    ]
    assert plan.steps[0].command.env_dict["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_vllm_on_ray_node_options_pin_each_node_and_the_engine_joins_that_cluster():
    text = VLLM + (
        "\n[deploy]\n"
        'node_addresses = ["10.9.0.2", "10.9.0.3"]\n'
        "ray_num_cpus = 2\n"
        "ray_dashboard = false\n"
        'ray_temp_dir = ["/tmp/td-a", "/tmp/td-b"]\n'
    )
    plan = build_deployment(prof(text), sim=True)
    assert plan.head_address == "10.9.0.2" and plan.rendezvous == "10.9.0.2:6379"
    from tunedeck.services.deploy import resolve_head_address

    assert resolve_head_address(prof(text)) is None  # the pinned address, not the head's host name
    head, worker, wait, serve = plan.steps
    assert list(head.command.argv) == [
        "ray",
        "start",
        "--head",
        "--port=6379",
        "--num-gpus=8",
        "--node-ip-address=10.9.0.2",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--temp-dir=/tmp/td-a",
        "--block",
    ]
    # with --sim the worker's Ray node runs under the runtime's `sim ray-node`, whose stand-ins for
    # Ray's worker processes hold that node's simulated GPUs (the head's vLLM holds the head's)
    assert list(worker.command.argv) == [
        "tunedeck-host",
        "sim",
        "ray-node",
        "--",
        "ray",
        "start",
        "--address=10.9.0.2:6379",
        "--num-gpus=8",
        "--node-ip-address=10.9.0.3",
        "--num-cpus=2",
        "--temp-dir=/tmp/td-b",
        "--block",
    ]
    assert wait.check == ("ray", "status", "--address=10.9.0.2:6379")
    assert worker.command.executable == ("tunedeck-host", "sim", "ray-node", "--", "ray", "start")
    assert "PCI_BUS_ID tunedeck-host sim ray-node -- ray start --address=10.9.0.2:6379 " in worker.command.display
    assert build_deployment(prof(text)).steps[1].command.argv[:2] == ("ray", "start")  # without --sim: Ray alone
    env = serve.command.env_dict
    assert env["RAY_ADDRESS"] == "10.9.0.2:6379" and env["VLLM_HOST_IP"] == "10.9.0.2"
    assert env["TUNEDECK_SIM_RAY"] == "ray"  # only with --sim
    assert "TUNEDECK_SIM_RAY" not in build_deployment(prof(text)).steps[3].command.env_dict
    # one temp dir for every node (real hosts each have their own /tmp)
    one = build_deployment(prof(VLLM + '\n[deploy]\nray_temp_dir = "/tmp/ray-td"\n'))
    assert all("--temp-dir=/tmp/ray-td" in s.command.argv for s in one.steps if s.kind.startswith("ray-") and s.command)
    # and the same profile written back reads the same
    from tunedeck.profiles.model import profile_to_dict

    d = profile_to_dict(prof(text))
    assert d["deploy"]["node_addresses"] == ["10.9.0.2", "10.9.0.3"] and d["deploy"]["ray_dashboard"] is False


def test_ray_options_on_another_mode_are_a_warning():
    plan, issues = check_deployment(prof(SGL + "\n[deploy]\nray_num_cpus = 2\n"))
    assert plan is not None
    assert [(i.severity, i.key) for i in issues if "Ray" in i.message] == [("warning", "deploy.ray_num_cpus")]


def test_vllm_data_parallel_headless_workers():
    plan = build_deployment(prof(VLLM.replace("tp = 8", "tp = 4") + '[deploy]\nmode = "dp"\n'))
    assert plan.dp == 4
    head, worker = (s.command.args for s in plan.steps)
    assert {
        "--data-parallel-size=4",
        "--data-parallel-size-local=2",
        "--data-parallel-address=gpu-a",
        "--data-parallel-rpc-port=13345",
    } <= set(head)
    assert "--headless" not in head and "--headless" in worker and "--data-parallel-start-rank=2" in worker


def test_sim_swaps_only_the_engine():
    p = prof(SGL.replace("tp = 16", 'tp = 16\npython = "/opt/py/bin/python3"'))
    plan = build_deployment(p, sim=True)
    # the host-side runtime's `sim ENGINE`, run at launch by the profile's python on each node
    assert plan.sim and plan.steps[0].command.executable == ("tunedeck-host", "sim", "sglang")
    assert plan.on_runtime and plan.python == "/opt/py/bin/python3"
    assert "--node-rank=0" in plan.steps[0].command.args


@pytest.mark.parametrize(
    "text, key, words",
    [
        (SGL.replace('"gpu-a", ', '"gpu-a", "gpu-c", '), "tp", "not divisible by the 3 nodes"),
        (SGL.replace("tp = 16", "tp = 32"), "tp", "16 GPUs per node"),
        (SGL.replace('"gpuop@gpu-b:2222"', '"gpu-a"'), "nodes", "listed twice"),
        (SGL.replace('"gpuop@gpu-b:2222"', '"-oProxyCommand=x"'), "nodes", "is not a host"),
        (SGL.replace(', "gpuop@gpu-b:2222"', ""), "nodes", "two or more"),
        (SGL + "\n[deploy]\nport = 70000\n", "deploy.port", "out of range 1..65535"),
        (SGL + "\n[deploy]\nport = 30000\n", "deploy.port", "also the server's HTTP port"),
        (SGL + '\n[deploy]\nmode = "ray"\n', "deploy.mode", "not a sglang mode"),
        (VLLM + "\n[deploy]\npp = 4\n", "deploy.pp", "8 × 4 = 32 GPUs"),
        (VLLM + '\n[deploy]\nmode = "dp"\ndp = 3\n', "deploy.dp", "not divisible"),
        (VLLM + '\n[deploy]\nnode_addresses = ["10.0.0.1"]\n', "deploy.node_addresses", "1 entries for 2 nodes"),
        (VLLM + '\n[deploy]\nnode_addresses = "10.0.0.1"\n', "deploy.node_addresses", "expected a list"),
        (
            VLLM + '\n[deploy]\nnode_addresses = ["10.0.0.1", "-x"]\n',
            "deploy.node_addresses",
            "entry 2: '-x' is not a host name",
        ),
        (VLLM + '\n[deploy]\nray_temp_dir = "tmp/ray"\n', "deploy.ray_temp_dir", "not an absolute path"),
        (VLLM + '\n[deploy]\nray_temp_dir = "/tmp/../ray"\n', "deploy.ray_temp_dir", "contains '..'"),
        (VLLM + f'\n[deploy]\nray_temp_dir = "/{"x" * 50}"\n', "deploy.ray_temp_dir", "longer than 40 bytes"),
        (VLLM + "\n[deploy]\nray_num_cpus = -1\n", "deploy.ray_num_cpus", ""),
        (VLLM + '\n[deploy]\nray_dashboard = "no"\n', "deploy.ray_dashboard", "expected true or false"),
        (SGL + "\nnnodes = 2\n", "flags.nnodes", "given twice (also in deploy (tp))"),
        (
            SGL.replace("enable-metrics = true", "enable-metrics = true\nnode-rank = 1"),
            "flags.node-rank",
            "given twice",
        ),
        (
            SGL.replace('nodes = ["gpu-a", "gpuop@gpu-b:2222"]\n', "") + "\n[deploy]\nport = 5000\n",
            "deploy",
            "needs nodes",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_key_and_the_file(tmp_path: Path, text: str, key: str, words: str):
    with pytest.raises(ProfileError) as ei:
        build_deployment(prof(text, tmp_path))
    msg = str(ei.value)
    assert "\n" not in msg and "multi.toml" in msg and words in msg, msg
    assert ei.value.key == key, msg
    assert ei.value.line is not None, msg


def test_a_node_idle_under_ray_is_a_warning():
    plan, issues = check_deployment(prof(VLLM.replace('["gpu-a", "gpu-b"]', '["a", "b", "c"]') + "[deploy]\npp = 2\n"))
    assert plan is not None and any("idle" in i.message for i in issues)


def test_profile_round_trips_nodes_and_deploy():
    from tunedeck.profiles.model import profile_to_toml

    p = prof(VLLM + '[deploy]\nmode = "dp"\nport = 14000\n')
    again = load_profile_text(profile_to_toml(p), name="multi")
    assert again.nodes == p.nodes and again.deploy == p.deploy


def _profile_command(profiles: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``tunedeck profiles command ARGS`` with the user's profiles in ``profiles``."""
    return subprocess.run(
        [*tunedeck_cmd(), "profiles", "command", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, "TUNEDECK_PROFILES": str(profiles)},
    )


def test_profiles_command_json_shows_every_node(tmp_path: Path):
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "r1.toml").write_text(SGL)
    r = _profile_command(user, "r1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nodes"] == ["gpu-a", "gpuop@gpu-b:2222"] and out["mode"] == "tp"
    assert [s["node"] for s in out["steps"]] == out["nodes"]
    assert "--node-rank=1" in out["steps"][1]["argv"] and out["steps"][1]["command"].endswith("--enable-metrics")
    (user / "bad.toml").write_text(SGL.replace("tp = 16", "tp = 15"))
    r = _profile_command(user, "bad")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "bad.toml:4: tp: tp = 15 is not divisible by the 2 nodes" in r.stderr


# ------------------------------------------------------------------------------ triage (pure)


def ms(node, rank, state, kind=None, at=None, diag=None, proof=None, alive=None, serves=False):
    return MemberState(
        node, rank, "head" if rank == 0 else "worker", f"r{rank}", state, diag, proof, kind, at, alive, serves
    )


def test_triage_names_the_node_that_failed_first_not_the_one_that_timed_out_last():
    nodes = ["a", "b"]
    m = [
        ms(
            "a",
            0,
            "failed",
            "nccl",
            110.0,
            "NCCL error: remote process exited",
            "RuntimeError: NCCL error",
            False,
            True,
        ),
        ms("b", 1, "failed", "exited", 100.0, "process exited with rc 137", None, False),
    ]
    v = triage(m, nodes)
    assert v.state == "failed" and v.first_failed == "b" and v.diagnosis.startswith("node B (b) failed first")
    # a tie: the NCCL symptom loses against the real cause
    m[0] = ms("a", 0, "failed", "nccl", 100.2, "NCCL error", "x", False, True)
    assert triage(m, nodes).first_failed == "b"


def test_triage_a_member_stopped_on_request_never_failed_first():
    """The head stopped first, the worker logs NCCL's error before its own stop reaches it: the
    deployment was stopped, it did not fail (a follower in another terminal once said "failed")."""
    nodes = ["a", "b"]
    m = [
        ms("a", 0, "stopped", None, None, "stopped (by you)", None, False, True),
        ms("b", 1, "stopped", "nccl", 100.0, "stopped (by you)", "RuntimeError: NCCL error", False),
    ]
    v = triage(m, nodes)
    assert v.state != "failed" and v.first_failed is None, v
    # a real failure before the stop is still one
    m[1] = ms("b", 1, "failed", "nccl", 100.0, "NCCL error", "RuntimeError: NCCL error", False)
    assert triage(m, nodes).state == "failed"


def test_triage_a_worker_that_never_joined():
    proof = "torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. 1/2 clients joined."
    m = [
        ms("a", 0, "failed", "rendezvous", 130.0, "rendezvous timed out", proof, False, True),
        ms("b", 1, "starting", alive=True),
    ]
    v = triage(m, ["a", "b"])
    assert v.state == "failed" and v.never_joined == ("b",) and v.diagnosis.startswith("node B (b) never joined")
    assert v.proof == proof


def test_triage_ready_needs_the_head_ready_and_every_node_alive():
    m = [ms("a", 0, "ready", alive=True, serves=True), ms("b", 1, "starting", alive=True)]
    assert triage(m, ["a", "b"]).state == "ready"
    m[1] = ms("b", 1, "starting", alive=None)
    assert triage(m, ["a", "b"]).state == "ready"
    m[0] = ms("a", 0, "starting", alive=True, serves=True)
    assert triage(m, ["a", "b"]).state == "starting"


def test_merged_log_keeps_each_nodes_order_and_sorts_by_time():
    a = "[2026-01-01 10:00:01] a1\n[2026-01-01 10:00:05 TP0] a2\ncontinued\n"
    b = "[2026-01-01 10:00:03] b1\nLoading 1/2\rLoading 2/2\n[2026-01-01 10:00:09] b2\n"
    out = merge_logs([("a", a), ("b", b)])
    assert out == [
        ("a", "[2026-01-01 10:00:01] a1"),
        ("b", "[2026-01-01 10:00:03] b1"),
        ("b", "Loading 2/2"),
        ("a", "[2026-01-01 10:00:05 TP0] a2"),
        ("a", "continued"),
        ("b", "[2026-01-01 10:00:09] b2"),
    ]


def test_ray_status_v_gives_each_nodes_gpus():
    from pathlib import Path

    from tunedeck.services.deploy.launch import ray_node_gpus

    real = (Path(__file__).parent.parent / "data" / "ray" / "ray-2.60.0-status-v.txt").read_text()
    assert ray_node_gpus(real) == [8.0]
    two = real + (
        "\nNode: 0b7c (node_0b7c)\n Usage:\n  0.0/2.0 CPU\n  0B/16.15GiB memory\n  0B/6.92GiB object_store_memory\n"
    )
    assert ray_node_gpus(two) == [8.0, 0.0]  # a node without a GPU line has none
    assert ray_node_gpus("no nodes") == []


def test_ray_short_of_gpus_names_the_nodes_that_joined_without_any():
    from tunedeck.services.deploy.launch import ray_short_of_gpus

    text = ray_short_of_gpus(8, 16, [8.0, 0.0], 2, 15)
    assert text.startswith("Ray shows 8 of the 16 GPUs the placement needs after 15 s")
    assert "2 of the 2 nodes joined, with 8, 0 GPUs" in text and "(1 node joined without GPUs" in text
    assert ray_short_of_gpus(0, 16, [], 2, 15).endswith("after 15 s")  # nothing read: no node figures
    named = ray_short_of_gpus(8, 16, [8.0, 0.0], 2, 15, ["gpuop@node-b:2222"])
    assert "(1 node joined without GPUs: gpuop@node-b:2222; its ray start's --num-gpus" in named


def test_the_ray_nodes_query_is_one_line_a_host_command_may_carry():
    from tunedeck.services.deploy.launch import RAY_NODES_CODE
    from tunedeck.util.safety import check_argv

    check_argv(["python3", "-c", RAY_NODES_CODE, "10.0.0.1:6379"])  # a newline is refused there
    compile(RAY_NODES_CODE, "ray-nodes", "exec")


def test_a_ray_nodes_address_is_its_pinned_one_else_what_ray_start_printed():
    from tunedeck.services.deploy.launch import ray_node_address

    started = "Local node IP: 10.177.61.3\n\n------\nRay runtime started.\n"
    assert ray_node_address(["ray", "start", "--node-ip-address=10.0.0.9", "--block"], started) == "10.0.0.9"
    assert ray_node_address(["ray", "start", "--block"], started) == "10.177.61.3"
    assert ray_node_address(["ray", "start"], "") is None


class _RayStatusHost(LocalHost):
    """Answers ``ray status -v`` with each of ``texts`` in turn (the last one from then on)."""

    is_local = False

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self.texts, self.calls = texts, 0

    async def _run(self, cmd: Command) -> RunResult:
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        return RunResult(0, text, "")


def _ray_status(*gpus: float) -> str:
    total = sum(gpus)
    head = f"======== Autoscaler status ========\nTotal Usage:\n 0.0/{total:g} GPU\n\n"
    return head + "".join(f"Node: n{i} (node_{i})\n Usage:\n  0.0/{g:g} GPU\n" for i, g in enumerate(gpus))


async def test_the_ray_wait_ends_once_every_node_joined_and_the_gpus_held():
    from tunedeck.services.deploy.launch import wait_ray_gpus

    # the worker joins at the second poll without GPUs: short, and it stays so
    host = _RayStatusHost([_ray_status(8), _ray_status(8, 0)])
    t0 = time.monotonic()
    have, per_node = await wait_ray_gpus(host, ["ray", "status"], 16, timeout=60, poll=0.01, nodes=2, settle=0.1)
    assert (have, per_node) == (8.0, [8.0, 0.0])
    assert time.monotonic() - t0 < 30  # not the 60-s deadline
    assert host.calls >= 3  # the figures held over polls before it gave up

    # a worker whose GPUs show a poll after it joined is waited for
    late = _RayStatusHost([_ray_status(8, 0), _ray_status(8, 8)])
    assert await wait_ray_gpus(late, ["ray", "status"], 16, timeout=60, poll=0.01, nodes=2, settle=5) == (
        16.0,
        [8.0, 8.0],
    )

    # a node that has not joined yet: the wait goes on to its deadline
    missing = _RayStatusHost([_ray_status(8)])
    t0 = time.monotonic()
    assert await wait_ray_gpus(missing, ["ray", "status"], 16, timeout=0.3, poll=0.01, nodes=2, settle=0.05) == (
        8.0,
        [8.0],
    )
    assert time.monotonic() - t0 >= 0.3
