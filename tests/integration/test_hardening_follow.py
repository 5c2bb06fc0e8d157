"""``tunedeck logs --follow``: ends when the run ends (issue item 3), and reports a silently
dropped link (iptables DROP inside a network namespace) quickly, while it is still down (item 2).

The namespace test needs root and ``ip netns`` (CI has both); elsewhere it skips with the reason.
Its DROP rules live inside the test's own namespace: the machine's firewall is never touched.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import REPO, tunedeck_cmd
from tests.sshd import SSHD, SshdServer, _descendants, sshd, sshd_server  # noqa: F401  (fixtures)


def _read_until(proc: subprocess.Popen[bytes], stream: str, needle: bytes, timeout: float) -> bytes:
    """Bytes read from proc.stdout/stderr until ``needle`` appears (or the timeout)."""
    f = getattr(proc, stream)
    buf = b""
    end = time.monotonic() + timeout
    while needle not in buf and time.monotonic() < end:
        r, _, _ = select.select([f], [], [], 0.1)
        if r:
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
    return buf


# ---------------------------------------------------------------------------- item 3: ends with the run


@pytest.mark.timeout(120)
def test_follow_ends_when_the_run_is_stopped() -> None:
    script = 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.05; done'
    r = subprocess.run(
        [*tunedeck_cmd(), "launch", "--json", "--cmd", "sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    rid = json.loads(r.stdout)["run_id"]
    follow = subprocess.Popen(
        [*tunedeck_cmd(), "logs", rid, "--follow"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        first = _read_until(follow, "stdout", b"line 3\n", 30)
        assert b"line 3\n" in first
        s = subprocess.run(
            [*tunedeck_cmd(), "stop", rid, "--yes", "--grace", "3", "--gpu-wait", "0"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert s.returncode == 0, s.stderr
        stopped = time.monotonic()
        try:
            out, err = follow.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("logs --follow still following 30 s after stop finished")
        assert follow.returncode == 0, err
        print(f"logs --follow ended {time.monotonic() - stopped:.1f} s after stop finished")
        assert time.monotonic() - stopped < 30
        assert b"has exited" in err and b"stopped following" in err, err
        # nothing lost or repeated: the numbers run 1..N without a gap, as in the log itself
        nums = [int(x.split()[1]) for x in (first + out).decode().splitlines() if x.startswith("line ")]
        assert nums == list(range(1, len(nums) + 1))
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


# ---------------------------------------------------------------------------- item 2: a dropped link


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def netns() -> Iterator[tuple[str, str, str, str]]:
    """(namespace, host-side address, namespace-side address, host-side veth), torn down after."""
    tag = f"{os.getpid() % 10000}"
    ns, a, b = f"tdns{tag}", f"tdv{tag}a", f"tdv{tag}b"
    octet = os.getpid() % 200 + 20
    ip_host, ip_ns = f"10.213.{octet}.1", f"10.213.{octet}.2"
    reason = None
    if os.geteuid() != 0:
        reason = "needs root for ip netns"
    elif not shutil.which("ip") or not shutil.which("iptables"):
        reason = "needs iproute2 and iptables"
    else:
        r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
        if r.returncode != 0:
            reason = f"ip netns add is not permitted here: {r.stderr.strip()}"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        _ip("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        _ip("ip", "link", "set", b, "netns", ns)
        _ip("ip", "addr", "add", f"{ip_host}/30", "dev", a)
        _ip("ip", "link", "set", a, "up")
        _ip("ip", "addr", "add", f"{ip_ns}/30", "dev", b, ns=ns)
        _ip("ip", "link", "set", b, "up", ns=ns)
        _ip("ip", "link", "set", "lo", "up", ns=ns)
        yield ns, ip_host, ip_ns, a
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.sshd
@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", ["iptables-drop", "link-down"])
def test_follow_reports_a_dropped_link_within_keepalive_bound_while_still_down(
    sshd: SshdServer, netns: tuple[str, str, str, str], tmp_path: Path, fault: str
) -> None:
    ns, _, ip_ns, veth = netns
    keepalive, count = 1.0, 3
    # a second sshd (same keys, users and remote home) listening inside the namespace
    cfg = tmp_path / "sshd_config"
    cfg.write_text(
        sshd.config_path.read_text()
        .replace("ListenAddress 127.0.0.1", f"ListenAddress {ip_ns}")
        .replace(f"PidFile {sshd.base / 'sshd.pid'}", f"PidFile {tmp_path / 'sshd.pid'}")
    )
    sshd_log = open(tmp_path / "sshd.log", "wb")  # noqa: SIM115 - handed to sshd for its lifetime
    server = subprocess.Popen(
        ["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(cfg)],
        stdout=sshd_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    sshd_log.close()
    follow: subprocess.Popen[bytes] | None = None
    server_proc: subprocess.Popen[bytes] | None = None
    try:
        with open(sshd.known_hosts_path, "a") as kh:
            kh.write(f"[{ip_ns}]:{sshd.port} {sshd.host_key_type} {sshd.host_key_b64}\n")
        # a run folder on "the host" (same filesystem), alive: a process with its start time
        rid = "abcdef123456"
        run_dir = sshd.remote_home / "runs" / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        server_proc = subprocess.Popen(["sleep", "600"])
        st = Path(f"/proc/{server_proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        for name, text in (
            ("run.sh", ": wrapper\n"),
            ("pid", f"{server_proc.pid}\n"),
            ("starttime", f"{st}\n"),
            ("log", "hello from the server\n"),
            ("meta.json", '{"engine": "other"}'),
        ):
            (run_dir / name).write_text(text)
            (run_dir / name).chmod(0o644)
        for d in (run_dir.parent, run_dir):
            d.chmod(0o755)
        driver = (
            "import sys\n"
            "import tunedeck.commands.logs as L\n"
            "from tunedeck.hostops.ssh import SshHost\n"
            f"L.host_from_args = lambda a: SshHost(a.host, keepalive_interval={keepalive}, "
            f"keepalive_count_max={count}, connect_timeout=5, retry_attempts=3, backoff_base=0.5)\n"
            "from tunedeck.cli import main\n"
            "raise SystemExit(main(sys.argv[1:]))\n"
        )
        target = f"{sshd.user}@{ip_ns}:{sshd.port}"
        end = time.monotonic() + 20
        while time.monotonic() < end:  # sshd in the namespace is up
            if b"Server listening" in (tmp_path / "sshd.log").read_bytes():
                break
            time.sleep(0.05)
        follow = subprocess.Popen(
            [sys.executable, "-c", driver, "logs", rid, "--follow", "--host", target],
            cwd=REPO,
            env=sshd.client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        got = _read_until(follow, "stdout", b"hello from the server\n", 60)
        assert b"hello from the server" in got, (got, follow.stderr.read1() if follow.poll() is not None else b"")  # type: ignore[union-attr]
        time.sleep(1.0)  # the watcher's first check and the keepalive are under way
        if fault == "iptables-drop":  # rules inside the test's namespace only
            for chain in ("INPUT", "OUTPUT"):
                _ip("iptables", "-I", chain, "-p", "tcp", "-j", "DROP", ns=ns)
        else:
            _ip("ip", "link", "set", veth, "down")
        dropped = time.monotonic()
        err = _read_until(follow, "stderr", b"reconnecting", keepalive * count + 30)
        took = time.monotonic() - dropped
        if fault == "iptables-drop":
            link_still_down = (
                _ip("iptables", "-C", "INPUT", "-p", "tcp", "-j", "DROP", ns=ns, check=False).returncode == 0
            )
        else:
            link_still_down = "state DOWN" in _ip("ip", "link", "show", veth).stdout
        assert b"reconnecting" in err, err
        assert b"connection lost" in err, err
        assert link_still_down
        bound = keepalive * count + 5
        print(f"{fault}: dead link reported after {took:.1f} s (bound {bound:g} s)")
        assert took <= bound, f"reported after {took:.1f} s, bound {bound:g} s"
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
            follow.wait()
        if server_proc is not None:
            server_proc.kill()
            server_proc.wait()
        # the link died without a word, so the session on the "host" (and its remote tail) would wait
        # for sshd's own keepalive: end this sshd's sessions with it, so the test leaves nothing behind
        for pid in _descendants(server.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
