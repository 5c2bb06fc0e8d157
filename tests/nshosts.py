"""N "GPU hosts" on one machine: each a network namespace with its own sshd, its own simulated GPUs
and its own address, all joined by veth to one bridge (in a switch namespace of its own, so the
machine's firewall and bridge settings never apply). The test process, in the root namespace,
reaches every host through the same bridge, as a laptop reaches a cluster.

    from tests.nshosts import ns_hosts  # noqa: F401  (fixture)

    def test_x(ns_hosts):
        a, b = ns_hosts(2)  # NsHost: .sshd, .ip, .state, .cut()/.restore() (the link), .cut_operator() (SSH only)

Each host's sshd runs under ``ip netns exec``, listens on the host's address, and gives its
sessions ``PATH=<shims>:…`` and ``TUNEDECK_HOME=<its own remote home>``. The shims put the host's
simulated GPUs behind ``nvidia-smi`` and ``tdpython`` (this machine's Python with the tunedeck
package, ``TUNEDECK_SIM_STATE`` = the host's), and ``ray`` runs the ``ray`` beside this Python
(from PyPI, the ``[test]`` extra). The first host's client home (key, known_hosts) logs in to all.

Clusters may run side by side (pytest-xdist workers, or two test runs on one machine): each claims
a /24 of 10.214.0.0/16 that no live cluster holds, under a lock (a claim file in a folder of /tmp
names its owner's pid), and takes its namespace and link names from it; its Ray temp dirs are its
own. A claim whose owner is dead is taken over, after what it left (processes in its namespaces,
its links) is removed.

Teardown kills every process inside each namespace (``ip netns pids``: by PID, never by name),
then deletes the links and namespaces. Needs root and iproute2: skips elsewhere with the reason,
fails in CI (``CI=true``).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.conftest import REPO
from tests.sshd import SshdServer, _ensure_root_alias, _ensure_user, sshd_missing_reason

#: the third octet of each cluster's 10.214.X.0/24 (one cluster a /24)
OCTETS = range(20, 220)
#: one claim file per /24 in use (its owner's pid), and the lock taken while claiming
SLOTS = Path(tempfile.gettempdir()) / "tunedeck-nshosts-claims"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def ns_pids(ns: str) -> list[int]:
    """Every process inside network namespace ``ns``."""
    r = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


@dataclass
class NsHost:
    """One host: a namespace, its address, its sshd and its simulated GPUs."""

    name: str  # the namespace
    ip: str
    switch_ns: str
    switch_port: str  # its veth end on the bridge (down = the host's link is cut)
    base: Path
    sshd: SshdServer
    #: a short directory for Ray's --temp-dir (Ray's socket paths under it must fit in 107 bytes)
    ray_tmp: Path
    state: Path = field(init=False)

    def __post_init__(self) -> None:
        self.state = self.base / "sim-state"

    def cut(self) -> None:
        """Cut the host's link (its veth on the bridge goes down): nothing reaches it, nothing leaves."""
        _ip("-n", self.switch_ns, "link", "set", self.switch_port, "down")

    def restore(self) -> None:
        _ip("-n", self.switch_ns, "link", "set", self.switch_port, "up")

    def _ssh_rules(self, op: str) -> None:
        port = str(self.sshd.port)
        for chain, way in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
            subprocess.run(
                # -w: a legacy iptables takes one lock for the whole machine (clusters run side by side)
                [
                    "ip",
                    "netns",
                    "exec",
                    self.name,
                    "iptables",
                    "-w",
                    "10",
                    op,
                    chain,
                    "-p",
                    "tcp",
                    way,
                    port,
                    "-j",
                    "DROP",
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )

    def cut_operator(self) -> None:
        """Cut the operator's link only (its SSH traffic dropped silently, inside this host's
        namespace): the cluster network between the nodes stays up, as when a laptop's link drops."""
        self._ssh_rules("-I")

    def restore_operator(self) -> None:
        self._ssh_rules("-D")

    def pids(self) -> list[int]:
        return ns_pids(self.name)

    def processes(self, needle: str = "") -> list[tuple[int, str]]:
        """(pid, cmdline) of the processes inside this host whose command line holds ``needle``."""
        return [(p, c) for p in self.pids() if needle in (c := cmdline(p))]

    def write_shims(self, *, load_s: float = 2.0, extra: str = "") -> None:
        """``tdpython``, ``nvidia-smi`` and ``ray`` for this host (see the module docstring)."""
        self.state.mkdir(parents=True, exist_ok=True)
        q = shlex.quote
        head = (
            "#!/bin/sh\n"
            f"PYTHONPATH={q(str(REPO))}; export PYTHONPATH\n"
            f"TUNEDECK_SIM_STATE={q(str(self.state))}; export TUNEDECK_SIM_STATE\n"
            f"TUNEDECK_SIM_LOAD_S={load_s}; export TUNEDECK_SIM_LOAD_S\n"
            "TUNEDECK_SIM_NCCL_TIMEOUT_S=3; export TUNEDECK_SIM_NCCL_TIMEOUT_S\n"
            "RAY_USAGE_STATS_ENABLED=0; export RAY_USAGE_STATS_ENABLED\n" + extra
        )
        py = q(sys.executable)
        ray = q(str(Path(sys.executable).parent / "ray"))
        files = {
            "nvidia-smi": head + f'exec {py} -m tunedeck.sim.smi "$@"\n',
            "tdpython": head + f'exec {py} "$@"\n',
            "ray": head + f'exec {ray} "$@"\n',
        }
        for name, text in files.items():
            p = self.sshd.shim_dir / name
            p.write_text(text)
            p.chmod(0o755)

    def gpus_used(self) -> list[int]:
        """memory.used (MiB) of each of this host's simulated GPUs."""
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tunedeck",
                "sim",
                "smi",
                "--query-gpu=index,memory.used",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "TUNEDECK_SIM_STATE": str(self.state), "PYTHONPATH": str(REPO)},
        )
        return [int(line.split(",")[1]) for line in r.stdout.splitlines() if line.strip()]


def tag_of(octet: int) -> str:
    """The names of a cluster's namespaces and links: ``tdsw<tag>`` (the switch), ``tdr<tag>`` (the
    root namespace's link), ``tdh<tag><i>`` (host i) and ``tdv<tag><i>s``/``n`` (its veth pair)."""
    return f"n{octet:03d}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(slot: Path) -> int | None:
    """The pid a claim file names (None: no claim, or one cut short before its pid was written)."""
    try:
        text = slot.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _sweep(tag: str) -> bool:
    """Remove what the cluster ``tag`` of a dead owner left: the processes in its namespaces (by PID),
    the namespaces and its root-namespace link (the veths go with their namespaces). True when
    anything was there."""
    listed = _ip("netns", "list", check=False).stdout.split()
    mine = [n for n in listed if n == f"tdsw{tag}" or (n.startswith(f"tdh{tag}") and n[3 + len(tag) :].isdigit())]
    link = _ip("link", "del", f"tdr{tag}", check=False).returncode == 0
    for ns in mine:
        for pid in ns_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _ip("netns", "del", ns, check=False)
    return link or bool(mine)


def claim_octet() -> int:
    """A /24 (its third octet) that no live cluster on this machine holds, claimed for this process.

    Under an exclusive lock: an octet is free when no claim file names a live pid and no address
    of the root namespace is in it (a cluster of a run that does not claim, or a link left behind).
    The search starts at a place that depends on the pid, so that workers seldom wait on each other.
    """
    SLOTS.mkdir(mode=0o755, exist_ok=True)
    with open(SLOTS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = _ip("-o", "-4", "addr", "show").stdout
        start = os.getpid() % len(OCTETS)
        for k in range(len(OCTETS)):
            octet = OCTETS[(start + k) % len(OCTETS)]
            slot = SLOTS / str(octet)
            owner = _owner(slot)
            if owner is not None and _alive(owner):
                continue
            if f" 10.214.{octet}." in used and _sweep(tag_of(octet)):
                used = _ip("-o", "-4", "addr", "show").stdout
            if f" 10.214.{octet}." in used:
                continue
            _sweep(tag_of(octet))  # namespaces of a run whose teardown was cut short
            slot.write_text(f"{os.getpid()}\n")
            return octet
    raise RuntimeError(f"no free /24 in 10.214.{OCTETS[0]}-{OCTETS[-1]}.0: every one is claimed ({SLOTS})")


class NsCluster:
    """The bridge, the root namespace's link to it, and the hosts made so far."""

    def __init__(self) -> None:
        octet = claim_octet()
        self.slot = SLOTS / str(octet)
        self.tag = tag_of(octet)
        self.net = f"10.214.{octet}"
        self.switch = f"tdsw{self.tag}"
        self.root_veth = f"tdr{self.tag}"
        self.hosts: list[NsHost] = []
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="tunedeck-nshosts-"))
        self.tmp.chmod(0o755)
        self.short = Path(tempfile.mkdtemp(prefix="tdr", dir="/tmp"))

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def up(self) -> None:
        self._netns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        peer = f"{self.root_veth}p"
        _ip("link", "add", self.root_veth, "type", "veth", "peer", "name", peer)
        self.links.append(self.root_veth)
        _ip("link", "set", peer, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", peer, "master", "br0", "up")
        _ip("addr", "add", f"{self.net}.1/24", "dev", self.root_veth)
        _ip("link", "set", self.root_veth, "up")

    def add_host(self) -> NsHost:
        i = len(self.hosts)
        name = f"tdh{self.tag}{i}"
        ip = f"{self.net}.{i + 2}"
        self._netns(name)
        sw, inner = f"tdv{self.tag}{i}s", f"tdv{self.tag}{i}n"
        _ip("link", "add", sw, "type", "veth", "peer", "name", inner)
        _ip("link", "set", sw, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", sw, "master", "br0", "up")
        _ip("link", "set", inner, "netns", name)
        _ip("-n", name, "addr", "add", f"{ip}/24", "dev", inner)
        _ip("-n", name, "link", "set", inner, "up")
        base = self.tmp / f"host{i}"
        base.mkdir()
        server = SshdServer(base, listen=ip, netns=name)
        host = NsHost(name, ip, self.switch, sw, base, server, self.short / f"h{i}")
        server.start()
        if self.hosts:
            server.admit(self.hosts[0].sshd)
        host.write_shims()
        self.hosts.append(host)
        return host

    def down(self) -> None:
        """Kill everything inside the hosts (by PID), then remove links and namespaces."""
        for h in self.hosts:
            h.sshd.stop()
        for ns in self.namespaces:
            for _ in range(3):
                pids = ns_pids(ns)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.3)
        for link in self.links:
            _ip("link", "del", link, check=False)
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.short, ignore_errors=True)
        self.slot.unlink(missing_ok=True)


def nshosts_missing_reason() -> str | None:
    reason = sshd_missing_reason()
    if reason:
        return reason
    if not shutil.which("ip"):
        return "needs iproute2 (ip netns)"
    if not (Path(sys.executable).parent / "ray").exists():
        return "needs ray beside this Python (pip install -e '.[test]')"
    probe = f"tdprobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add is not permitted here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def ns_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], list[NsHost]]]:
    """``ns_hosts(n)`` → n hosts; HOME points at the first host's client home."""
    reason = nshosts_missing_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"namespaced-host tests cannot run in CI: {reason}")
        pytest.skip(reason)
    _ensure_user("gpuop")
    _ensure_root_alias()
    cluster = NsCluster()

    def make(n: int) -> list[NsHost]:
        if not cluster.hosts:
            cluster.up()
        while len(cluster.hosts) < n:
            cluster.add_host()
        cluster.hosts[0].sshd.use_home(monkeypatch)
        return list(cluster.hosts)

    try:
        yield make
    finally:
        cluster.down()
