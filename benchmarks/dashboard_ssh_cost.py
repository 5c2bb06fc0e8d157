#!/usr/bin/env python3
"""What the dashboard costs on BOTH ends, over a real SSH link to a "GPU host".

    sudo python benchmarks/dashboard_ssh_cost.py [--seconds 60] [--warmup 15] [--mode sampler|legacy|both]
                                                 [--shell-delay 0.1] [--json FILE]

The "GPU host" is this machine behind a real OpenSSH sshd on 127.0.0.1 (the test
fixture ``tests/sshd.py``; needs root): a uid-0 login ``tdslow`` whose login shell is
bash with a slow start-up file (``~/.bashrc``, which bash reads for every command sshd
runs: it starts a Python, like a conda or pyenv init, and sleeps ``--shell-delay`` s), 8 simulated H200 GPUs behind the simulator's
``nvidia-smi`` and one simulated SGLang server launched there with ``tunedeck launch``.
The dashboard is the real ``python -m tunedeck --host tdslow@127.0.0.1:PORT`` in a 120×36
pseudo-terminal, status screen open, 1 Hz.

Measured after ``--warmup`` seconds, for ``--seconds``:

- local: the dashboard process's CPU (% of one core) and peak RSS;
- host: CPU of everything below sshd (sessions, shells, tunedeck's scripts and its
  sampler; reaped children included), in % of one core, with the simulated
  nvidia-smi's share (a Python program, much dearer than the real one) shown apart;
- processes started below sshd per minute (polled at 20 Hz: a process shorter than
  that can be missed, so it is a lower bound), and login-shell start-ups per minute
  (exact: the start-up file counts itself);
- SSH connections (``sshd: tdslow@notty``) and exec channels (their child shells) open,
  the most seen at once.

``--mode legacy`` runs today's per-command collectors (``TUNEDECK_HOST_SAMPLER=off``),
``sampler`` the host sampler, ``both`` one after the other. Prints a table and one JSON
line per mode. Goals: local <= 3 % and <= 150 MB; host <= 1 %; 0 spawns a minute
after start-up; <= 2 SSH connections.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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

from tests.sshd import SshdServer, _cmdline, _descendants, sshd_missing_reason

USER = "tdslow"
USER_HOME = "/var/tmp/tunedeck-bench-slow"
SERVER_PORT = 30377
GOALS = {
    "local_cpu_percent": 3.0,
    "local_rss_mb": 150.0,
    "host_cpu_percent": 1.0,
    "spawns_per_min": 0.0,
    "ssh_connections": 2,
}


def ensure_user() -> None:
    """A uid-0 alias whose login shell is bash (so BASH_ENV, the slow start-up file, applies)."""
    os.makedirs(USER_HOME, mode=0o700, exist_ok=True)
    if subprocess.run(["id", "-u", USER], capture_output=True).returncode != 0:
        r = subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", USER_HOME, "-s", "/bin/bash", USER],
            capture_output=True,
            text=True,
        )
        if r.returncode not in (0, 9):
            raise SystemExit(f"useradd {USER} failed: {r.stderr.strip()}")
    subprocess.run(["usermod", "-p", "*", USER], capture_output=True, check=True)


def setup(base: Path, shell_delay: float) -> tuple[SshdServer, Path]:
    from tunedeck.sim.demo import write_shims

    server = SshdServer(base)
    counter = base / "shell-starts"
    counter.write_text("")
    counter.chmod(0o666)
    rc = Path(USER_HOME) / ".bashrc"  # bash run by sshd reads it for every command
    rc.write_text(
        f"# a login shell's start-up file, like a conda or pyenv init\n"
        f"echo x >> {counter}\n"
        f"/usr/bin/python3 -c 'import json, sqlite3' 2>/dev/null\n"
        f"sleep {shell_delay:g}\n"
    )
    rc.chmod(0o644)
    sim_state = base / "sim"
    write_shims(server.shim_dir, sys.executable)
    cfg = server.config_path.read_text()
    cfg = cfg.replace(
        f"TUNEDECK_HOME={server.remote_home}",
        f"TUNEDECK_HOME={server.remote_home} TUNEDECK_SIM_STATE={sim_state} TUNEDECK_SIM_LOAD_S=2",
    )
    server.config_path.write_text(cfg)
    server.start()
    return server, counter


def cli(server: SshdServer, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = server.client_env(PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "tunedeck", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


class HostWatch:
    """CPU, processes and channels below the sshd listener."""

    def __init__(self, server: SshdServer) -> None:
        assert server.proc is not None
        self.listener = server.proc.pid
        self.seen: set[tuple[int, str]] = set()
        self.smi_cpu: dict[tuple[int, str], float] = {}
        self.max_conns = 0
        self.max_channels = 0
        self.tick = os.sysconf("SC_CLK_TCK")

    def _stat(self, pid: int) -> list[str] | None:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None

    def poll(self) -> float:
        """Total CPU seconds so far (the listener's reaped children + every live descendant)."""
        st = self._stat(self.listener)
        total = (int(st[13]) + int(st[14])) / self.tick if st else 0.0
        conns = channels = 0
        pids = _descendants(self.listener)
        parents = {}
        for pid in pids:
            s = self._stat(pid)
            if s is None:
                continue
            key = (pid, s[19])
            self.seen.add(key)
            cpu = sum(int(x) for x in s[11:15]) / self.tick
            total += cpu
            parents[pid] = int(s[1])
            cl = _cmdline(pid)
            if cl.startswith(f"sshd: {USER}@notty"):
                conns += 1
            elif " sim smi" in cl:
                self.smi_cpu[key] = cpu
        sessions = {p for p in pids if _cmdline(p).startswith(f"sshd: {USER}@notty")}
        channels = sum(1 for p, pp in parents.items() if pp in sessions)
        self.max_conns = max(self.max_conns, conns)
        self.max_channels = max(self.max_channels, channels)
        return total


def measure(server: SshdServer, counter: Path, mode: str, seconds: float, warmup: float) -> dict:
    env_extra = {"TUNEDECK_HOST_SAMPLER": "off"} if mode == "legacy" else {}
    old = {k: os.environ.get(k) for k in ("HOME", "TUNEDECK_HOST_SAMPLER")}
    os.environ.update(server.client_env(**env_extra))
    if mode != "legacy":
        os.environ.pop("TUNEDECK_HOST_SAMPLER", None)
    target = server.target(USER)
    proc, master = _spawn([sys.executable, "-m", "tunedeck", "--host", target], 120, 36)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    ps = psutil.Process(proc.pid)
    sink = bytearray()
    watch = HostWatch(server)
    try:
        _drain(master, time.monotonic() + warmup, sink)
        if proc.poll() is not None:
            raise SystemExit(f"dashboard exited during warm-up:\n{sink.decode('utf-8', 'replace')[-2000:]}")
        watch.poll()
        watch.seen_at_start = set(watch.seen)  # type: ignore[attr-defined]
        watch.max_conns = watch.max_channels = 0
        smi0 = sum(watch.smi_cpu.values())
        host0 = watch.poll()
        shells0 = len(counter.read_text().splitlines())
        c0 = ps.cpu_times()
        t0 = time.monotonic()
        rss = []
        next_rss = t0
        while time.monotonic() - t0 < seconds:
            _drain(master, time.monotonic() + 0.05, sink)
            watch.poll()
            if time.monotonic() >= next_rss:
                rss.append(ps.memory_info().rss)
                next_rss += 1.0
            if proc.poll() is not None:
                raise SystemExit(f"dashboard exited early (rc {proc.returncode})")
        wall = time.monotonic() - t0
        host1 = watch.poll()
        c1 = ps.cpu_times()
        shells1 = len(counter.read_text().splitlines())
        smi1 = sum(watch.smi_cpu.values())
        new = watch.seen - watch.seen_at_start  # type: ignore[attr-defined]
        cpu_s = (c1.user - c0.user) + (c1.system - c0.system)
        host_s = host1 - host0
        smi_s = max(0.0, smi1 - smi0)
        return {
            "mode": mode,
            "seconds": round(wall, 1),
            "local_cpu_percent": round(100 * cpu_s / wall, 2),
            "local_rss_mb": round(max(rss) / 2**20, 1),
            "host_cpu_percent": round(100 * host_s / wall, 2),
            "host_cpu_percent_without_sim_smi": round(100 * max(0.0, host_s - smi_s) / wall, 2),
            "spawns_per_min": round(60 * len(new) / wall, 1),
            "login_shells_per_min": round(60 * (shells1 - shells0) / wall, 1),
            "ssh_connections": watch.max_conns,
            "ssh_channels_max": watch.max_channels,
        }
    finally:
        try:
            os.write(master, b"\x11")  # ctrl+q
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--mode", choices=("sampler", "legacy", "both"), default="both")
    ap.add_argument("--shell-delay", type=float, default=0.1, help="seconds the slow start-up file sleeps")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.seconds <= 0 or args.warmup < 0 or args.shell_delay < 0:
        ap.error("--seconds must be positive, --warmup and --shell-delay not negative")
    why = sshd_missing_reason()
    if why:
        raise SystemExit(f"cannot run: {why}")
    ensure_user()
    base = Path(tempfile.mkdtemp(prefix="tunedeck-sshcost-"))
    for var, sub in (
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
    ):
        os.environ[var] = str(base / sub)
    server, counter = setup(base, args.shell_delay)
    target = server.target(USER)
    results = []
    try:
        r = cli(
            server,
            "launch",
            "--host",
            target,
            "--engine",
            "sglang",
            "--port",
            str(SERVER_PORT),
            "--wait",
            "--timeout",
            "120",
            "--cmd",
            "sglang",
            "serve",
            "--model-path",
            "/models/DeepSeek-V3",
            "--tp",
            "8",
            "--port",
            str(SERVER_PORT),
            "--enable-metrics",
        )
        if r.returncode != 0:
            raise SystemExit(f"could not start the simulated server:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
        modes = ["legacy", "sampler"] if args.mode == "both" else [args.mode]
        for mode in modes:
            res = measure(server, counter, mode, args.seconds, args.warmup)
            res["shell_delay_s"] = args.shell_delay
            results.append(res)
            print(json.dumps(res), flush=True)
    finally:
        cli(server, "stop", "--host", target, "--yes", timeout=120)
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    rows = [
        ("local CPU, % of a core", "local_cpu_percent", f"<= {GOALS['local_cpu_percent']:g}"),
        ("local RSS, MB (peak)", "local_rss_mb", f"<= {GOALS['local_rss_mb']:g}"),
        ("host CPU, % of a core", "host_cpu_percent", f"<= {GOALS['host_cpu_percent']:g}"),
        ("… without the simulated nvidia-smi", "host_cpu_percent_without_sim_smi", ""),
        ("processes started on the host / min", "spawns_per_min", "0"),
        ("login shells started / min", "login_shells_per_min", "0"),
        ("SSH connections", "ssh_connections", f"<= {GOALS['ssh_connections']}"),
        ("SSH channels open (most at once)", "ssh_channels_max", ""),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'':<{w}}  " + "  ".join(f"{x['mode']:>9}" for x in results) + "  goal")
    for label, key, goal in rows:
        print(f"{label:<{w}}  " + "  ".join(f"{x[key]:>9}" for x in results) + f"  {goal}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    s = next((x for x in results if x["mode"] == "sampler"), None)
    if s is None:
        return 0
    ok = (
        s["local_cpu_percent"] <= GOALS["local_cpu_percent"]
        and s["local_rss_mb"] <= GOALS["local_rss_mb"]
        and s["host_cpu_percent_without_sim_smi"] <= GOALS["host_cpu_percent"]
        and s["spawns_per_min"] == 0
        and s["ssh_connections"] <= GOALS["ssh_connections"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
