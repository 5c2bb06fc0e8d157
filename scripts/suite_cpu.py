#!/usr/bin/env python3
"""Where the test suite's CPU goes: the README's test command under process accounting.

    scripts/suite_cpu.py [ARGS FOR ./scripts/test]     (as root; CI=true as you want it)

Needs root and the ``acct`` package (``apt-get install -y acct``: ``accton`` and ``dump-acct``).
The kernel writes one record for every process that ends while accounting is on (daemons, the
sessions of sshd, Ray's workers: everything a test starts, wherever it is reparented), with its
CPU time. A record names only the program (16 characters), so a thread here reads each new
process's command line from ``/proc`` every 50 ms; a process that lived less than that is counted
under its program name. A process still alive at the end is not counted.

Prints the run's wall time, the CPU seconds of every process that ended during it, the share of
the machine's cores that is, then the CPU by kind of process and the commands that used the most.
"""

from __future__ import annotations

import collections
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: clock ticks a second in ``/proc/PID/stat``'s start time and in dump-acct's CPU columns
HZ = os.sysconf("SC_CLK_TCK")

#: (kind, test on the command line): the first that matches names a process
KINDS: list[tuple[str, re.Pattern[str]]] = [
    (
        "pytest workers (the tests that run in-process: UI, unit, asyncio clients)",
        re.compile(r"exec\(eval\(sys\.stdin"),
    ),
    ("pytest controller and cache warm-up", re.compile(r"-m pytest\b")),
    ("simulated nvidia-smi", re.compile(r"tunedeck\.sim\.smi|\bsim smi\b|(?:^|/)nvidia-smi\b")),
    (
        "host-side jobs (benchmark client, A/B, campaign)",
        re.compile(r"\.pyz (?:bench|ab|tune)\b|services\.deploy(?:ab|tune)"),
    ),
    ("simulated servers", re.compile(r"(?:-m tunedeck|\.pyz) sim (?:sglang|vllm)\b|fakesrv")),
    ("Ray", re.compile(r"/bin/ray\b|site-packages/ray/")),
    ("tunedeck CLI processes", re.compile(r"-m tunedeck\b")),
    (
        "the checks (contracts, ruff, mypy, vulture, vermin)",
        re.compile(r"\b(?:lint-imports|ruff|mypy|vulture|vermin)\b"),
    ),
    ("chromium", re.compile(r"chromium")),
]
SHELL = {"sh", "bash", "dash", "busybox", "cat", "tr", "cut", "wc", "sed", "grep", "mkdir", "mv", "rm", "tail"}
SHELL |= {"sleep", "timeout", "ps", "kill", "dd", "head", "env", "date", "stat", "ls", "awk", "mktemp", "touch"}
SHELL |= {"setsid", "nohup", "flock", "chmod", "readlink", "sort", "uniq", "tee", "ip", "iptables", "ssh"}


class Sampler(threading.Thread):
    """Every new process's command line, with its start time. A pid listed in the pass before is
    the same process (its number cannot come back within one pass), so each pass reads only the
    new ones: the sampler stays a small load beside what it measures."""

    def __init__(self) -> None:
        super().__init__(name="proc-sampler", daemon=True)
        self.seen: dict[int, list[tuple[float, str]]] = collections.defaultdict(list)
        self.stop = threading.Event()
        self.boot = next(
            float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime")
        )

    def run(self) -> None:
        before: set[str] = set()
        while not self.stop.is_set():
            now = {pid for pid in os.listdir("/proc") if pid.isdigit()}
            for pid in now - before:
                try:
                    start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except (OSError, IndexError):
                    continue  # gone meanwhile
                if cmd:
                    self.seen[int(pid)].append((self.boot + int(start) / HZ, cmd.strip()))
            before = now
            time.sleep(0.05)

    def command(self, pid: int, began: float | None) -> str | None:
        found = self.seen.get(pid)
        if not found:
            return None
        if began is None:
            return found[-1][1]
        return min(found, key=lambda e: abs(e[0] - began))[1]


def kind_of(comm: str, cmd: str | None) -> str:
    if cmd is not None:
        for kind, rx in KINDS:
            if rx.search(cmd):
                return kind
    if comm.startswith(("ray", "raylet", "gcs_", "grpc_", "PipeReaderThd", "timer_manager")):
        return "Ray"
    if comm == "sshd":
        return "sshd"
    if comm in SHELL:
        return "shell and tools (host scripts, fixtures)"
    return "other"


def shape(cmd: str) -> str:
    """A command line with its temporary paths and numbers masked, for grouping."""
    cmd = re.sub(r"/tmp/\S+", "TMP", cmd)
    return re.sub(r"\d+", "N", cmd)[:100]


def main(argv: list[str]) -> int:
    missing = [t for t in ("accton", "dump-acct") if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        print(f"suite_cpu: needs root and {', '.join(missing) or 'accton'} (apt-get install -y acct)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        acct = Path(tmp) / "pacct"
        acct.touch()
        sampler = Sampler()
        sampler.start()
        subprocess.run(["accton", str(acct)], check=True, stdout=subprocess.DEVNULL)
        t0 = time.monotonic()
        try:
            rc = subprocess.run([str(REPO / "scripts" / "test"), *argv], cwd=REPO).returncode
        finally:
            wall = time.monotonic() - t0
            subprocess.run(["accton", "off"], check=True, stdout=subprocess.DEVNULL)
            sampler.stop.set()
            sampler.join()
        text = subprocess.run(["dump-acct", str(acct)], capture_output=True, text=True, check=True).stdout
    by_kind: collections.Counter[str] = collections.Counter()
    n_kind: collections.Counter[str] = collections.Counter()
    by_cmd: collections.Counter[str] = collections.Counter()
    n_cmd: collections.Counter[str] = collections.Counter()
    total = 0.0
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 15:
            continue
        cpu = (float(f[2]) + float(f[3])) / HZ
        try:
            began: float | None = datetime.datetime.strptime(
                f[14], "%a %b %d %H:%M:%S %Y"
            ).timestamp()  # local time, as dump-acct
        except ValueError:
            began = None
        cmd = sampler.command(int(f[9]), began)
        kind = kind_of(f[0], cmd)
        total += cpu
        by_kind[kind] += cpu
        n_kind[kind] += 1
        key = shape(cmd) if cmd else f"[{f[0]}]"
        by_cmd[key] += cpu
        n_cmd[key] += 1
    cores = os.cpu_count() or 1
    print(f"\nscripts/test exit status {rc}; wall {wall:.0f} s; {sum(n_kind.values())} processes ended")
    print(f"CPU {total:.0f} s: {100 * total / (wall * cores):.0f}% of {cores} cores over the run\n")
    print(f"{'CPU-s':>7} {'share':>6} {'procs':>7}  kind")
    for kind, cpu in by_kind.most_common():
        print(f"{cpu:7.0f} {100 * cpu / total:5.0f}% {n_kind[kind]:7d}  {kind}")
    print(f"\n{'CPU-s':>7} {'procs':>7} {'each':>6}  the commands that used the most")
    for key, cpu in by_cmd.most_common(20):
        print(f"{cpu:7.1f} {n_cmd[key]:7d} {cpu / n_cmd[key]:6.2f}  {key}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
