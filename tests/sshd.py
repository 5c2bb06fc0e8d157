"""A real OpenSSH ``sshd`` on 127.0.0.1 for SSH tests.

Import the fixtures into a test module::

    from tests.sshd import sshd_server, sshd  # noqa: F401  (pytest fixtures)

``sshd_server`` (session scope) starts one sshd on a random free high port with a
generated ed25519 host key, one generated client key authorised for both the
non-root user ``gpuop`` (generic shell tests) and ``tdroot`` (tests whose remote
side needs this machine's Python, which lives under the mode-700 ``/root``).
``tdroot`` is a uid-0 alias whose login shell is ``/bin/sh``: logging in as
``root`` itself would run root's ``.bashrc`` (``pyenv init`` on every command,
and a rehash lock left behind when a test kills a session mid-login). ``sshd`` (function scope) makes sure it is
running, points ``HOME`` at the fixture's home (``.ssh/id_ed25519`` +
``.ssh/known_hosts`` holding the right line), unsets ``SSH_AUTH_SOCK`` and
drops leftover sessions after the test.

Remote sessions get ``PATH=<shim_dir>:/usr/local/bin:/usr/bin:/bin``,
``TUNEDECK_HOME=<tmp>/remote-home`` and ``TUNEDECK_SIM_STATE=<tmp>/remote-home/sim`` from the
server's ``SetEnv``, so a test can put programs (a fake ``nvidia-smi``) first on the remote PATH by
writing them into ``shim_dir``, and each server has simulated GPUs of its own: ``tdroot``'s one
home is shared by every server, and a ``tunedeck sim`` started over SSH (not from the runtime,
which uses ``${TUNEDECK_HOME}/sim``) would otherwise keep its GPUs in that home's state dir, where
another worker's server finds them taken ("not enough memory").

When sshd is missing the fixture skips, except in CI (``CI=true``) where it fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pytest

from tests.ports import free_port

SSHD = "/usr/sbin/sshd"
TEST_USER = "gpuop"
ROOT_USER = "tdroot"
ROOT_HOME = "/var/tmp/tunedeck-test-root"


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the sshd listener when the test process dies without teardown."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort (not Linux)
        pass


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True, check=True
    ).stdout
    return out.split()[1]


def _ensure_user(name: str) -> None:
    r = subprocess.run(["id", "-u", name], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], capture_output=True, text=True)
        if r.returncode not in (0, 9):  # 9: already exists (another worker raced us)
            raise RuntimeError(f"useradd {name} failed: {r.stderr.strip()}")
    # A '!'-locked account is refused under UsePAM no; '*' allows key logins only.
    subprocess.run(["usermod", "-p", "*", name], capture_output=True, check=True)


def _ensure_root_alias() -> None:
    """A uid-0 login with /bin/sh as its shell (see the module docstring)."""
    os.makedirs(ROOT_HOME, mode=0o700, exist_ok=True)
    r = subprocess.run(["id", "-u", ROOT_USER], capture_output=True)
    if r.returncode != 0:
        r = subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", ROOT_HOME, "-s", "/bin/sh", ROOT_USER],
            capture_output=True,
            text=True,
        )
        if r.returncode not in (0, 9):
            raise RuntimeError(f"useradd {ROOT_USER} failed: {r.stderr.strip()}")
    subprocess.run(["usermod", "-p", "*", ROOT_USER], capture_output=True, check=True)


def _descendants(pid: int) -> list[int]:
    """PIDs below ``pid`` (reads /proc; no psutil needed)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


class SshdServer:
    """One sshd process (restartable on the same port) and its client-side home. ``listen`` is its
    address; with ``netns`` it runs inside that network namespace (``ip netns exec``); with
    ``sftp=False`` its config has no ``Subsystem sftp`` line (an sshd that offers exec only); ``wrap``
    is a command line sshd runs under (``unshare -m sh -c SCRIPT sh``: a mount of its own, which its
    sessions see and this process does not), the sshd's argv appended to it."""

    def __init__(
        self,
        base: Path,
        *,
        listen: str = "127.0.0.1",
        netns: str | None = None,
        sftp: bool = True,
        wrap: Sequence[str] = (),
    ) -> None:
        self.base = base
        self.wrap = list(wrap)
        self.sftp = sftp
        self.listen = listen
        self.netns = netns
        self.port = free_port()
        self.user = TEST_USER
        self.shim_dir = base / "shims"
        self.remote_home = base / "remote-home"
        self.home = base / "home"
        self.ssh_dir = self.home / ".ssh"
        self.known_hosts_path = self.ssh_dir / "known_hosts"
        self.client_key = self.ssh_dir / "id_ed25519"
        self.log_path = base / "sshd.log"
        self.config_path = base / "sshd_config"
        self.proc: subprocess.Popen[bytes] | None = None
        self._setup()

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        base = self.base
        base.chmod(0o755)  # gpuop must reach authorized_keys and the shims
        for d in (self.shim_dir,):
            d.mkdir(mode=0o755)
        self.remote_home.mkdir()
        self.remote_home.chmod(0o1777)
        self.ssh_dir.mkdir(parents=True)
        self.home.chmod(0o700)
        self.ssh_dir.chmod(0o700)
        _keygen(base / "hostkey", "tunedeck-test-host")
        _keygen(base / "otherkey", "tunedeck-test-wrong")
        _keygen(self.client_key, "tunedeck-test-client")
        self.client_key.chmod(0o600)
        auth = base / "authorized_keys"
        shutil.copy(self.client_key.with_suffix(".pub"), auth)
        auth.chmod(0o644)
        self.host_key_type, self.host_key_b64 = (base / "hostkey.pub").read_text().split()[:2]
        self.other_key_b64 = (base / "otherkey.pub").read_text().split()[1]
        self.host_key_fingerprint = _fingerprint(base / "hostkey.pub")
        self.wrong_key_fingerprint = _fingerprint(base / "otherkey.pub")
        self.config_path.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.listen}",
                    f"Port {self.port}",
                    f"HostKey {base / 'hostkey'}",
                    f"PidFile {base / 'sshd.pid'}",
                    f"AuthorizedKeysFile {auth}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "AllowAgentForwarding yes",
                    "LogLevel VERBOSE",
                    "MaxStartups 30:30:100",
                    *(["Subsystem sftp internal-sftp"] if self.sftp else []),
                    f"SetEnv PATH={self.shim_dir}:/usr/local/bin:/usr/bin:/bin TUNEDECK_HOME={self.remote_home}"
                    f" TUNEDECK_SIM_STATE={self.remote_home / 'sim'}",
                    "",
                ]
            )
        )
        self.write_known_hosts("right")

    # ------------------------------------------------------------------ client side
    @property
    def host_key_line(self) -> str:
        return f"[{self.listen}]:{self.port} {self.host_key_type} {self.host_key_b64}"

    def target(self, user: str | None = None) -> str:
        return f"{user or self.user}@{self.listen}:{self.port}"

    def write_known_hosts(self, kind: str = "right") -> Path:
        """``right`` (the server's key), ``empty``, ``wrong`` (another key for this host) or ``missing``."""
        p = self.known_hosts_path
        if kind == "missing":
            p.unlink(missing_ok=True)
            return p
        text = {
            "right": self.host_key_line + "\n",
            "empty": "",
            "wrong": f"[{self.listen}]:{self.port} ssh-ed25519 {self.other_key_b64}\n",
        }[kind]
        p.write_text(text)
        return p

    def write_ssh_config(self, text: str) -> Path:
        p = self.ssh_dir / "config"
        p.write_text(text)
        return p

    def use_home(self, monkeypatch: pytest.MonkeyPatch) -> Path:
        monkeypatch.setenv("HOME", str(self.home))
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        return self.home

    def client_env(self, **extra: str) -> dict[str, str]:
        """Environment for a CLI subprocess that should use the fixture's home."""
        env = dict(os.environ)
        env["HOME"] = str(self.home)
        env.pop("SSH_AUTH_SOCK", None)
        env.update(extra)
        return env

    def admit(self, client: "SshdServer") -> None:
        """Let ``client``'s home (its key, its known_hosts) log in here too: several "hosts"
        (sshd instances on different ports) for one client, as the fleet tests need."""
        auth = self.base / "authorized_keys"
        pub = client.client_key.with_suffix(".pub").read_text()
        if pub not in auth.read_text():
            with auth.open("a") as f:
                f.write(pub)
        known = client.known_hosts_path.read_text() if client.known_hosts_path.exists() else ""
        if self.host_key_line not in known:
            with client.known_hosts_path.open("a") as f:
                f.write(self.host_key_line + "\n")

    # ------------------------------------------------------------------ server
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        if self.running:
            return
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        t = subprocess.run([SSHD, "-t", "-f", str(self.config_path)], capture_output=True, text=True)
        if t.returncode != 0:
            raise RuntimeError(f"sshd config rejected: {t.stderr.strip()}")
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to sshd, closed here right after
        prefix = [*(["ip", "netns", "exec", self.netns] if self.netns else []), *self.wrap]
        self.proc = subprocess.Popen(
            [*prefix, SSHD, "-D", "-e", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                with socket.create_connection((self.listen, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not answer on port {self.port}: {self.log_tail()}")

    def stop(self) -> None:
        """Kill sshd and every session below it (like the host going away)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            for pid in _descendants(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.kill()
        self.proc.wait(5)
        self.proc = None

    def session_pids(self, user: str | None = None) -> list[int]:
        """PIDs of this server's ``sshd: USER@notty`` session processes."""
        if not self.running:
            return []
        assert self.proc is not None
        prefix = f"sshd: {user}@notty" if user else "sshd: "
        return [p for p in _descendants(self.proc.pid) if _cmdline(p).startswith(prefix) and "@notty" in _cmdline(p)]

    def _signal_sessions(self, user: str | None, sig: signal.Signals) -> int:
        pids = self.session_pids(user)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # the session ended on its own
        return len(pids)

    def kill_sessions(self, user: str | None = None) -> int:
        """Drop connections (kill ``sshd: USER@notty``) while sshd keeps listening."""
        return self._signal_sessions(user, signal.SIGKILL)

    def freeze_sessions(self, user: str | None = None) -> int:
        """SIGSTOP the session processes: the TCP link stays up but nothing answers (a black hole)."""
        return self._signal_sessions(user, signal.SIGSTOP)

    def processes_matching(self, needle: str) -> list[tuple[int, str]]:
        """(pid, cmdline) of every process on this machine whose command line contains ``needle``
        (other tests' too: a test that kills what this finds needs a needle of its own, such as
        this server's ``remote_home``; see :meth:`engine_pids`)."""
        out = []
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                cl = _cmdline(int(entry))
                if needle in cl:
                    out.append((int(entry), cl))
        return out

    def engine_pids(self, needle: str = " sim sglang ") -> list[int]:
        """This server's simulated engines: processes run from the runtime in its own
        ``${TUNEDECK_HOME}/lib`` whose command line holds ``needle``. Never a process of another
        test (a match on ``needle`` alone would take another test's node-rank-1 engine)."""
        lib = str(self.remote_home / "lib")
        return [pid for pid, cl in self.processes_matching(lib) if needle in cl]

    def started_here(self) -> list[tuple[int, str]]:
        """(pid, cmdline) of every process started in a session of this server: its environment
        holds this server's ``TUNEDECK_HOME`` (the runtime, a ``--cmd`` server, a follower)."""
        mark = f"TUNEDECK_HOME={self.remote_home}".encode()
        out = []
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                try:
                    env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if mark in env:
                    out.append((int(entry), _cmdline(int(entry))))
        return out

    def end_leftovers(self) -> list[str]:
        """Kill what a test left running on this server (a server it did not stop, a follower, a
        status sampler waiting out its keepalive): the next test on this server starts with its
        simulated GPUs free. Returns their command lines."""
        left = self.started_here()
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return [cl for _, cl in left]

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def sshd_missing_reason() -> str | None:
    if not os.path.exists(SSHD):
        return f"{SSHD} is not installed (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is not installed (apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "the sshd fixture needs root (it creates the test user and binds sshd)"
    return None


def _serve(*, sftp: bool = True, wrap: Callable[[Path], Sequence[str]] | None = None) -> Iterator[SshdServer]:
    """A started server (skips where sshd cannot run, fails so in CI); ``wrap(base)`` gives the
    command line it runs under, from its base folder (see :class:`SshdServer`)."""
    reason = sshd_missing_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"sshd tests cannot run in CI: {reason}")
        pytest.skip(reason)
    _ensure_user(TEST_USER)
    _ensure_root_alias()
    base = Path(tempfile.mkdtemp(prefix="tunedeck-sshd-"))
    server = SshdServer(base, sftp=sftp, wrap=wrap(base) if wrap else ())
    try:
        server.start()
    except Exception:
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def sshd_server() -> Iterator[SshdServer]:
    yield from _serve()


@pytest.fixture(scope="session")
def sshd_nosftp_server() -> Iterator[SshdServer]:
    """Another sshd whose config has no ``Subsystem sftp`` line: exec channels only."""
    yield from _serve(sftp=False)


def _use(server: SshdServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdServer]:
    server.start()
    server.write_known_hosts("right")
    (server.ssh_dir / "config").unlink(missing_ok=True)
    server.use_home(monkeypatch)
    yield server
    server.start()
    server.kill_sessions()
    # what the test left running (a server it did not stop, a command of a session it cut) ends
    # here: a server left running would hold the next test's simulated GPUs ("not enough memory")
    server.end_leftovers()
    (server.ssh_dir / "config").unlink(missing_ok=True)


@pytest.fixture
def sshd(sshd_server: SshdServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdServer]:
    """The running server, HOME pointed at its client home with the right known_hosts."""
    yield from _use(sshd_server, monkeypatch)


@pytest.fixture
def sshd_nosftp(sshd_nosftp_server: SshdServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdServer]:
    """:func:`sshd`, for the server without an SFTP subsystem."""
    yield from _use(sshd_nosftp_server, monkeypatch)


def cli(server: SshdServer, profiles: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    """``tunedeck ARGS`` as its own process, logging in as ``server``'s client (its home, key and
    known_hosts), with the profiles in ``profiles`` and no terminal."""
    from tests.conftest import REPO

    return subprocess.run(
        [sys.executable, "-m", "tunedeck", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=server.client_env(PYTHONPATH=str(REPO), TUNEDECK_PROFILES=str(profiles)),
    )
