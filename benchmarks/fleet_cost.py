#!/usr/bin/env python3
"""What the fleet view costs locally: CPU (% of one core) and RSS watching 1, 4 and 16 hosts.

    sudo python benchmarks/fleet_cost.py [--hosts 1,4,16] [--seconds 30] [--warmup 15] [--repeats 3]
                                         [--net netns|loopback] [--json FILE]

Each "GPU host" is a network namespace with its own address, its own OpenSSH sshd and 8
simulated GPUs behind the simulator's ``nvidia-smi`` (its own simulator state), all joined by
veth to one bridge (the test fixture ``tests/nshosts.py``; needs root and iproute2); with
``--net loopback``, an sshd on 127.0.0.1 per host instead (``tests/sshd.py``). Logged into as
the uid-0 alias ``tdroot``. The dashboard is the real ``python -m tunedeck --host @fleetN`` (a
``[groups]`` entry of a temporary config file) in a 120×36 pseudo-terminal, fleet view
open, 1 Hz: one SSH connection and one host sampler per host.

Measured after ``--warmup`` seconds, for ``--seconds``, ``--repeats`` times (the host counts
interleaved within each repeat): the dashboard process's CPU (% of one core) and peak RSS,
and the SSH connections open at the end (one per host expected).
The hosts' side (sshd, samplers, simulated nvidia-smi) runs on the same machine and is not
counted. Prints a table of medians and one JSON line per run. Goal: <= 3 % of one core per
8 GPUs watched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from dashboard_tui_cost import _drain, _spawn

from tests.sshd import (
    ROOT_USER,
    TEST_USER,
    SshdServer,
    _ensure_root_alias,
    _ensure_user,
    sshd_missing_reason,
)

GOAL_PER_8_GPUS = 3.0
GPUS_PER_HOST = 8


def start_hosts(base: Path, n: int) -> list[SshdServer]:
    """``n`` sshd instances, each a host with 8 simulated GPUs; the first one's client home
    (key, known_hosts) logs in on all of them."""
    from tunedeck.sim.demo import write_shims

    servers: list[SshdServer] = []
    for i in range(n):
        d = base / f"host{i:02d}"
        d.mkdir()
        s = SshdServer(d)
        write_shims(s.shim_dir, sys.executable)
        sim = d / "sim"
        cfg = s.config_path.read_text().replace(
            f"TUNEDECK_HOME={s.remote_home}",
            f"TUNEDECK_HOME={s.remote_home} TUNEDECK_SIM_STATE={sim} TUNEDECK_SIM_GPUS={GPUS_PER_HOST}",
        )
        s.config_path.write_text(cfg)
        s.start()
        if servers:
            s.admit(servers[0])
        servers.append(s)
    return servers


def measure(servers: list[SshdServer], group: str, config: Path, seconds: float, warmup: float) -> dict:
    client = servers[0]
    env = client.client_env(TUNEDECK_CONFIG=str(config))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ.pop("SSH_AUTH_SOCK", None)
    try:
        proc, master = _spawn([sys.executable, "-m", "tunedeck", "--host", f"@{group}"], 120, 36)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ps = psutil.Process(proc.pid)
    sink = bytearray()
    try:
        _drain(master, time.monotonic() + warmup, sink)
        if proc.poll() is not None:
            raise SystemExit(f"dashboard exited during warm-up:\n{sink.decode('utf-8', 'replace')[-2000:]}")
        c0 = ps.cpu_times()
        t0 = time.monotonic()
        rss = []
        while time.monotonic() - t0 < seconds:
            _drain(master, min(t0 + seconds, time.monotonic() + 1.0), sink)
            rss.append(ps.memory_info().rss)
            if proc.poll() is not None:
                raise SystemExit(f"dashboard exited early (rc {proc.returncode})")
        wall = time.monotonic() - t0
        c1 = ps.cpu_times()
        cpu = 100 * ((c1.user - c0.user) + (c1.system - c0.system)) / wall
        return {
            "seconds": round(wall, 1),
            "local_cpu_percent": round(cpu, 2),
            "local_rss_mb": round(max(rss) / 2**20, 1),
            "ssh_connections": sum(len(s.session_pids(ROOT_USER)) for s in servers),
        }
    finally:
        try:
            os.write(master, b"\x11")  # ctrl+q
        except OSError:
            pass
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)


def connected(servers: list[SshdServer]) -> int:
    return sum(1 for s in servers if s.session_pids(ROOT_USER))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,4,16", help="host counts to measure (comma-separated)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--net",
        choices=("netns", "loopback"),
        default="netns",
        help="each host a network namespace with its own address, joined by a bridge (default), "
        "or every sshd on 127.0.0.1",
    )
    ap.add_argument("--json", type=Path, help="also write every run here")
    args = ap.parse_args()
    counts = [int(x) for x in args.hosts.split(",") if x.strip()]
    if not counts or min(counts) < 1 or args.seconds <= 0 or args.warmup < 0 or args.repeats < 1:
        ap.error("--hosts must be positive counts, --seconds positive, --warmup not negative, --repeats >= 1")
    why = sshd_missing_reason()
    if why:
        raise SystemExit(f"cannot run: {why}")
    _ensure_user(TEST_USER)
    _ensure_root_alias()
    base = Path(tempfile.mkdtemp(prefix="tunedeck-fleetcost-"))
    for var, sub in (
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
    ):
        os.environ[var] = str(base / sub)
    cluster = None
    if args.net == "netns":
        from tests.nshosts import NsCluster

        cluster = NsCluster()
        try:
            cluster.up()
            servers = [cluster.add_host().sshd for _ in range(max(counts))]
        except BaseException:
            cluster.down()
            raise
    else:
        servers = start_hosts(base, max(counts))
    config = base / "config.toml"
    config.write_text(
        "[groups]\n" + "".join(f"fleet{n} = {json.dumps([s.target(ROOT_USER) for s in servers[:n]])}\n" for n in counts)
    )
    runs: list[dict] = []
    try:
        for rep in range(args.repeats):
            for n in counts:
                res = measure(servers, f"fleet{n}", config, args.seconds, args.warmup)
                res.update(hosts=n, gpus=n * GPUS_PER_HOST, repeat=rep + 1)
                res["per_8_gpus_percent"] = round(res["local_cpu_percent"] / n, 2)
                runs.append(res)
                print(json.dumps(res), flush=True)
                deadline = time.monotonic() + 20
                while connected(servers) and time.monotonic() < deadline:  # the last run's links gone
                    time.sleep(0.2)
    finally:
        if cluster is not None:
            cluster.down()  # every process inside the hosts, their links and namespaces
        else:
            for s in servers:
                s.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{'hosts':>5} {'GPUs':>5} {'CPU % of a core':>16} {'per 8 GPUs':>11} {'RSS MB':>7}  (medians of "
        f"{args.repeats}, {args.seconds:g} s after {args.warmup:g} s)"
    )
    ok = True
    for n in counts:
        mine = [r for r in runs if r["hosts"] == n]
        cpu = statistics.median(r["local_cpu_percent"] for r in mine)
        rss = statistics.median(r["local_rss_mb"] for r in mine)
        per = cpu / n
        ok &= per <= GOAL_PER_8_GPUS
        print(f"{n:>5} {n * GPUS_PER_HOST:>5} {cpu:>16.2f} {per:>11.2f} {rss:>7.1f}")
    print(f"goal: <= {GOAL_PER_8_GPUS:g} % of one core per 8 GPUs")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
